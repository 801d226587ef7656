"""Reductions, arg-reductions, batched matmul and N-d convolution against loop formulas in float64."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from aotc.errors import ExecError, ShapeError
from aotc.ir import DType, Op, TensorType, sym
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic_values import evaluate

from .util import (
    ALL_DTYPES,
    BOOL,
    F16,
    F32,
    FLOATS,
    I32,
    I64,
    arr,
    assert_close,
    infer,
    rand,
    ref_checked,
    run_single,
    with_edges,
)

T = TensorType


def _red_sum(vals: list) -> Any:
    return sum(vals, 0)


def _red_prod(vals: list) -> Any:
    return math.prod(vals)


def _red_extreme(pick: Any, empty_float: float, empty_int: str) -> Any:
    def fn(vals: list, dtype: DType) -> Any:
        if not vals:
            return empty_float if dtype.is_float else int(getattr(np.iinfo(dtype.np), empty_int))
        if any(v != v for v in vals):  # NaN propagates, as in torch.amax
            return math.nan
        return pick(vals)

    return fn


REDUCERS = {
    Op.REDUCE_SUM: lambda vals, dt: _red_sum(vals),
    Op.REDUCE_PROD: lambda vals, dt: _red_prod(vals),
    Op.REDUCE_MAX: _red_extreme(max, -math.inf, "min"),
    Op.REDUCE_MIN: _red_extreme(min, math.inf, "max"),
}

REDUCE_CASES = [
    ((2, 3, 4), axes, keep) for axes in [(), (0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)] for keep in (False, True)
] + [
    ((5,), (0,), False),
    ((), (), False),
    ((), (0,), True),
    ((3, 0, 2), (1,), False),
    ((3, 0, 2), (0,), True),
    ((1, 1), (0, 1), False),
]


def _py(x: np.ndarray) -> np.ndarray:
    return x.astype(object) if x.dtype.kind in "iub" else x.astype(np.float64)


def _reduce_expected(op: Op, x: np.ndarray, axes: tuple, keep: bool, dtype: DType) -> np.ndarray:
    axes = tuple(a for a in axes if a < x.ndim)  # a rank-0 tensor reduces over nothing
    out_shape = (
        tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        if keep
        else tuple(d for i, d in enumerate(x.shape) if i not in axes)
    )
    xp = _py(x)
    kept = [i for i in range(x.ndim) if i not in axes]
    out = []
    for o in np.ndindex(*[x.shape[i] for i in kept]):
        vals = []
        for r in np.ndindex(*[x.shape[i] for i in axes]):
            idx = [0] * x.ndim
            for i, v in zip(kept, o):
                idx[i] = v
            for i, v in zip(axes, r):
                idx[i] = v
            vals.append(xp[tuple(idx)])
        out.append(REDUCERS[op](vals, dtype))
    res = np.array(out, dtype=object).reshape(out_shape)
    if dtype.is_int:
        bits = 8 * dtype.np.itemsize
        wrap = np.vectorize(lambda v: (int(v) + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1), otypes=[object])
        return np.asarray(wrap(res) if res.size else res, dtype=object).astype(dtype.np).reshape(out_shape)
    return arr(res.astype(np.float64), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("op", list(REDUCERS), ids=lambda o: o.value)
def test_reduction(op: Op, dtype: DType) -> None:
    if dtype is BOOL:
        with pytest.raises(ShapeError, match="bool"):
            infer(op, [T(dtype, (3,))], axes=(0,))
        return
    rng = np.random.default_rng(20)
    for shape, axes, keep in REDUCE_CASES:
        x = with_edges(shape, dtype, rng) if op in (Op.REDUCE_MAX, Op.REDUCE_MIN) else rand(shape, dtype, rng, -2, 2)
        got = ref_checked(op, [x], axes=axes, keepdim=keep)
        assert_close(got, _reduce_expected(op, x, axes, keep, dtype), dtype, scale=4.0)
    for bad in [(1, 0), (-1,), (0, 0), (3,), 1, None]:
        with pytest.raises(ShapeError, match=r"axes|axis"):
            infer(op, [T(dtype, (2, 3, 4))], axes=bad)


def test_reduction_of_half_accumulates_in_float32() -> None:
    x = np.full((4096,), 1.0, np.float16)  # a float16 running sum would stall at 2048
    assert ref_checked(Op.REDUCE_SUM, [x], axes=(0,)) == 4096


# -- arg reductions ------------------------------------------------------------------------------------------


def _arg_expected(x: np.ndarray, axis: int, keep: bool, largest: bool) -> np.ndarray:
    if x.ndim == 0:
        return np.zeros((), np.int64)
    moved = np.moveaxis(_py(x), axis, -1)
    out = np.zeros(moved.shape[:-1], np.int64)
    for o in np.ndindex(*moved.shape[:-1]):
        row = list(moved[o])
        nans = [i for i, v in enumerate(row) if v != v]
        if nans:  # NaN is the extreme both ways, as in torch
            out[o] = nans[0]
        else:
            best = max(row) if largest else min(row)
            out[o] = row.index(best)  # the first of tied extremes
    return np.expand_dims(out, axis) if keep else out


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("op", [Op.ARGMAX, Op.ARGMIN], ids=lambda o: o.value)
def test_arg_reduction(op: Op, dtype: DType) -> None:
    rng = np.random.default_rng(21)
    for shape, axis, keep in [((2, 3, 4), a, k) for a in (0, 1, 2, -1) for k in (False, True)] + [
        ((5,), 0, False),
        ((), 0, False),
    ]:
        x = with_edges(shape, dtype, rng) if dtype.is_float else rand(shape, dtype, rng, -1, 1)
        got = ref_checked(op, [x], axis=axis, keepdim=keep)
        assert got.dtype == np.int64
        want = _arg_expected(x, axis % max(x.ndim, 1), keep, op is Op.ARGMAX)
        np.testing.assert_array_equal(got, want)
    ties = arr([1, 3, 3, -2, -2], dtype) if dtype is not BOOL else np.array([False, True, True])
    assert ref_checked(op, [ties], axis=0) == (1 if op is Op.ARGMAX else (3 if dtype is not BOOL else 0))
    with pytest.raises(ShapeError, match="out of range"):
        infer(op, [T(dtype, (2, 3))], axis=2)


def test_arg_reduction_over_empty_axis_is_an_exec_error() -> None:
    with pytest.raises(ExecError):
        run_single(Op.ARGMAX, [np.zeros((2, 0), np.float32)], axis=1)


# -- matmul -------------------------------------------------------------------------------------------------

MATMUL_CASES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),
    ((4, 5), (2, 5, 3)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((0, 4), (4, 3)),
    ((3, 0), (0, 2)),
    ((1, 1), (1, 1)),
]


def _matmul_expected(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    pa, pb = np.broadcast_to(_py(a), batch + a.shape[-2:]), np.broadcast_to(_py(b), batch + b.shape[-2:])
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    out = np.zeros(batch + (m, n), dtype=object)
    for bi in np.ndindex(*batch):
        for i, j in itertools.product(range(m), range(n)):
            out[bi + (i, j)] = sum((pa[bi + (i, t)] * pb[bi + (t, j)] for t in range(k)), 0)
    return out.astype(dtype.np) if dtype.is_int else arr(out.astype(np.float64), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.value)
def test_matmul(dtype: DType) -> None:
    if dtype is BOOL:
        with pytest.raises(ShapeError, match="numeric"):
            infer(Op.MATMUL, [T(dtype, (2, 2))] * 2)
        return
    rng = np.random.default_rng(22)
    for sa, sb in MATMUL_CASES:
        a, b = rand(sa, dtype, rng), rand(sb, dtype, rng)
        got = ref_checked(Op.MATMUL, [a, b])
        assert_close(got, _matmul_expected(a, b, dtype), dtype, scale=4.0)
    for sa, sb, match in [
        ((2, 3), (4, 5), "inner"),
        ((3,), (3, 2), "rank"),
        ((2, 3), (3,), "rank"),
        ((2, 3, 4), (3, 4, 5), "broadcast"),
    ]:
        with pytest.raises(ShapeError, match=match):
            infer(Op.MATMUL, [T(dtype, sa), T(dtype, sb)])
    with pytest.raises(ShapeError, match="one dtype"):
        infer(Op.MATMUL, [T(dtype, (2, 2)), T(F16 if dtype is not F16 else F32, (2, 2))])


def test_symbolic_matmul() -> None:
    b, s, d = sym("b"), sym("s"), sym("d")
    ctx = ShapeCtx({"b": (1, 4), "s": (1, 64), "d": (1, 8)})
    assert infer(Op.MATMUL, [T(F32, (b, s, 4)), T(F32, (4, 7))], ctx).shape == (b, s, 7)
    assert infer(Op.MATMUL, [T(F32, (b, s, d)), T(F32, (b, d, s))], ctx).shape == (b, s, s)
    with pytest.raises(ShapeError, match="inner"):
        infer(Op.MATMUL, [T(F32, (b, s, d)), T(F32, (s, d))], ctx)


# -- convolution ---------------------------------------------------------------------------------------------

CONV_CASES = [
    ((2, 4, 9), (6, 2, 3), {"strides": (2,), "pads": (1, 2), "dilations": (2,), "groups": 2}),
    ((1, 3, 7, 6), (4, 3, 3, 2), {"strides": (2, 1), "pads": (1, 1, 0, 1), "dilations": (1, 2), "groups": 1}),
    ((2, 4, 5, 5), (4, 1, 3, 3), {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "groups": 4}),
    (
        (1, 2, 4, 5, 3),
        (3, 2, 2, 3, 1),
        {"strides": (1, 2, 1), "pads": (0, 0, 1, 0, 0, 0), "dilations": (1, 1, 1), "groups": 1},
    ),
    ((2, 3, 4, 4), (5, 3, 1, 1), {}),
    ((1, 2, 3, 3), (1, 2, 3, 3), {}),
]


def _conv_expected(x: np.ndarray, w: np.ndarray, attrs: dict, dtype: DType) -> np.ndarray:
    nsp = x.ndim - 2
    st, pads = attrs.get("strides", (1,) * nsp), attrs.get("pads", (0,) * 2 * nsp)
    dil, groups = attrs.get("dilations", (1,) * nsp), attrs.get("groups", 1)
    xf, wf = x.astype(np.float64), w.astype(np.float64)
    n = x.shape[0]
    cout, cin_g = w.shape[:2]
    ks = w.shape[2:]
    padded = [x.shape[2 + i] + pads[2 * i] + pads[2 * i + 1] for i in range(nsp)]
    out_sp = [(padded[i] - dil[i] * (ks[i] - 1) - 1) // st[i] + 1 for i in range(nsp)]
    out = np.zeros((n, cout, *out_sp))
    for ni, oc in itertools.product(range(n), range(cout)):
        g = oc // (cout // groups)
        for o in np.ndindex(*out_sp):
            acc = 0.0
            for ic in range(cin_g):
                for k in np.ndindex(*ks):
                    pos = [o[i] * st[i] + k[i] * dil[i] - pads[2 * i] for i in range(nsp)]
                    if all(0 <= p < x.shape[2 + i] for i, p in enumerate(pos)):
                        acc += xf[(ni, g * cin_g + ic, *pos)] * wf[(oc, ic, *k)]
            out[(ni, oc, *o)] = acc
    return arr(out, dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.value)
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv(case: int, dtype: DType) -> None:
    sx, sw, attrs = CONV_CASES[case]
    rng = np.random.default_rng(23 + case)
    x, w = rand(sx, dtype, rng, -1, 1), rand(sw, dtype, rng, -1, 1)
    got = ref_checked(Op.CONV, [x, w], **attrs)
    assert_close(got, _conv_expected(x, w, attrs, dtype), dtype, scale=8.0)


@pytest.mark.parametrize("dtype", (I32, I64, BOOL), ids=lambda d: d.value)
def test_conv_rejects_non_float(dtype: DType) -> None:
    with pytest.raises(ShapeError, match="float"):
        infer(Op.CONV, [T(dtype, (1, 2, 4, 4)), T(dtype, (2, 2, 3, 3))])


@pytest.mark.parametrize(
    ("sx", "sw", "attrs", "match"),
    [
        ((1, 3, 5, 5), (4, 2, 3, 3), {}, "channels"),
        ((1, 4, 5, 5), (3, 2, 3, 3), {"groups": 2}, "divisible"),
        ((1, 2, 2, 2), (1, 2, 3, 3), {}, "smaller than the kernel"),
        ((1, 2, 5, 5), (1, 2, 3, 3), {"strides": (0, 1)}, "strides"),
        ((1, 2, 5, 5), (1, 2, 3, 3), {"strides": (1,)}, "one entry per spatial dim"),
        ((1, 2, 5, 5), (1, 2, 3, 3), {"pads": (1, 1, -1, 0)}, "pads"),
        ((1, 2, 5, 5), (1, 2, 3, 3), {"groups": 0}, "groups"),
        ((1, 2, 5, 5), (1, 2, 3, 3), {"strides": None}, "strides"),
        ((1, 2, 5, 5), (1, 2, 3, 3), {"dilations": 2}, "dilations"),
        ((1, 2, 5, 5), (1, 2, 3), {}, "same rank"),
        ((2, 5), (1, 2), {}, "same rank"),
    ],
)
def test_bad_conv_raises_shape_error(sx: tuple, sw: tuple, attrs: dict, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        infer(Op.CONV, [T(F32, sx), T(F32, sw)], **attrs)


def test_symbolic_conv_output_sizes() -> None:
    b, h, w, c = sym("b"), sym("h"), sym("w"), sym("c")
    ctx = ShapeCtx({"b": (1, 4), "h": (3, 40), "w": (5, 33), "c": (1, 8)})
    attrs = {"strides": (2, 3), "pads": (1, 1, 0, 2), "dilations": (1, 2)}
    out = infer(Op.CONV, [T(F32, (b, 3, h, w)), T(F32, (8, 3, 3, 3))], ctx, **attrs)
    assert out.shape[:2] == (b, 8)
    for hv in range(3, 41):
        for wv in (5, 6, 7, 20, 33):
            oh = (hv + 2 - 3) // 2 + 1
            ow = (wv + 2 - (2 * 2 + 1)) // 3 + 1
            env = {"b": 1, "h": hv, "w": wv}
            assert (evaluate(out.shape[2], env), evaluate(out.shape[3], env)) == (oh, ow)
    # the input may be smaller than the kernel for some bindings: the rule refuses rather than guess
    with pytest.raises(ShapeError, match="smaller than the kernel"):
        infer(Op.CONV, [T(F32, (b, 3, h, w)), T(F32, (8, 3, 5, 5))], ctx)
    # symbolic input channels must equal weight channels times groups
    with pytest.raises(ShapeError, match="channels"):
        infer(Op.CONV, [T(F32, (1, c, 5, 5)), T(F32, (4, c, 3, 3))], ctx, groups=2)
    grouped = infer(Op.CONV, [T(F32, (1, 2 * c, 5, 5)), T(F32, (4, c, 3, 3))], ctx, groups=2)
    assert grouped.shape == (1, 4, 3, 3)


CASES: dict[Op, Any] = {
    **{op: REDUCE_CASES for op in REDUCERS},
    Op.ARGMAX: "test_arg_reduction",
    Op.ARGMIN: "test_arg_reduction",
    Op.MATMUL: MATMUL_CASES,
    Op.CONV: CONV_CASES,
}
