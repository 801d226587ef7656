"""Pointwise kernels under the interpreter against the cpu backend: broadcasting, every elementwise op, casts,
half precision, and every view (reshape, permute, broadcast, slice, pad, concat, flip) as index math."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from aotc.ir import DType, Op, Symbol, TensorType
from aotc.ir.symbolic import sym
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check

F32, I32, I64 = DType.float32, DType.int32, DType.int64
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}

UNARY = [Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.RECIPROCAL, Op.SIN, Op.COS, Op.TANH, Op.ERF]
UNARY += [Op.FLOOR, Op.CEIL, Op.ROUND, Op.SIGN]
BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM, Op.MINIMUM, Op.MOD, Op.FMOD]
COMPARE = [Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE]


def _edge_floats(n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(n).astype(np.float32) * 3
    x[:8] = [0.0, -0.0, 0.5, 1.5, -2.5, 1e-4, -30.0, 30.0]
    return x


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", UNARY, ids=lambda o: o.value)
def test_unary(op: Op, dtype: str) -> None:
    g = make_graph({"x": TensorType(DType(dtype), (4, 50))}, lambda b, x: [b.op(op, x)])
    x = _edge_floats(200, np.random.default_rng(0)).reshape(4, 50)
    if op in (Op.LOG, Op.SQRT, Op.RSQRT):
        x = np.abs(x) + 0.1
    if dtype != "float32":
        x = np.clip(x, -8, 8)  # exp stays finite in float16
    tol = {"float32": (2e-6, 1e-6), "float16": (1e-3, 1e-3), "bfloat16": (8e-3, 8e-3)}[dtype]
    check(g, [x.astype(NP[dtype])], tol=tol)


@pytest.mark.parametrize("op", BINARY + COMPARE, ids=lambda o: o.value)
def test_binary_broadcasting(op: Op) -> None:
    """(3, 1, 5) against (4, 1): every dim broadcasts one way or the other."""
    g = make_graph({"a": TensorType(F32, (3, 1, 5)), "b": TensorType(F32, (4, 1))}, lambda b, x, y: [b.op(op, x, y)])
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 1, 5)).astype(np.float32) * 2
    c = rng.standard_normal((4, 1)).astype(np.float32) * 2 + 0.1
    if op is Op.POW:
        a = np.abs(a) + 0.5
    check(g, [a, c], tol=(1e-5, 1e-6))


@pytest.mark.parametrize("op", [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MOD, Op.FMOD, Op.MAXIMUM, Op.LT])
def test_integer_ops_follow_the_references(op: Op) -> None:
    """Integer division truncates toward zero, x / 0 and x % 0 are 0, mod takes the divisor's sign."""
    g = make_graph({"a": TensorType(I32, (12,)), "b": TensorType(I32, (12,))}, lambda b, x, y: [b.op(op, x, y)])
    a = np.array([7, -7, 7, -7, 0, 5, -5, 9, 100, -100, 3, 1], np.int32)
    d = np.array([2, 2, -2, -2, 3, 0, 0, 4, 7, 7, -5, 1], np.int32)
    check(g, [a, d])


def test_where_cast_and_logic() -> None:
    def body(b, x, y):
        m = b.op(Op.AND, b.op(Op.GT, x, y), b.op(Op.NOT, b.op(Op.ISNAN, x)))
        w = b.op(Op.WHERE, m, x, b.full(-float("inf"), F32))
        return [w, b.cast(x, I64), b.cast(m, F32), b.cast(b.cast(x, DType.float16), F32)]

    g = make_graph({"x": TensorType(F32, (6,)), "y": TensorType(F32, (6,))}, body)
    x = np.array([1.5, -2.7, np.nan, 0.0, 7.9, -0.4], np.float32)
    check(g, [x, np.zeros(6, np.float32)])


def test_a_cast_constant_is_folded_into_a_literal() -> None:
    """ProphetNet casts constants (a full of int 1 to float, of 2.7 to int, of nan to int, of 0 to bool): the
    kernel writes the converted literal, as the cast reference converts it (`1.to(...)` was not Python)."""

    def body(b, x):
        one, frac, nan = b.full(1, I64), b.full(-2.7, F32), b.full(float("nan"), F32)
        return [
            b.op(Op.ADD, x, b.cast(one, F32)),
            b.op(Op.ADD, b.cast(x, I32), b.cast(frac, I32)),
            b.op(Op.ADD, b.cast(x, I64), b.cast(nan, I64)),
            b.op(Op.OR, b.op(Op.GT, x, b.full(0.0, F32)), b.cast(b.full(0, I32), DType.bool)),
        ]

    g = make_graph({"x": TensorType(F32, (6,))}, body)
    check(g, [np.array([1.5, -2.7, 3.0, 0.0, 7.9, -0.4], np.float32)])


def _view_graph(fn, shape=(2, 3, 4), dtype=F32, symbols=()):
    return make_graph({"x": TensorType(dtype, shape)}, lambda b, x: [b.op(Op.NEG, fn(b, x))], symbols=symbols)


