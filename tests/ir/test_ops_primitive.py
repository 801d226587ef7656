"""Elementwise primitives against independent numpy/python formulas: shapes x dtypes x edge values.

Also holds the coverage check: every op in the table has a case table somewhere in tests/ir.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from aotc.errors import ShapeError
from aotc.ir import Attrs, DType, Op, Symbol, TensorType, sym
from aotc.ir.evaluate import run_graph
from aotc.ir.ops import BINARY, ELEMENTWISE, HIGH_LEVEL, OPS, PRIMITIVES, UNARY
from aotc.ir.shapes import ShapeCtx

from . import test_ops_highlevel, test_ops_layout, test_ops_reduce, test_ops_scatter
from .util import (
    ALL_DTYPES,
    BOOL,
    F16,
    F32,
    FLOATS,
    I32,
    I64,
    NUMERIC,
    arr,
    assert_close,
    graph_of,
    infer,
    rand,
    ref_checked,
    run_single,
    ttype,
    with_edges,
)

SHAPES = [(), (7,), (4, 5), (2, 3, 4), (2, 1, 3, 2), (0,), (3, 0, 2), (1, 1)]


def _wrap(v: int, dtype: DType) -> int:
    """Two's-complement wraparound, as torch integer arithmetic does."""
    bits = 8 * dtype.np.itemsize
    return (v + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)


def _elementwise_py(fn: Callable, *xs: np.ndarray) -> np.ndarray:
    """Apply a python scalar function over broadcast inputs (object arrays keep ints exact)."""
    bs = np.broadcast_arrays(*[x.astype(object) if x.dtype.kind in "iub" else x.astype(np.float64) for x in xs])
    out = [fn(*vals) for vals in zip(*(b.reshape(-1).tolist() for b in bs))]
    return np.array(out, dtype=object).reshape(bs[0].shape)


