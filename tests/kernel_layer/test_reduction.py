"""Reductions under the interpreter against the cpu backend: every op along every axis, row sizes from 1 to
70,000 (persistent and looped kernels), softmax and layer norm as one kernel each, half precision."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from aotc.ir import DType, Op, Symbol, TensorType
from aotc.ir.symbolic import sym
from aotc.kernels.scheduler import schedule_graph
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check

F32 = DType.float32
REDUCE_OPS = [Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD, Op.ARGMAX, Op.ARGMIN]


def _reduce(op: Op, shape: tuple, axis: int, keepdim: bool = True, dtype: DType = F32, symbols=()):
    def body(b, x):
        if op in (Op.ARGMAX, Op.ARGMIN):
            return [b.op(op, x, axis=axis, keepdim=keepdim)]
        return [b.op(op, x, axes=(axis,), keepdim=keepdim)]

    return make_graph({"x": TensorType(dtype, shape)}, body, symbols=symbols)


def _data(rng: np.random.Generator, shape: tuple, op: Op) -> np.ndarray:
    if op is Op.REDUCE_PROD:  # products of numbers near 1 stay finite over long rows
        return rng.uniform(0.999, 1.001, shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op", REDUCE_OPS, ids=lambda o: o.value)
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_every_axis(op: Op, axis: int) -> None:
    shape = (3, 5, 7)
    g = _reduce(op, shape, axis, keepdim=axis != 1)
    check(g, [_data(np.random.default_rng(axis), shape, op)], tol=(1e-5, 1e-5))


@pytest.mark.parametrize("row", [1, 7, 1000, 5000, 70000])
@pytest.mark.parametrize("op", REDUCE_OPS, ids=lambda o: o.value)
def test_row_sizes(op: Op, row: int) -> None:
    shape = (2, row)
    g = _reduce(op, shape, 1)
    s = check(g, [_data(np.random.default_rng(row), shape, op)], tol=(1e-4, 1e-4))
    (k,) = s.kernels
    looped = "for r0 in range" in k.source
    assert looped == (row > 8192), k.source


def test_symbolic_row_and_rows() -> None:
    n, m = Symbol("n", 1, 20000), Symbol("m", 1, 8)
    g = _reduce(Op.REDUCE_SUM, (sym("m"), sym("n")), 1, symbols=(n, m))
    rng = np.random.default_rng(0)
    for dims in ({"m": 3, "n": 9000}, {"m": 1, "n": 5}):
        check(g, [rng.standard_normal((dims["m"], dims["n"])).astype(np.float32)], dims, tol=(1e-4, 1e-4))


def test_several_axes_at_once() -> None:
    g = make_graph({"x": TensorType(F32, (4, 3, 6))}, lambda b, x: [b.op(Op.REDUCE_SUM, x, axes=(0, 2), keepdim=False)])
    check(g, [np.random.default_rng(0).standard_normal((4, 3, 6)).astype(np.float32)])


def test_nan_propagates_through_max() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    x[1, 2] = np.nan
    check(_reduce(Op.REDUCE_MAX, (3, 4), 1), [x])


def _softmax(b, x):
    m = b.op(Op.REDUCE_MAX, x, axes=(x.type.rank - 1,), keepdim=True)
    e = b.op(Op.EXP, b.op(Op.SUB, x, m))
    return [b.op(Op.DIV, e, b.op(Op.REDUCE_SUM, e, axes=(x.type.rank - 1,), keepdim=True))]


def _layer_norm(b, x, w, bias):
    """As the LAYER_NORM decomposition: half inputs are normalized in float32, the result cast back."""
    out_dtype = x.type.dtype
    x, w, bias = (b.cast(v, F32) for v in (x, w, bias))
    n = x.type.shape[-1]
    ax = (x.type.rank - 1,)
    mean = b.op(Op.DIV, b.op(Op.REDUCE_SUM, x, axes=ax, keepdim=True), b.full(float(n), x.type.dtype))
    d = b.op(Op.SUB, x, mean)
    var = b.op(Op.DIV, b.op(Op.REDUCE_SUM, b.op(Op.MUL, d, d), axes=ax, keepdim=True), b.full(float(n), x.type.dtype))
    inv = b.op(Op.RSQRT, b.op(Op.ADD, var, b.full(1e-5, x.type.dtype)))
    return [b.cast(b.op(Op.ADD, b.op(Op.MUL, b.op(Op.MUL, d, inv), w), bias), out_dtype)]


@pytest.mark.parametrize("row", [7, 1000, 70000])
def test_softmax_is_one_kernel(row: int) -> None:
    g = make_graph({"x": TensorType(F32, (3, row))}, _softmax)
    x = (np.random.default_rng(row).standard_normal((3, row)) * 10).astype(np.float32)
    s = check(g, [x])
    assert len(s.kernels) == 1 and s.kernels[0].fused.count("reduce_max") == 1
    assert not s.buffers


def test_softmax_is_stable() -> None:
    g = make_graph({"x": TensorType(F32, (1, 2))}, _softmax)
    check(g, [np.array([[1000.0, 0.0]], np.float32)])


HALF = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("row", [64, 9000])
def test_layer_norm_is_one_kernel(dtype: str, row: int) -> None:
    dt = DType(dtype)
    g = make_graph(
        {"x": TensorType(dt, (4, row)), "w": TensorType(dt, (row,)), "b": TensorType(dt, (row,))}, _layer_norm
    )
    rng = np.random.default_rng(row)
    np_dt = HALF.get(dtype, np.float32)
    feeds = [rng.standard_normal(s).astype(np_dt) for s in ((4, row), (row,), (row,))]
    s = check(g, feeds)
    assert len(s.kernels) == 1


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_sums_accumulate_in_float32(dtype: str) -> None:
    g = _reduce(Op.REDUCE_SUM, (2, 5000), 1, dtype=DType(dtype))
    x = np.full((2, 5000), 0.1, dtype=HALF[dtype])
    s = check(g, [x])
    assert "tl.float32" in s.kernels[0].source


def test_row_values_and_full_values_stored_together() -> None:
    """A kernel may store both the row statistic and the normalized row."""

    def body(b, x):
        m = b.op(Op.REDUCE_MAX, x, axes=(1,), keepdim=True)
        return [b.op(Op.SUB, x, m), m]

    g = make_graph({"x": TensorType(F32, (5, 300))}, body)
    s = check(g, [np.random.default_rng(0).standard_normal((5, 300)).astype(np.float32)])
    assert len(s.kernels) == 2  # one per stored value; the row max is recomputed, not read back


def test_schedule_is_deterministic() -> None:
    g = make_graph({"x": TensorType(F32, (3, 70))}, _softmax)
    assert schedule_graph(g) == schedule_graph(g)


def _independent_pair(b, x):
    s = b.op(Op.REDUCE_SUM, x, axes=(1,), keepdim=True)
    m = b.op(Op.REDUCE_MAX, x, axes=(1,), keepdim=True)
    return [b.op(Op.ADD, b.op(Op.DIV, x, s), m)]


def _batch_norm_like(b, x):
    mean = b.op(Op.DIV, b.op(Op.REDUCE_SUM, x, axes=(0,), keepdim=True), b.full(float(x.type.shape[0]), F32))
    return [b.op(Op.SUB, x, mean)]


def _permuted_input(b, x):
    return [b.op(Op.REDUCE_MIN, b.permute(x, (1, 0)), axes=(1,), keepdim=False)]


def _broadcast_to_bigger(b, x):
    s = b.op(Op.REDUCE_SUM, x, axes=(1,), keepdim=True)
    return [b.op(Op.ADD, b.op(Op.BROADCAST, s, shape=(2, *x.type.shape)), b.full(1.0, F32))]


def _argmax_then_math(b, x):
    i = b.op(Op.ARGMAX, x, axis=1, keepdim=False)
    return [b.op(Op.MUL, b.cast(i, F32), b.op(Op.REDUCE_SUM, x, axes=(1,), keepdim=False))]


def _reduction_of_reduction(b, x):
    return [b.op(Op.REDUCE_MAX, b.op(Op.REDUCE_SUM, x, axes=(1,), keepdim=False), axes=(0,), keepdim=False)]


FUSION_CASES = {
    "independent_pair": (_independent_pair, 1),
    "batch_norm_like": (_batch_norm_like, 1),
    "permuted_input": (_permuted_input, 1),
    "broadcast_to_bigger": (_broadcast_to_bigger, 2),
    "argmax_then_math": (_argmax_then_math, 1),
    "reduction_of_reduction": (_reduction_of_reduction, 2),
}


@pytest.mark.parametrize("cols", [6, 9000])
@pytest.mark.parametrize("name", sorted(FUSION_CASES))
def test_reduction_fusion_shapes(name: str, cols: int) -> None:
    body, kernels = FUSION_CASES[name]
    g = make_graph({"x": TensorType(F32, (5, cols))}, body)
    s = check(g, [np.random.default_rng(cols).standard_normal((5, cols)).astype(np.float32)], tol=(1e-4, 1e-4))
    assert len(s.kernels) == kernels, [k.fused for k in s.kernels]
