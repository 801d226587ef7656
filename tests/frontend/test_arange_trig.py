"""aotc.acos / asin / atan (and the tensor methods), and aotc.arange over a dynamic dim with float bounds or step
of integral value, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec, TraceError
from aotc.frontend.trace import trace

from .helpers import run, trace_run


def test_inverse_trig_functions_and_methods() -> None:
    a = np.linspace(-1.5, 1.5, 31, dtype=np.float32)
    out = trace_run(lambda x: (aotc.acos(x), x.asin(), aotc.atan(x * 100), x.acos(), aotc.asin(x)), a)
    with np.errstate(invalid="ignore"):  # acos and asin of the entries outside [-1, 1] are nan on both sides
        want = (np.arccos(a), np.arcsin(a), np.arctan(a * 100), np.arccos(a), np.arcsin(a))
    for o, w in zip(out, want):
        assert o.dtype == np.float32
        np.testing.assert_allclose(o, w, rtol=1e-6, atol=1e-7, equal_nan=True)
    assert np.isnan(out[0][0]) and np.isnan(out[1][-1]) and not np.isnan(out[2]).any()


def test_inverse_trig_of_ints_computes_in_float32() -> None:
    (y,) = trace_run(lambda x: (aotc.atan(x),), np.array([-3, 0, 1, 7], np.int64))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, np.arctan([-3.0, 0.0, 1.0, 7.0]), rtol=1e-6)


def test_arange_over_a_dim_with_a_float_step_is_the_int_arange_in_float32() -> None:
    def f(x):
        n = x.shape[0]
        return aotc.arange(n, -n, -1.0), aotc.arange(0.0, 2 * n, 3), aotc.arange(1, n + 1, 2.0, dtype=aotc.int32)

    g = trace(f, {"x": TensorSpec((Dim("n", 1, 16),))})
    for n in (1, 6):
        down, threes, odds = run(g, np.zeros(n, np.float32))
        assert (down.dtype, threes.dtype, odds.dtype) == (np.float32, np.float32, np.int32)
        np.testing.assert_array_equal(down, np.arange(n, -n, -1.0))
        np.testing.assert_array_equal(threes, np.arange(0, 2 * n, 3))
        np.testing.assert_array_equal(odds, np.arange(1, n + 1, 2))


@pytest.mark.parametrize(
    ("args", "shown"),
    [(lambda n: (0, n, 0.5), "step=0.5"), (lambda n: (0.5, n), "start=0.5"), (lambda n: (0, n, float("inf")), "inf")],
)
def test_arange_over_a_dim_with_a_fractional_bound_is_refused_naming_it(args, shown) -> None:
    with pytest.raises(TraceError, match=rf"arange with a dynamic dim needs int start, end and step.*{shown}"):
        trace(lambda x: aotc.arange(*args(x.shape[0])), {"x": TensorSpec((Dim("n", 1, 16),))})