VIEWS = {
    "reshape_merge": lambda b, x: b.reshape(x, (6, 4)),
    "reshape_split": lambda b, x: b.reshape(x, (2, 3, 2, 2)),
    "reshape_across": lambda b, x: b.reshape(x, (4, 6)),
    "reshape_unsqueeze": lambda b, x: b.reshape(x, (2, 1, 3, 4, 1)),
    "permute": lambda b, x: b.permute(x, (2, 0, 1)),
    "broadcast": lambda b, x: b.op(Op.BROADCAST, b.reshape(x, (2, 3, 1, 4)), shape=(5, 2, 3, 2, 4)),
    "slice_steps": lambda b, x: b.op(Op.SLICE, x, starts=(1, 0, 1), stops=(2, 3, 4), steps=(1, 2, 2)),
    "pad": lambda b, x: b.op(Op.PAD, x, pads=(0, 1, 2, 0, 1, 1), value=-1.5),
    "flip": lambda b, x: b.op(Op.FLIP, x, axes=(0, 2)),
    "concat": lambda b, x: b.op(Op.CONCAT, x, b.op(Op.EXP, x), x, axis=1),
    "chain": lambda b, x: b.op(
        Op.FLIP, b.permute(b.reshape(b.op(Op.PAD, x, pads=(0, 0, 1, 1, 0, 0)), (10, 4)), (1, 0)), axes=(1,)
    ),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_are_index_math(name: str) -> None:
    g = _view_graph(VIEWS[name])
    s = check(g, [np.arange(24, dtype=np.float32).reshape(2, 3, 4)])
    assert len(s.kernels) == 1 and not s.buffers  # the view is folded into the one kernel


def test_symbolic_concat_and_slice() -> None:
    n = Symbol("n", 1, 64)

    def body(b, x):
        c = b.op(Op.CONCAT, x, b.op(Op.MUL, x, x), axis=0)
        return [b.op(Op.SLICE, c, starts=(1, 0), stops=(c.type.shape[0], 3), steps=(1, 1))]

    g = make_graph({"x": TensorType(F32, (sym("n"), 3))}, body, symbols=(n,))
    rng = np.random.default_rng(0)
    for v in (1, 9):
        check(g, [rng.standard_normal((v, 3)).astype(np.float32)], {"n": v})


def test_iota_and_full_are_inline() -> None:
    def body(b, x):
        i = b.op(Op.IOTA, shape=(4, 5), axis=1, dtype=F32)
        return [b.op(Op.ADD, x, b.op(Op.MUL, i, b.full(2.0, F32))), b.full(7, I32, (3,))]

    g = make_graph({"x": TensorType(F32, (4, 5))}, body)
    s = check(g, [np.ones((4, 5), np.float32)])
    assert all(k.inputs in ((), (0,)) for k in s.kernels)


def test_pooling_is_one_kernel() -> None:
    """Max pool 2x2 stride 2 as the decomposition writes it: strided slices and maximum."""

    def body(b, x):
        parts = [
            b.op(Op.SLICE, x, starts=(0, 0, i, j), stops=(2, 3, 7 + i, 7 + j), steps=(1, 1, 2, 2))
            for i in (0, 1)
            for j in (0, 1)
        ]
        m = parts[0]
        for p in parts[1:]:
            m = b.op(Op.MAXIMUM, m, p)
        return [m]

    g = make_graph({"x": TensorType(F32, (2, 3, 8, 8))}, body)
    s = check(g, [np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)])
    assert len(s.kernels) == 1


def test_output_reshape_is_a_view_not_a_kernel() -> None:
    g = make_graph({"x": TensorType(F32, (2, 6))}, lambda b, x: [b.reshape(b.op(Op.EXP, x), (3, 4))])
    s = check(g, [np.zeros((2, 6), np.float32)])
    assert len(s.kernels) == 1 and len(s.views) == 1
    assert s.views[0].value == g.outputs[0].id and s.views[0].base in s.kernels[0].outputs


def test_output_permute_is_written_by_the_kernel_computing_it() -> None:
    g = make_graph({"x": TensorType(F32, (2, 6))}, lambda b, x: [b.permute(b.op(Op.EXP, x), (1, 0))])
    s = check(g, [np.arange(12, dtype=np.float32).reshape(2, 6)])
    assert len(s.kernels) == 1 and "exp" in s.kernels[0].fused


def test_output_and_its_transpose_come_from_one_kernel() -> None:
    def body(b, x):
        y = b.op(Op.EXP, x)
        return [y, b.permute(y, (1, 0)), b.op(Op.FLIP, b.reshape(y, (3, 4)), axes=(0,))]

    g = make_graph({"x": TensorType(F32, (2, 6))}, body)
    s = check(g, [np.arange(12, dtype=np.float32).reshape(2, 6) / 7])
    (k,) = s.kernels
    assert set(k.outputs) == {v.id for v in g.outputs}


def test_transposed_matmul_output_is_stored_by_the_matmul() -> None:
    def body(b, x, w):
        return [b.permute(b.op(Op.ADD, b.op(Op.MATMUL, x, w), b.full(1.0, F32)), (1, 0))]

    g = make_graph({"x": TensorType(F32, (5, 3)), "w": TensorType(F32, (3, 4))}, body)
    rng = np.random.default_rng(0)
    s = check(g, [rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)])
    (k,) = s.kernels
    assert k.kind.value == "matmul" and k.outputs == (g.outputs[0].id,) and not s.buffers
