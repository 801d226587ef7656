"""acos, asin and atan kernels (Cephes polynomials in triton.language) under the interpreter: float32 accuracy
on a dense grid against float64 numpy, the edges (+-0, +-1, +-inf, NaN, outside [-1, 1]), half precision
against the cpu backend, and the kernels compile for sm_80."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from aotc.ir import DType, Op, TensorType
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check, compile_renamed_for_sm80, in_fresh_process, run_schedule

F32 = DType.float32
OPS = {Op.ACOS: np.arccos, Op.ASIN: np.arcsin, Op.ATAN: np.arctan}
HALF = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _run(op: Op, x: np.ndarray) -> np.ndarray:
    g = make_graph({"x": TensorType(F32, x.shape)}, lambda b, v: [b.op(op, v)])
    (y,) = run_schedule(g, [x], {})
    return y


def _grid(op: Op) -> np.ndarray:
    # the fold points of each polynomial (0.5 for asin/acos; tan(pi/8), tan(3pi/8) for atan) and both sides of them
    folds = [0.5, 0.50000006, 0.99999994, 1.0]
    if op is Op.ATAN:
        folds += [0.41421356, 0.4142136, 2.4142134, 2.4142137, 1e3, 1e30, 3e38]
    x = np.concatenate([np.linspace(-1, 1, 40_001), folds, np.negative(folds)])
    if op is Op.ATAN:
        x = np.concatenate([x, np.linspace(-1e3, 1e3, 20_001)])
    return x.astype(np.float32)


@pytest.mark.parametrize("op", list(OPS), ids=lambda o: o.value)
def test_float32_is_within_a_few_ulp_of_float64(op: Op) -> None:
    x = _grid(op)
    y = _run(op, x)
    want = OPS[op](x.astype(np.float64))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-6)
    small = np.abs(x) < 1e-3  # near 0 asin and atan are ~x and keep its relative accuracy
    np.testing.assert_allclose(y[small], want[small], rtol=4e-7, atol=1e-30)


@pytest.mark.parametrize("op", list(OPS), ids=lambda o: o.value)
def test_edges_follow_torch(op: Op) -> None:
    x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1.0000001, -1.5, 1e-30, -1e-30], np.float32)
    y = _run(op, x)
    with np.errstate(invalid="ignore"):
        want = OPS[op](x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(y, want, rtol=1e-7, atol=0, equal_nan=True)
    # asin and atan are odd down to the sign of zero; acos(+-0) is pi/2
    np.testing.assert_array_equal(np.signbit(y[:2]), [False, op is not Op.ACOS])
    if op is Op.ACOS:
        assert y[2] == 0.0 and y[3] == np.float32(np.pi)
    # outside [-1, 1] acos and asin are NaN, as torch's; atan of +-inf is +-pi/2
    assert np.isnan(y[7:9]).all() == (op is not Op.ATAN) and np.isnan(y[6])
    assert np.isnan(y[4:6]).all() if op is not Op.ATAN else np.allclose(y[4:6], [np.pi / 2, -np.pi / 2])


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("op", list(OPS), ids=lambda o: o.value)
def test_half_precision_matches_the_cpu_backend(op: Op, dtype: str) -> None:
    x = np.linspace(-1.2 if op is not Op.ATAN else -20, 1.2 if op is not Op.ATAN else 20, 200).reshape(4, 50)
    g = make_graph({"x": TensorType(DType(dtype), (4, 50))}, lambda b, v: [b.op(op, v)])
    check(g, [x.astype(HALF[dtype])], tol={"float16": (1e-3, 1e-3), "bfloat16": (8e-3, 8e-3)}[dtype])


def test_fused_with_its_neighbours_in_one_kernel() -> None:
    # YOSO's collision probability: 1 - acos(clamped cosine) / pi, then a power
    def body(b, x):
        c = b.op(Op.MINIMUM, b.op(Op.MAXIMUM, x, b.full(-1.0, F32)), b.full(1.0, F32))
        return [b.op(Op.SUB, b.full(1.0, F32), b.op(Op.DIV, b.op(Op.ACOS, c), b.full(np.pi, F32)))]

    g = make_graph({"x": TensorType(F32, (3, 40))}, body)
    s = check(g, [np.linspace(-1.5, 1.5, 120, dtype=np.float32).reshape(3, 40)], tol=(2e-6, 1e-6))
    (k,) = s.kernels
    assert "acos" in k.fused


def compile_inverse_trig_kernels() -> None:
    """Each op in float32 and bfloat16 compiles for sm_80."""
    graphs = [
        (f"{op.value}_{dt.value}", make_graph({"x": TensorType(dt, (4, 5))}, lambda b, v, op=op: [b.op(op, v)]))
        for op in OPS
        for dt in (F32, DType.bfloat16)
    ]
    compile_renamed_for_sm80(graphs)


def test_inverse_trig_kernels_compile_for_sm80() -> None:
    in_fresh_process(
        "from tests.kernel_layer.test_inverse_trig import compile_inverse_trig_kernels\ncompile_inverse_trig_kernels()"
    )
