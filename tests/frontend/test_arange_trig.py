"""aotc.acos / asin / atan (and the tensor methods) against numpy."""

from __future__ import annotations

import numpy as np

import aotc

from .helpers import trace_run


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