def _finish(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Python results -> the op's output dtype (ints wrap, floats round once)."""
    if dtype is BOOL:
        return values.astype(bool)
    if dtype.is_int:
        return np.array([_wrap(int(v), dtype) for v in values.reshape(-1)], dtype=dtype.np).reshape(values.shape)
    return arr(values.astype(np.float64), dtype)


# -- unary -----------------------------------------------------------------------------------------------


def _sign(v: float) -> float:
    return v if v != v else float((v > 0) - (v < 0))


def _round(v: float) -> float:
    return v if not math.isfinite(v) else float(round(v))  # python rounds half to even, like torch


def _np64(fn: Callable) -> Callable:
    def scalar(v: float) -> float:
        with np.errstate(all="ignore"):
            return float(fn(np.float64(v)))

    return scalar


# op -> (python/float64 formula, dtypes the rule accepts, output dtype or None for "same as input")
UNARY_CASES: dict[Op, tuple[Callable, tuple[DType, ...], DType | None]] = {
    Op.NEG: (lambda v: -v, NUMERIC, None),
    Op.ABS: (abs, NUMERIC, None),
    Op.EXP: (_np64(np.exp), FLOATS, None),
    Op.LOG: (_np64(np.log), FLOATS, None),
    Op.SQRT: (_np64(np.sqrt), FLOATS, None),
    Op.RSQRT: (_np64(lambda v: 1.0 / np.sqrt(v)), FLOATS, None),
    Op.RECIPROCAL: (_np64(lambda v: 1.0 / v), FLOATS, None),
    Op.SIN: (_np64(np.sin), FLOATS, None),
    Op.COS: (_np64(np.cos), FLOATS, None),
    Op.TANH: (_np64(np.tanh), FLOATS, None),
    Op.ERF: (lambda v: v if v != v else math.erf(v), FLOATS, None),
    Op.ACOS: (lambda v: math.acos(v) if -1 <= v <= 1 else math.nan, FLOATS, None),
    Op.ASIN: (lambda v: math.asin(v) if -1 <= v <= 1 else math.nan, FLOATS, None),
    Op.ATAN: (lambda v: v if v != v else math.atan(v), FLOATS, None),
    Op.FLOOR: (lambda v: v if not math.isfinite(v) else float(math.floor(v)), FLOATS, None),
    Op.CEIL: (lambda v: v if not math.isfinite(v) else float(math.ceil(v)), FLOATS, None),
    Op.ROUND: (_round, FLOATS, None),
    Op.SIGN: (_sign, NUMERIC, None),
    Op.NOT: (lambda v: (not v) if isinstance(v, bool) else ~v, (BOOL, I32, I64), None),
    Op.ISNAN: (lambda v: v != v, FLOATS, BOOL),
    Op.ISINF: (lambda v: math.isinf(v), FLOATS, BOOL),
}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("op", list(UNARY_CASES), ids=lambda o: o.value)
def test_unary(op: Op, dtype: DType) -> None:
    fn, allowed, out_dt = UNARY_CASES[op]
    rng = np.random.default_rng(0)
    if dtype not in allowed:
        with pytest.raises(ShapeError):
            infer(op, [TensorType(dtype, (3,))])
        return
    for shape in SHAPES:
        x = with_edges(shape, dtype, rng)
        got = ref_checked(op, [x])
        want = _finish(_elementwise_py(fn, x), out_dt or dtype)
        assert_close(got, want, out_dt or dtype)


def test_unary_signed_zero_and_rounding() -> None:
    x = arr([0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5], F32)
    assert np.signbit(ref_checked(Op.NEG, [x[:1]]))[0]
    assert not np.signbit(ref_checked(Op.ABS, [x[1:2]]))[0]
    np.testing.assert_array_equal(ref_checked(Op.ROUND, [x]), [0, -0, 0, 2, 2, -0, -2])
    np.testing.assert_array_equal(ref_checked(Op.RECIPROCAL, [x[:2]]), [np.inf, -np.inf])


def test_erf_dense_grid_matches_math_erf() -> None:
    x = np.linspace(-6.0, 6.0, 24001, dtype=np.float32)
    x = np.concatenate([x, arr([1e-30, -1e-20, 1e-7, 0.9999999, 1.0, 1.0000001, 9.0, 30.0, 1e30], F32)])
    got = ref_checked(Op.ERF, [x]).astype(np.float64)
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    err = np.abs(got - want)
    assert np.all(err <= 2e-7 * np.maximum(np.abs(want), np.finfo(np.float32).tiny)), float(np.max(err))


# -- binary ----------------------------------------------------------------------------------------------


def _div(a: float | int, b: float | int) -> float | int:
    if isinstance(a, int):  # C/ONNX: truncate toward zero; x / 0 gives 0 (documented choice)
        return 0 if b == 0 else abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    with np.errstate(all="ignore"):
        return float(np.float64(a) / np.float64(b))


def _mod(a: float | int, b: float | int) -> float | int:
    if isinstance(a, int):  # python / torch.remainder: the sign of the divisor
        return 0 if b == 0 else a % b
    if b == 0 or math.isnan(a) or math.isnan(b) or math.isinf(a):
        return math.nan
    return a % b


def _fmod(a: float | int, b: float | int) -> float | int:
    if isinstance(a, int):  # C fmod: the sign of the dividend
        return 0 if b == 0 else a - b * _div(a, b)
    if b == 0 or math.isnan(a) or math.isnan(b) or math.isinf(a):
        return math.nan
    return math.fmod(a, b)


def _pow(a: float | int, b: float | int) -> float | int:
    if isinstance(a, int):  # torch integer pow: negative exponents give 0 unless |base| == 1
        if b >= 0:
            return a**b
        return 1 if a == 1 else (-1 if b % 2 else 1) if a == -1 else 0
    with np.errstate(all="ignore"):  # C99 pow: 1-element arrays, since numpy scalars special-case x**0.5 as sqrt
        return float(np.power(np.array([a]), np.array([b]))[0])


def _extreme(pick: Callable) -> Callable:
    def fn(a: float | int, b: float | int) -> float | int:
        if a != a or b != b:  # torch.maximum / minimum propagate NaN
            return math.nan
        return pick(a, b)

    return fn


def _arith(fn: Callable) -> Callable:
    def scalar(a: float | int, b: float | int) -> float | int:
        if isinstance(a, int):
            return fn(a, b)
        with np.errstate(all="ignore"):
            return float(fn(np.float64(a), np.float64(b)))

    return scalar


ARITH = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM, Op.MINIMUM, Op.MOD, Op.FMOD)
COMPARE = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)
LOGICAL = (Op.AND, Op.OR, Op.XOR)

