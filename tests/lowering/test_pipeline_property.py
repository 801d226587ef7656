"""Property: for random high-level graphs, the lowered primitive graph computes what the graph did."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotc.ir import Builder, DType, Graph, Op, Symbol, TensorType, sym, verify
from aotc.ir.evaluate import run_graph
from aotc.ir.shapes import ShapeCtx
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower

F32 = DType.float32
D = 6  # the static feature dim; rows are the dynamic dim `seq`

UNARY = [Op.RELU, Op.SIGMOID, Op.SILU, Op.TANH, Op.EXP, Op.NEG, Op.ABS]
BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.MAXIMUM, Op.MINIMUM]
STEPS = ["unary", "binary", "gelu", "softmax", "log_softmax", "layer_norm", "rms_norm", "linear", "mean", "permute2"]


def build(steps: list[tuple[str, int]], seed: int) -> Graph:
    rng = np.random.default_rng(seed)
    seq = sym("seq")
    b = Builder(ShapeCtx({"seq": (1, 16)}))
    x = b.new_value(TensorType(F32, (seq, D)))
    constants: dict[str, np.ndarray] = {}

    def const(shape: tuple[int, ...]):
        name = f"c{len(constants)}"
        constants[name] = rng.standard_normal(shape).astype(np.float32) * 0.5
        return b.op(Op.CONSTANT, name=name, shape=shape, dtype=F32)

    live = [x]
    for kind, k in steps:
        v = live[k % len(live)]
        if kind == "unary":
            y = b.op(UNARY[k % len(UNARY)], v)
        elif kind == "binary":
            other = live[(k // 3) % len(live)] if k % 2 else const((D,))  # tensor-tensor or broadcast row
            y = b.op(BINARY[k % len(BINARY)], v, other)
        elif kind == "gelu":
            y = b.op(Op.GELU, v, approximate="tanh" if k % 2 else "none")
        elif kind in ("softmax", "log_softmax"):
            y = b.op(Op.SOFTMAX if kind == "softmax" else Op.LOG_SOFTMAX, v, axis=-1 if k % 2 else 0)
        elif kind == "layer_norm":
            y = b.op(Op.LAYER_NORM, v, const((D,)), const((D,)), ndim=1, eps=1e-5)
        elif kind == "rms_norm":
            y = b.op(Op.RMS_NORM, v, const((D,)), ndim=1, eps=1e-6)
        elif kind == "linear":
            y = b.op(Op.LINEAR, v, const((D, D)), const((D,)))
        elif kind == "mean":
            y = b.op(Op.ADD, v, b.op(Op.REDUCE_MEAN, v, axes=(0,), keepdim=True))
        else:  # a transpose there and back, which simplification should remove
            y = b.op(Op.PERMUTE, b.op(Op.PERMUTE, v, perm=(1, 0)), perm=(1, 0))
        live.append(y)
    outs = tuple(live[-2:]) if len(live) > 2 else (live[-1],)
    tree = {"tuple": list(range(len(outs)))}
    return Graph((x,), ("x",), tuple(b.nodes), outs, tree, (Symbol("seq", 1, 16),), (), constants)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 1000)), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
    rows=st.integers(1, 16),
)
def test_lowering_preserves_values(steps: list[tuple[str, int]], seed: int, rows: int) -> None:
    graph = build(steps, seed)
    verify(graph, "built")
    lowered = lower(graph, CompileOptions(verify_each_stage=True))
    x = np.random.default_rng(seed + 1).standard_normal((rows, D)).astype(np.float32)
    env = {"seq": rows}
    with np.errstate(all="ignore"):
        expected = run_graph(graph, [x], env)
        got = run_graph(lowered, [x], env)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=2e-4, atol=2e-5, equal_nan=True)
