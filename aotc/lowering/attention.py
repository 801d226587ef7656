"""Attention kept whole: SDPA survives decomposition, and hand-written attention is folded back into it.

With ``CompileOptions.fuse_attention`` the pipeline decomposes every high-level op but SDPA, then
``fuse_attention`` finds ``softmax(q @ k^T * scale + mask) @ v`` written out by hand (or imported from
ONNX MatMul/Softmax graphs) in the primitive graph and rewrites it to one SDPA node, so the scheduler
can give it the flash-attention kernel. What is recognized, and how reshapes of the batch dims
are handled, is ``aotc.lowering.attention_match``'s to say.

``explain_attention`` lists the near misses — a softmax feeding a matmul that did not fold — with the
reason (a finite masked_fill value, probabilities that are also returned, an op between the scores and
the softmax that is not a scale or a mask, ...), for ``--explain``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from aotc.errors import VerifyError
from aotc.ir.analysis import analyze
from aotc.ir.graph import Graph
from aotc.ir.ops import HIGH_LEVEL, KEPT_WHOLE, OPS, Op
from aotc.ir.types import Node, Value
from aotc.ir.verify import verify
from aotc.lowering.attention_match import AttentionMatch, Matcher, Miss, operand_shapes
from aotc.lowering.cse import dce
from aotc.lowering.rewrite import Rewriter, rewrite

__all__ = ["decompose_keeping_attention", "explain_attention", "fuse_attention", "verify_fused"]

KEPT = KEPT_WHOLE


def decompose_keeping_attention(graph: Graph) -> Graph:
    """``decompose`` for every high-level op except SDPA, which the attention kernel takes whole."""
    ops = HIGH_LEVEL - KEPT

    def expand(rw: Rewriter, node: Node, inputs: Sequence[Value]) -> Sequence[Value]:
        return OPS[node.op].decompose(rw.b, inputs, node.attrs)

    # a decomposition may emit other high-level ops: repeat until none but SDPA is left
    while any(n.op in ops for n in graph.nodes):
        graph = rewrite(graph, [(ops, expand)])
    return graph


def verify_fused(graph: Graph, stage: str = "lowered") -> None:
    """``verify`` for a lowered graph that may keep SDPA nodes: every other op must be a primitive."""
    verify(graph, stage=stage, primitive_only=True)


def _match_all(graph: Graph) -> tuple[list[AttentionMatch], list[str]]:
    facts = analyze(graph)
    matches, misses = [], []
    for i, node in enumerate(graph.nodes):
        if node.op is not Op.MATMUL:
            continue
        m = Matcher(graph, facts)
        try:
            match = m.match(i, node)
        except Miss as e:
            misses.append(f"attention {m.where} not fused: {e}")
            continue
        if match is not None:
            matches.append(match)
    return matches, misses


def explain_attention(graph: Graph) -> list[str]:
    """Why each softmax @ v that looks like attention was not folded into SDPA (empty: none missed)."""
    return _match_all(graph)[1]


def fuse_attention(graph: Graph) -> Graph:
    """Rewrite every hand-written attention in the primitive ``graph`` to one SDPA node."""
    matches, _ = _match_all(graph)
    if not matches:
        return graph
    by_anchor = {m.anchor: m for m in matches}
    rw = Rewriter(graph)
    b = rw.b
    remap: dict[int, Value] = {v.id: v for v in graph.inputs}
    for i, node in enumerate(graph.nodes):
        b.loc = node.loc
        m = by_anchor.get(i)
        if m is not None:
            out = _emit_sdpa(b, m, lambda v: remap[v.id])
            if out.type != node.outputs[0].type:  # _check_types proved this; a mismatch is a bug here
                raise VerifyError(f"attention fusion at node {i} changed the type {node.outputs[0].type} to {out.type}")
            remap[node.outputs[0].id] = out
            continue
        inputs = tuple(remap[v.id] for v in node.inputs)
        same = all(a is c for a, c in zip(inputs, node.inputs))
        b.nodes.append(node if same else node.replace(inputs=inputs))
        for o in node.outputs:
            remap[o.id] = o
    out = graph.replace(nodes=tuple(b.nodes), outputs=tuple(remap[o.id] for o in graph.outputs))
    return dce(out)


def _emit_sdpa(b, m: AttentionMatch, new: Callable[[Value], Value]) -> Value:
    q, kt, v = (b.reshape(new(x), shape) for x, shape in zip((m.q, m.kt, m.v), operand_shapes(m)))
    rank = q.type.rank
    k = b.permute(kt, tuple(range(rank - 2)) + (rank - 1, rank - 2))
    dt = q.type.dtype

    def placed(x: Value) -> Value:  # a mask, fitted to the batch dims attention runs over
        return _fit(b, new(x), rank)

    mask = None
    for fm, after in m.float_masks:
        x = b.cast(placed(fm), dt)
        if after != 1.0:
            x = b.op(Op.MUL, x, b.full(after, dt))
        mask = x if mask is None else b.op(Op.ADD, mask, x)
    if m.fill is not None:
        cond, keeps, value = m.fill
        fill, zero = b.full(value, dt), b.full(0.0, dt)
        mask = b.op(Op.WHERE, placed(cond), *((zero, fill) if keeps else (fill, zero)))
    keep = None
    for bm, keeps in m.keep_masks:
        x = placed(bm) if keeps else b.op(Op.NOT, placed(bm))
        keep = x if keep is None else b.op(Op.AND, keep, x)
    if keep is not None:
        mask = keep if mask is None else b.op(Op.WHERE, keep, mask, b.full(-math.inf, dt))
    # a where zeroing the rows with no allowed key around the softmax (m.zero_masked_rows; for the bias form,
    # _check_rows_bias proved these are the rows whose bias is -inf everywhere) needs nothing more: SDPA gives 0
    # on exactly those rows
    out = b.op(Op.SDPA, q, k, v, *([mask] if mask is not None else []), is_causal=False, scale=m.scale)
    return out if m.out_shape is None else b.reshape(out, m.out_shape)


def _fit(b, x: Value, rank: int) -> Value:
    """``x`` with its leading 1s dropped down to ``rank`` (a mask of another grouping, fitted by _fits)."""
    return x if x.type.rank <= rank else b.reshape(x, x.type.shape[x.type.rank - rank :])