BINARY_CASES: dict[Op, tuple[Callable, tuple[DType, ...], DType | None]] = {
    Op.ADD: (_arith(lambda a, b: a + b), NUMERIC, None),
    Op.SUB: (_arith(lambda a, b: a - b), NUMERIC, None),
    Op.MUL: (_arith(lambda a, b: a * b), NUMERIC, None),
    Op.DIV: (_div, NUMERIC, None),
    Op.POW: (_pow, NUMERIC, None),
    Op.MAXIMUM: (_extreme(max), NUMERIC, None),
    Op.MINIMUM: (_extreme(min), NUMERIC, None),
    Op.MOD: (_mod, NUMERIC, None),
    Op.FMOD: (_fmod, NUMERIC, None),
    Op.EQ: (lambda a, b: a == b, ALL_DTYPES, BOOL),
    Op.NE: (lambda a, b: a != b, ALL_DTYPES, BOOL),
    Op.LT: (lambda a, b: a < b, ALL_DTYPES, BOOL),
    Op.LE: (lambda a, b: a <= b, ALL_DTYPES, BOOL),
    Op.GT: (lambda a, b: a > b, ALL_DTYPES, BOOL),
    Op.GE: (lambda a, b: a >= b, ALL_DTYPES, BOOL),
    # python's &, |, ^ on ints are two's complement of unbounded width, on bools logical
    Op.AND: (lambda a, b: a & b, (BOOL, I32, I64), None),
    Op.OR: (lambda a, b: a | b, (BOOL, I32, I64), None),
    Op.XOR: (lambda a, b: a ^ b, (BOOL, I32, I64), None),
}

# (a shape, b shape, broadcast result) as in numpy.
BROADCASTS = [
    ((2, 1), (2,), (2, 2)),
    ((1, 3), (4, 1), (4, 3)),
    ((3,), (2, 1, 3), (2, 1, 3)),
    ((), (2, 3), (2, 3)),
    ((), (), ()),
    ((0,), (1,), (0,)),
    ((2, 0, 1), (3,), (2, 0, 3)),
    ((1, 1), (1,), (1, 1)),
    ((2, 3, 4), (2, 3, 4), (2, 3, 4)),
]
BAD_BROADCASTS = [((2, 3), (3, 2)), ((2,), (3,)), ((0,), (2,)), ((2, 2, 4), (3, 4))]


