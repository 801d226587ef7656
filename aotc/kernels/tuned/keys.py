"""The key a tuned-table entry is filed under: what a launch's best tiles depend on, and nothing that varies
between two calls of the same kernel.

- the template (its kind and ``REVISION``: a rewritten kernel body makes every older entry stale) and its
  epilogue class (``none``; ``vector``: bias-like reads; ``tile``: another full [M, N] tile read, a residual);
- the dtypes (operands, then what it stores) and the dot's input precision;
- static dims exact (a matmul's N and K, a head dim, causal, the mask's kind, the operands' layout);
- for attention and matmul, how the operands load (``loads``): ``descriptor`` where the target and toolchain
  let the kernel take tensor descriptors (TMA: sm_90+, PTX 8.6+, fp16 or bf16 operands), else ``pointer``.
  The two are different kernels (a TMA ring in shared memory, no address registers), so tiles timed for one
  say little about the other; and since a relaxed lookup ignores the toolchain (whose PTX version picks the
  form), the form must be in the key itself;
- dynamic dims bucketed to the next power of two of their value at the tuning shape: each symbol at its
  maximum (what the heuristics size for) or at ``CompileOptions.tune_dims``.

GPU (name, SM count) and toolchain (Triton, ptxas, PTX version) are the entry's other two parts
(aotc/kernels/tuned/table.py); the compiler relaxes the toolchain, never the kernel key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops.reduce import dot_precision
from aotc.ir.symbolic import SymExpr
from aotc.ir.symbolic_values import bounds, evaluate
from aotc.ir.templates import ROOTED_AT
from aotc.ir.types import Node

Size = int | SymExpr
# What each tunable template's kernel body is: bump one when its code changes enough that tiles tuned for the
# old body no longer say anything about the new one (a table entry of another revision is stale: ignored).
REVISIONS = {"matmul": 1, "conv": 1, "attention": 2, "recurrent_cell": 1}
_DOT_DTYPES = (DType.float32, DType.float16, DType.bfloat16)


def bucket(n: int) -> int:
    """The next power of two at or above ``n`` (1 for n <= 1): dynamic dims are keyed by it."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def tuning_env(graph: Graph, dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """Each symbol at ``dims``' value or its maximum: the shape a table lookup sizes for (as the heuristics and
    ``--autotune`` do)."""
    dims = dict(dims or {})
    return {s.name: int(dims.get(s.name, s.max)) for s in graph.symbols}


def kernel_key(
    graph: Graph,
    root: Node | None,
    nodes: Sequence[int],
    env: Mapping[str, int] | None = None,
    group: Any = None,
    target: tuple[int, int | None] | None = None,
) -> dict[str, Any] | None:
    """The key of the tunable launch rooted at ``root`` that computes ``nodes`` (graph node indices), or of the
    node group ``group`` it computes whole (a recurrence's chain: aotc/kernels/fusion_groups.py), at the tuning
    shape ``env`` (default: every symbol at its maximum), for a kernel built for ``target``: (compute capability,
    PTX version or None), which picks the load form (None: a target without TMA). None when its template is not
    tuned (or a depthwise convolution, whose direct kernel has no tiles to tune)."""
    env = tuning_env(graph) if env is None else dict(env)

    def size(d: Size) -> int:
        if isinstance(d, int):
            return d
        try:
            return evaluate(d, env)
        except Exception:  # a symbol the env lacks: size for its upper bound
            return bounds(d, graph.ranges)[1]

    if root is None:
        return _chain_key(group.detail, size) if group is not None and group.kind == "recurrent_cell" else None
    kind = _kind(root)
    if kind is None:
        return None
    if kind == "attention":
        from aotc.kernels.attention import attention_shape

        s = attention_shape(root)
        mask = root.inputs[3] if len(root.inputs) > 3 else None
        q, k = root.inputs[0], root.inputs[1]
        gqa = q.type.shape[:-2] != k.type.shape[:-2]
        static = {
            "head_dim": s.d,
            "value_dim": s.e,
            "causal": bool(root.attrs.get("is_causal", False)),
            "mask": "none" if mask is None else ("bool" if mask.type.dtype is DType.bool else "float"),
            "layout": f"batch{len(s.batch)}" + ("-broadcast_kv" if gqa else ""),
            "loads": _loads(target, q.type.dtype),
        }
        batch = 1
        for d in s.batch:
            batch *= size(d)
        buckets = {"batch": bucket(batch), "q_len": bucket(size(s.lq)), "kv_len": bucket(size(s.lk))}
        dtypes = [q.type.dtype.value, root.outputs[0].type.dtype.value]
        precision = "ieee" if q.type.dtype is DType.float32 else "default"
        epilogue = "none"
    else:
        if kind == "matmul":
            from aotc.kernels.matmul import matmul_shape

            m = matmul_shape(root)
            rows, n, kk, batch = m.rows, m.n, m.k, m.batch_count
        else:
            from aotc.kernels.conv import conv_shape

            c = conv_shape(root)
            if c.depthwise:
                return None
            rows, n, kk, batch = c.rows, c.c_out_group, c.c_in_group * c.taps, c.groups
        static, buckets = {}, {"rows": bucket(size(rows)), "batch": bucket(size(batch))}
        for name, d in (("n", n), ("k", kk)):
            if isinstance(d, int):
                static[name] = d
            else:
                buckets[name] = bucket(size(d))
        a = root.inputs[0].type.dtype
        if a not in _DOT_DTYPES:
            return None  # integer products: one register-tile config, nothing to tune
        if kind == "matmul":  # the convolution template has no descriptor form
            static["loads"] = _loads(target, a)
        dtypes = [a.value, root.inputs[1].type.dtype.value, root.outputs[0].type.dtype.value]
        precision = dot_precision(root.attrs) if a is DType.float32 else "default"
        epilogue = epilogue_class(graph, root, nodes)
    return {
        "template": kind,
        "revision": REVISIONS[kind],
        "epilogue": epilogue,
        "dtypes": dtypes,
        "precision": precision,
        "static": static,
        "buckets": buckets,
    }


def _loads(target: tuple[int, int | None] | None, dtype: DType) -> str:
    """``descriptor`` where a kernel for ``target`` with ``dtype`` operands may load them through tensor
    descriptors (the target's and toolchain's part of the rule; an operand whose layout TMA cannot take still
    keeps its pointers inside such a kernel, and says why in its comment), else ``pointer``."""
    from aotc.kernels.attention_tma import why_not_tma

    if target is None:
        return "pointer"
    arch, ptx = target
    return "pointer" if why_not_tma(arch, ptx, dtype) is not None else "descriptor"


def _chain_key(detail: Any, size: Any) -> dict[str, Any]:
    """A recurrence's key: the state's width, each product's K and the steps (and whether they loop) are static;
    the rows (the batch) are bucketed."""
    from aotc.kernels.recurrent import chain_cells
    from aotc.kernels.recurrent_loop import Loop

    cells = chain_cells(detail)
    rows, h = cells[0].slices[0].outputs[0].type.shape
    products = [p for c in cells for p in c.products]
    a = products[0].inputs[0].type.dtype
    static = {
        "state": int(h),
        "k": sorted({int(p.inputs[1].type.shape[0]) for p in products}),
        "steps": len(cells),
        "form": "loop" if isinstance(detail, Loop) else "unrolled",
    }
    return {
        "template": "recurrent_cell",
        "revision": REVISIONS["recurrent_cell"],
        "epilogue": "none",
        "dtypes": [a.value, cells[0].gates.outputs[0].type.dtype.value],
        "precision": dot_precision(products[0].attrs) if a is DType.float32 else "default",
        "static": static,
        "buckets": {"rows": bucket(size(rows))},
    }


def _kind(root: Node) -> str | None:
    row = ROOTED_AT.get(root.op)
    return None if row is None or not row.tuning else str(row.kind)


def epilogue_class(graph: Graph, root: Node, nodes: Sequence[int]) -> str:
    """``none`` (the product alone), ``vector`` (its epilogue reads at most rows or columns: a bias) or ``tile``
    (it reads another tile of the output's shape: a residual), which changes what a tile costs to store."""
    at = next(i for i, n in enumerate(graph.nodes) if n is root)
    produced = {o.id for i in (*nodes, at) for o in graph.nodes[i].outputs}
    out = root.outputs[0].type.shape
    # the epilogue follows the root in graph order; what precedes it (a weight's transpose) feeds its operands
    others = [graph.nodes[i] for i in sorted(set(nodes)) if i > at]
    if not others:
        return "none"
    for node in others:
        for x in node.inputs:
            if x.id in produced or x.type.rank < 2:
                continue
            if all(d != 1 for d in x.type.shape[-2:]) and x.type.shape[-1] == out[-1]:
                return "tile"
    return "vector"
