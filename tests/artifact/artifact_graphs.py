"""Graphs for the artifact tests, built with the IR Builder, and exact graph comparison."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from graph_kit import const, make_graph

from aotc.ir import Builder, DType, Graph, Guard, Op, Symbol, TensorType, Value, sym

F32, I64, BOOL = DType.float32, DType.int64, DType.bool


def mlp_source(seed: int = 0) -> Graph:
    """A high-level two-layer MLP with a residual, over symbolic (batch, seq), with a recorded guard."""
    rng = np.random.default_rng(seed)
    consts = {
        "fc1.weight": rng.standard_normal((32, 16)).astype(np.float32) * 0.3,
        "fc1.bias": rng.standard_normal(32).astype(np.float32) * 0.1,
        "fc2.weight": rng.standard_normal((16, 32)).astype(np.float32) * 0.3,
    }
    batch, seq = sym("batch"), sym("seq")

    def body(b: Builder, x: Value) -> list[Value]:
        w1, b1, w2 = (const(b, k, v) for k, v in consts.items())
        h = b.op(Op.GELU, b.op(Op.LINEAR, x, w1, b1), approximate="tanh")
        y = b.op(Op.ADD, x, b.op(Op.LINEAR, h, w2))
        return [y, b.op(Op.SOFTMAX, y, axis=2), b.op(Op.REDUCE_SUM, y, axes=(1, 2), keepdim=False)]

    return make_graph(
        {"x": TensorType(F32, (batch, seq, 16))},
        body,
        symbols=(Symbol("batch", 1, 8), Symbol("seq", 2, 64, multiple_of=2)),
        guards=(Guard(seq, "<=", 48, "model.py:12"),),
        constants=consts,
        tree={"tuple": [{"dict": [["y", 0], ["probs", 1]]}, {"list": [2]}]},
        name="mlp",
    )


def attr_zoo() -> Graph:
    """Primitive nodes whose attrs cover int, float (inf, -inf, nan, -0.0), bool, DType, SymExpr and
    tuples of ints and SymExprs. Str and None attrs come from high-level ops: see ``high_level_zoo``."""
    n = sym("n")

    def body(b: Builder, x: Value, i: Value) -> list[Value]:
        outs = [
            b.full(math.inf, F32, (n,)),
            b.full(-math.inf, F32, (2, n)),
            b.full(math.nan, F32, ()),
            b.full(-0.0, F32, (3,)),
            b.full(True, BOOL, (n, 1)),
            b.full(7, I64, (1,)),
            b.full(n * 2 + 1, I64, ()),  # a symbolic value
            b.op(Op.CAST, x, dtype=I64),
            b.op(Op.REDUCE_MAX, x, axes=(0,), keepdim=True),
            b.op(Op.SLICE, x, starts=(1,), stops=(n // 2 + 1,), steps=(1,)),
            b.op(Op.PAD, x, pads=(0, 3), value=-1.5),
            b.op(Op.IOTA, shape=(n, 4), axis=1, dtype=DType.int32),
            b.op(Op.GATHER, x, i, axis=0),
        ]
        return outs

    return make_graph(
        {"x": TensorType(F32, (n,)), "i": TensorType(I64, (3,))},
        body,
        symbols=(Symbol("n", 2, 100, multiple_of=2),),
        guards=(Guard(n * 2, "!=", 6, "zoo.py:1 – ünïcode"), Guard(n // 2 + 1, "<=", n, "")),
        name="zoo",
    )


def high_level_zoo() -> Graph:
    """High-level nodes with str, None, bool and float attrs (a source graph)."""
    seq = sym("seq")

    def body(b: Builder, q: Value, k: Value, v: Value) -> list[Value]:
        a = b.op(Op.SDPA, q, k, v, is_causal=True, scale=None)
        return [b.op(Op.GELU, a, approximate="none"), b.op(Op.LAYER_NORM, a, ndim=1, eps=1e-5)]

    t = TensorType(F32, (2, seq, 8))
    return make_graph({"q": t, "k": t, "v": t}, body, symbols=(Symbol("seq", 1, 32),), name="attn")


# -- exact comparison ----------------------------------------------------------------------------


def same_value(a: Any, b: Any) -> bool:
    """Equal including kind: True != 1, 1 != 1.0, (1,) != [1], nan == nan, -0.0 != 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b


def assert_same_graph(a: Graph, b: Graph) -> None:
    assert a.name == b.name
    assert a.input_names == b.input_names
    assert a.inputs == b.inputs
    assert a.outputs == b.outputs
    assert a.output_tree == b.output_tree
    assert a.symbols == b.symbols
    assert a.guards == b.guards
    assert len(a.nodes) == len(b.nodes)
    for x, y in zip(a.nodes, b.nodes):
        assert (x.op, x.inputs, x.outputs, x.loc) == (y.op, y.inputs, y.outputs, y.loc)
        assert list(x.attrs) == list(y.attrs)
        for k in x.attrs:
            assert same_value(x.attrs[k], y.attrs[k]), (x.op, k, x.attrs[k], y.attrs[k])
    assert sorted(a.constants) == sorted(b.constants)
    for k, arr in a.constants.items():
        other = b.constants[k]
        assert arr.dtype == other.dtype and arr.shape == other.shape
        assert arr.tobytes() == other.tobytes()