def _grid(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values, so each op meets inf/nan/zero/negative on both sides."""
    if dtype is BOOL:
        vals = np.array([True, False])
    elif dtype.is_int:
        vals = arr([0, 1, -1, 7, -7, 3, -3, 2, 10], dtype)
    else:
        vals = arr([0.0, -0.0, 1.0, -1.0, 2.5, -7.5, 3.0, 0.5, np.inf, -np.inf, np.nan, 1e30, 1e-30, 2.0], dtype)
    a, b = np.meshgrid(vals, vals, indexing="ij")
    return a.copy(), b.copy()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("op", list(BINARY_CASES), ids=lambda o: o.value)
def test_binary(op: Op, dtype: DType) -> None:
    fn, allowed, out_dt = BINARY_CASES[op]
    out_dt = out_dt or dtype
    rng = np.random.default_rng(1)
    if dtype not in allowed:
        with pytest.raises(ShapeError):
            infer(op, [TensorType(dtype, (3,))] * 2)
        return
    a, b = _grid(dtype)
    assert_close(ref_checked(op, [a, b]), _finish(_elementwise_py(fn, a, b), out_dt), out_dt)
    for sa, sb, want_shape in BROADCASTS:
        x, y = rand(sa, dtype, rng), rand(sb, dtype, rng)
        if op is Op.POW and dtype.is_int:
            y = np.abs(y) % 4  # keep integer powers small
        assert infer(op, [ttype(x), ttype(y)]).shape == want_shape
        got = ref_checked(op, [x, y])
        assert_close(got, _finish(_elementwise_py(fn, x, y), out_dt), out_dt)
    for sa, sb in BAD_BROADCASTS:
        with pytest.raises(ShapeError, match="broadcast"):
            infer(op, [TensorType(dtype, sa), TensorType(dtype, sb)])
    other = I64 if dtype is not I64 else I32
    with pytest.raises(ShapeError, match="one dtype"):
        infer(op, [TensorType(dtype, (2,)), TensorType(other, (2,))])


@pytest.mark.parametrize("op", [Op.ADD, Op.MUL, Op.DIV, Op.LT, Op.AND], ids=lambda o: o.value)
def test_binary_through_graph_runner(op: Op) -> None:
    dtype = BOOL if op is Op.AND else F32
    rng = np.random.default_rng(2)
    a, b = rand((2, 1, 3), dtype, rng), rand((4, 1), dtype, rng)
    fn, _, out_dt = BINARY_CASES[op]
    assert_close(run_single(op, [a, b]), _finish(_elementwise_py(fn, a, b), out_dt or dtype), out_dt or dtype)


def test_integer_division_semantics() -> None:
    a = arr([7, -7, 7, -7, 0, 5, -5, 3, -(2**31), 2**31 - 1], I32)
    b = arr([2, 2, -2, -2, 3, 0, 0, 5, 2, -1], I32)
    np.testing.assert_array_equal(ref_checked(Op.DIV, [a, b]), [3, -3, -3, 3, 0, 0, 0, 0, -(2**30), -(2**31 - 1)])
    np.testing.assert_array_equal(ref_checked(Op.MOD, [a, b]), [1, 1, -1, -1, 0, 0, 0, 3, 0, 0])
    np.testing.assert_array_equal(ref_checked(Op.FMOD, [a, b]), [1, -1, 1, -1, 0, 0, 0, 3, 0, 0])
    big = arr([-(2**63), -(2**63) + 1, 2**63 - 1], I64)
    np.testing.assert_array_equal(
        ref_checked(Op.DIV, [big, arr([2, 3, -7], I64)]), [-(2**62), -3074457345618258602, -1317624576693539401]
    )


def test_float_mod_and_fmod_signs() -> None:
    a, b = arr([5.5, -5.5, 5.5, -5.5, -0.0], F32), arr([2.0, 2.0, -2.0, -2.0, 3.0], F32)
    np.testing.assert_array_equal(ref_checked(Op.MOD, [a, b]), [1.5, 0.5, -0.5, -1.5, 0.0])
    np.testing.assert_array_equal(ref_checked(Op.FMOD, [a, b]), [1.5, -1.5, 1.5, -1.5, -0.0])
    assert np.all(np.isnan(ref_checked(Op.MOD, [a[:2], arr([0.0, -0.0], F32)])))


def test_integer_pow_is_exact_and_wraps() -> None:
    a, b = arr([3, 2, -3, 2, 1, -1, -1, 0, 5], I64), arr([39, 62, 3, -1, -5, -3, -4, -2, 0], I64)
    np.testing.assert_array_equal(ref_checked(Op.POW, [a, b]), [3**39, 2**62, -27, 0, 1, -1, 1, 0, 1])
    np.testing.assert_array_equal(ref_checked(Op.POW, [arr([2], I32), arr([31], I32)]), [-(2**31)])
    np.testing.assert_array_equal(ref_checked(Op.ADD, [arr([2**31 - 1], I32), arr([1], I32)]), [-(2**31)])


def test_nan_propagates_through_maximum_and_comparisons_are_false() -> None:
    a, b = arr([np.nan, 1.0, np.nan], F16), arr([1.0, np.nan, np.nan], F16)
    assert np.all(np.isnan(ref_checked(Op.MAXIMUM, [a, b])))
    assert np.all(np.isnan(ref_checked(Op.MINIMUM, [a, b])))
    for op in (Op.EQ, Op.LT, Op.LE, Op.GT, Op.GE):
        assert not ref_checked(op, [a, b]).any()
    assert ref_checked(Op.NE, [a, b]).all()


def test_arithmetic_on_bool_and_bitwise_ops_on_floats_are_rejected() -> None:
    with pytest.raises(ShapeError, match="bool"):
        infer(Op.ADD, [TensorType(BOOL, (2,))] * 2)
    for op in (Op.AND, Op.OR, Op.XOR):
        with pytest.raises(ShapeError, match="bool or integer inputs, got float16"):
            infer(op, [TensorType(F16, (2,))] * 2)
    with pytest.raises(ShapeError, match="bool or integer input, got float32"):
        infer(Op.NOT, [TensorType(F32, (2,))])


def test_bitwise_ops_on_ints_are_twos_complement_and_on_bools_logical() -> None:
    a = arr([-(2**31), -1, -6, 0, 5, 2**31 - 1], I32)
    b = arr([-1, 2**31 - 1, 3, -1, -4, -(2**31)], I32)
    np.testing.assert_array_equal(ref_checked(Op.AND, [a, b]), [-(2**31), 2**31 - 1, 2, 0, 4, 0])
    np.testing.assert_array_equal(ref_checked(Op.OR, [a, b]), [-1, -1, -5, -1, -3, -1])
    np.testing.assert_array_equal(ref_checked(Op.XOR, [a, b]), [2**31 - 1, -(2**31), -7, -1, -7, -1])
    np.testing.assert_array_equal(ref_checked(Op.NOT, [a]), [2**31 - 1, 0, 5, -1, -6, -(2**31)])
    big = arr([-(2**63), 2**62 + 1], I64)
    np.testing.assert_array_equal(ref_checked(Op.NOT, [big]), [2**63 - 1, -(2**62) - 2])
    t, f = arr([True, True, False, False], BOOL), arr([True, False, True, False], BOOL)
    for op, want in ((Op.AND, [1, 0, 0, 0]), (Op.OR, [1, 1, 1, 0]), (Op.XOR, [0, 1, 1, 0])):
        got = ref_checked(op, [t, f])
        assert got.dtype == np.bool_ and got.tolist() == [bool(w) for w in want]
    assert ref_checked(Op.NOT, [t[1:3]]).tolist() == [False, True]  # not ~1 == -2: logical on bool


def test_symbolic_broadcasting() -> None:
    s, t = sym("s"), sym("t")
    ctx = ShapeCtx({"s": (2, 8), "t": (2, 8)})
    assert infer(Op.ADD, [TensorType(F32, (s, 1)), TensorType(F32, (1, t))], ctx).shape == (s, t)
    assert infer(Op.MUL, [TensorType(F32, (s, t)), TensorType(F32, (t,))], ctx).shape == (s, t)
    with pytest.raises(ShapeError, match="broadcast"):
        infer(Op.ADD, [TensorType(F32, (s,)), TensorType(F32, (t,))], ctx)
    with pytest.raises(ShapeError, match="broadcast"):
        infer(Op.ADD, [TensorType(F32, (s,)), TensorType(F32, (4,))], ctx)
    eq = ShapeCtx({"s": (2, 8), "t": (2, 8)}, equalities=[(s, t)])
    assert infer(Op.ADD, [TensorType(F32, (s,)), TensorType(F32, (t,))], eq).shape == (s,)
    # 2*s - s is s: the rule decides by normalized arithmetic, not by spelling
    assert infer(Op.ADD, [TensorType(F32, (2 * s - s, 3)), TensorType(F32, (s, 1))], ctx).shape == (s, 3)


# -- where and cast (their tests: OTHER_ELEMENTWISE) --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.value)
def test_where(dtype: DType) -> None:
    rng = np.random.default_rng(3)
    for sc, sa, sb, want_shape in [
        ((2, 3), (2, 3), (2, 3), (2, 3)),
        ((2, 1), (3,), (), (2, 3)),
        ((), (4,), (1, 4), (1, 4)),
        ((0, 1), (1, 5), (5,), (0, 5)),
    ]:
        c, a, b = rand(sc, BOOL, rng), with_edges(sa, dtype, rng), rand(sb, dtype, rng)
        got = ref_checked(Op.WHERE, [c, a, b])
        assert got.shape == want_shape
        want = _elementwise_py(lambda cv, av, bv: av if cv else bv, c, a, b)
        assert_close(got, _finish(want, dtype), dtype)
    with pytest.raises(ShapeError, match="condition"):
        infer(Op.WHERE, [TensorType(F32, (2,)), TensorType(dtype, (2,)), TensorType(dtype, (2,))])
    with pytest.raises(ShapeError, match="one dtype"):
        infer(
            Op.WHERE, [TensorType(BOOL, (2,)), TensorType(dtype, (2,)), TensorType(I64 if dtype is I32 else I32, (2,))]
        )
    with pytest.raises(ShapeError, match="broadcast"):
        infer(Op.WHERE, [TensorType(BOOL, (3,)), TensorType(dtype, (2,)), TensorType(dtype, (2,))])


OTHER_ELEMENTWISE = {Op.WHERE: "test_where", Op.CAST: "test_cast"}


def _cast_scalar(v: float | int | bool, to: DType) -> float | int | bool:
    if to is BOOL:
        return v != 0 or v != v  # NaN is truthy, as in torch
    if to.is_float:
        return float(v)
    if isinstance(v, float):  # truncate toward zero; NaN/inf -> 0 and saturate out-of-range (documented)
        if not math.isfinite(v):
            return 0
        info = np.iinfo(to.np)
        return max(int(info.min), min(int(info.max), math.trunc(v)))
    return int(v)


@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("dst", ALL_DTYPES, ids=lambda d: d.value)
def test_cast(src: DType, dst: DType) -> None:
    rng = np.random.default_rng(4)
    for shape in SHAPES:
        x = with_edges(shape, src, rng)
        got = ref_checked(Op.CAST, [x], dtype=dst)
        want = _finish(_elementwise_py(lambda v: _cast_scalar(v, dst), x), dst)
        assert_close(got, want, dst)
    with pytest.raises(ShapeError, match="dtype"):
        infer(Op.CAST, [TensorType(src, (2,))], dtype="float32")


def test_cast_truncates_and_saturates() -> None:
    x = arr([2.7, -2.7, 1e10, -1e10, np.nan, np.inf, -0.5], F32)
    np.testing.assert_array_equal(ref_checked(Op.CAST, [x], dtype=I32), [2, -2, 2**31 - 1, -(2**31), 0, 0, 0])
    np.testing.assert_array_equal(ref_checked(Op.CAST, [x], dtype=BOOL), [1, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(ref_checked(Op.CAST, [arr([2**31 + 5], I64)], dtype=I32), [-(2**31) + 5])


# -- required whole-graph checks ---------------------------------------------------------------------------


def test_sum_of_broadcast_add_matches_numpy() -> None:
    a = np.array([[1.0], [2.0]], np.float32)
    b = np.array([10.0, 20.0], np.float32)

    def body(bld, ins):
        s = bld.op(Op.ADD, *ins)
        assert s.type.shape == (2, 2)
        return [bld.op(Op.REDUCE_SUM, s, axes=(0, 1), keepdim=False)]

    g = graph_of([ttype(a), ttype(b)], body)
    (y,) = run_graph(g, [a, b], {})
    assert y.shape == () and y == np.sum(a + b) == 66.0


def test_softmax_of_huge_logit_is_exact_in_ref_and_decomposition() -> None:
    x = np.array([1000.0, 0.0], np.float32)
    ref = ref_checked(Op.SOFTMAX, [x], axis=-1)
    np.testing.assert_array_equal(ref, [1.0, 0.0])

    def body(bld, ins):
        return OPS[Op.SOFTMAX].decompose(bld, ins, Attrs(axis=-1))

    g = graph_of([ttype(x)], body)
    assert {n.op for n in g.nodes} <= PRIMITIVES
    (y,) = run_graph(g, [x], {})
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y, [1.0, 0.0])


def test_symbolic_elementwise_graph_runs_for_many_bindings() -> None:
    s = sym("s")
    syms = [Symbol("s", 1, 16)]
    g = graph_of(
        [TensorType(F16, (s, 3)), TensorType(F16, (3,))],
        lambda bld, ins: [bld.op(Op.EXP, bld.op(Op.SUB, *ins))],
        syms,
    )
    rng = np.random.default_rng(5)
    for n in (1, 2, 9, 16):
        a, b = rand((n, 3), F16, rng), rand((3,), F16, rng)
        (y,) = run_graph(g, [a, b], {"s": n})
        assert_close(y, arr(np.exp(a.astype(np.float64) - b.astype(np.float64)), F16), F16)


# -- coverage ---------------------------------------------------------------------------------------------


def test_every_op_has_a_case_table() -> None:
    tables = [UNARY_CASES, BINARY_CASES, test_ops_layout.CASES, test_ops_reduce.CASES, test_ops_highlevel.CASES]
    tables.append(test_ops_scatter.CASES)
    covered = set(OTHER_ELEMENTWISE).union(*tables)
    assert covered >= set(Op), f"ops without tests: {sorted(o.value for o in set(Op) - covered)}"
    assert set(UNARY_CASES) == UNARY and set(BINARY_CASES) == BINARY
    assert ELEMENTWISE == UNARY | BINARY | {Op.WHERE, Op.CAST}
    assert set(test_ops_highlevel.CASES) == HIGH_LEVEL
    assert set(Op) == set(OPS) == PRIMITIVES | HIGH_LEVEL
    for op, d in OPS.items():
        assert d.op is op and callable(d.infer) and callable(d.ref)
        lo, hi = d.arity
        assert 0 <= lo and (hi is None or hi >= lo)
