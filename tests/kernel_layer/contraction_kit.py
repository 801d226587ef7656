"""Test support for the contraction templates: run one emitted Kernel under the Triton interpreter
and compare what it stores with the cpu backend (the op table's numpy references)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from aotc.ir.evaluate import GraphRunner
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.schedule import ArgKind, Kernel
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import Node
from aotc.kernels.emit import KernelBuilder

# (atol, rtol) per dtype against the cpu backend. fp32 dots run in IEEE fp32 with another summation
# order than numpy; 16-bit results differ by the rounding of the output and of epilogue intermediates,
# a few ulps of an 11-bit (fp16) or 8-bit (bf16) mantissa at the products' magnitude (K up to 1000).
TOLERANCE = {
    "float32": (1e-4, 1e-4),
    "float16": (2e-2, 1e-2),
    "bfloat16": (1.5e-1, 3e-2),
    "int32": (0, 0),
    "int64": (0, 0),
}


def random_feeds(graph: Graph, env: Mapping[str, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = []
    for v in graph.inputs:
        shape = tuple(evaluate(d, env) for d in v.type.shape)
        dt = v.type.dtype.np
        if dt.kind in "iu":
            feeds.append(rng.integers(-5, 6, size=shape).astype(dt))
        else:
            feeds.append(rng.standard_normal(shape).astype(np.float32).astype(dt))
    return feeds


def run_kernel(graph: Graph, kernel: Kernel, feeds: Sequence[np.ndarray], env: Mapping[str, int]) -> dict:
    """Launch ``kernel`` with the graph inputs/constants it reads; returns {value id: array} of what it wrote."""
    from aotc.runtime.backends.triton_interp import launch

    known: dict[int, np.ndarray] = {v.id: np.ascontiguousarray(x) for v, x in zip(graph.inputs, feeds)}
    for node in graph.nodes:
        if node.op is Op.CONSTANT:
            known[node.outputs[0].id] = np.ascontiguousarray(graph.constants[node.attrs["name"]])
    types = {o.id: o.type for n in graph.nodes for o in n.outputs}
    written: dict[int, np.ndarray] = {}
    args = []
    for arg in kernel.args:
        if arg.kind is ArgKind.SIZE:
            args.append(evaluate(arg.size, env))
        elif arg.kind is ArgKind.BUFFER:
            if arg.value in known:
                args.append(known[arg.value])
            else:
                t = types[arg.value]
                buf = np.zeros(tuple(evaluate(d, env) for d in t.shape), dtype=t.dtype.np)
                written[arg.value] = buf
                args.append(buf)
        else:
            args.append(np.zeros(max(len(kernel.checks), 1), np.int32))
    grid = [evaluate(g, env) for g in kernel.grid]
    # Masked-off lanes compute on filler values (log(0), ...): numpy's warnings there are not errors.
    with np.errstate(all="ignore"):
        launch(kernel, grid, args)
    return written


def check_kernel(graph: Graph, kernel: Kernel, env: Mapping[str, int] | None = None, seed: int = 0) -> None:
    """The kernel's stored outputs equal the cpu backend's values of the same graph values."""
    env = dict(env or {})
    feeds = random_feeds(graph, env, seed)
    got = run_kernel(graph, kernel, feeds, env)
    wanted = {v.id for v in graph.outputs}
    assert set(kernel.outputs) <= set(got), (kernel.outputs, sorted(got))
    expected = dict(zip((v.id for v in graph.outputs), GraphRunner(graph).run(feeds, env)))
    assert set(kernel.outputs) <= wanted, "test graphs must return every value the kernel stores"
    for vid in kernel.outputs:
        exp, out = expected[vid], got[vid]
        atol, rtol = TOLERANCE[exp.dtype.name]
        np.testing.assert_allclose(
            out.astype(np.float64), exp.astype(np.float64), atol=atol, rtol=rtol, err_msg=f"value %{vid}"
        )


def builder_for(graph: Graph, anchor: Node) -> KernelBuilder:
    """A KernelBuilder for a kernel anchored at ``anchor`` that computes every other node of the
    (small) test graph inline: views and casts feeding the operands, and the epilogue."""
    producers = {o.id: (i, n) for i, n in enumerate(graph.nodes) for o in n.outputs}
    inline = {o.id for n in graph.nodes if n is not anchor and n.op is not Op.CONSTANT for o in n.outputs}
    return KernelBuilder(graph, inline, producers)


def anchor_of(graph: Graph, op: Op) -> Node:
    (node,) = [n for n in graph.nodes if n.op is op]
    return node


def epilogue_of(graph: Graph, anchor: Node) -> list[Node]:
    """The pointwise nodes after ``anchor`` with its output shape: what a scheduler would fuse."""
    from aotc.kernels.contraction_emit import can_fuse_epilogue

    after = graph.nodes[graph.nodes.index(anchor) + 1 :]
    return [n for n in after if can_fuse_epilogue(anchor, n)]
