"""Bitwise and, or, xor and not on integer tensors (bool keeps its logical ops), as torch: its type promotion, the
functions and methods of those names, and floats refused naming the dtypes."""

from __future__ import annotations

import numpy as np
import pytest

import aotc
from aotc import TraceError

from .helpers import trace_run
from .test_tensor_ops import arr


def test_bitwise_on_ints_follows_torch_promotion():
    a = np.array([-7, -1, 0, 5, 2**31 - 1], np.int32)
    b = np.array([3, -(2**40), 12, -1, 2**33 + 1], np.int64)
    m = np.array([True, False, True, True, False])
    fn = lambda x, y, z: (x & y, x | z, z ^ x, ~x, ~y, x & 6, -3 | x, z | 2, z & True, x ^ np.int32(-1))  # noqa: E731
    want = (a & b, a | m, m ^ a, ~a, ~b, a & 6, -3 | a, m.astype(np.int64) | 2, m, ~a)
    out = trace_run(fn, a, b, m)
    for i, (o, w) in enumerate(zip(out, want, strict=True)):
        assert o.dtype == w.dtype, (i, o.dtype, w.dtype)  # int32 | int64 is int64, int | bool int, scalars keep
        np.testing.assert_array_equal(o, w, err_msg=f"output {i}")


def test_bitwise_functions_and_methods_are_the_operators():
    a, b = np.array([-6, 0, 9], np.int32), np.array([3, -1, 12], np.int64)
    fn = lambda x, y: (aotc.bitwise_and(x, y), x.bitwise_or(y), aotc.bitwise_xor(x, 5), x.bitwise_not())  # noqa: E731
    for o, w in zip(trace_run(fn, a, b), (a & b, a | b, a ^ 5, ~a), strict=True):
        assert o.dtype == w.dtype
        np.testing.assert_array_equal(o, w)


def test_bitwise_on_floats_is_a_trace_error_naming_the_dtypes():
    with pytest.raises(TraceError, match=r"bitwise and .* bool or integer operands, got int32, float32"):
        trace_run(lambda x: x & 1.5, arr((3,), "int32"))
    with pytest.raises(TraceError, match=r"bitwise or .* got float32, bool"):
        trace_run(lambda x, y: x | y, arr((3,), "float32"), arr((3,), "bool"))
    with pytest.raises(TraceError, match=r"bitwise not.* bool or integer tensor, got float32"):
        trace_run(lambda x: ~x, arr((3,), "float32"))
