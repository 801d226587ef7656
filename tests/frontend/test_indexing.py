"""tensor[...] with ints, slices, None and ..., on static and dynamic dims, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from aotc import Dim, TensorSpec, TraceError
from aotc.frontend.trace import trace

from .helpers import line_of, run, trace_run

A = np.arange(2 * 5 * 6, dtype=np.float32).reshape(2, 5, 6)

STATIC = [
    lambda x: x[0],
    lambda x: x[-1],
    lambda x: x[1:3],
    lambda x: x[:, -2:],
    lambda x: x[..., 1],
    lambda x: x[None, :, None],
    lambda x: x[:, ::2],
    lambda x: x[:, 1::3, 4:],
    lambda x: x[-10:],
    lambda x: x[:, 3:100],
    lambda x: x[:, 3:1],
    lambda x: x[:, None, ..., 0],
    lambda x: x[1, -2, -1:],
    lambda x: x[..., None],
    lambda x: x[...],
    lambda x: x[:, -4:-1:2],
]


@pytest.mark.parametrize("fn", STATIC)
def test_static_indexing_matches_numpy(fn):
    out = trace_run(fn, A)
    ref = fn(A)
    assert out.shape == ref.shape
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x[-1],
        lambda x: x[1:],
        lambda x: x[-3:],
        lambda x: x[:-1],
        lambda x: x[::2],
        lambda x: x[..., 2:4],
        lambda x: x[x.shape[0] - 1 :],
        lambda x: x[: x.shape[0] // 2],
    ],
)
@pytest.mark.parametrize("n", [1, 2, 7, 30])
def test_dynamic_indexing_matches_numpy(fn, n):
    g = trace(fn, {"x": TensorSpec((Dim("seq", 1, 64), 6))})
    assert g.guards == ()  # these hold for every seq in range
    x = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
    out = run(g, x)
    np.testing.assert_array_equal(out, fn(x))


def test_slice_past_a_dynamic_dim_is_guarded():
    def f(x):
        return x[:5]  # marker: slice-stop

    g = trace(f, {"x": TensorSpec((Dim("seq", 1, 64), 3))})
    (guard,) = g.guards
    assert str(guard).startswith("seq >= 5")
    assert guard.loc.endswith(f"test_indexing.py:{line_of('marker: slice-stop')}")
    assert guard.holds({"seq": 5}) and not guard.holds({"seq": 4})
    x = np.ones((9, 3), np.float32)
    np.testing.assert_array_equal(run(g, x), x[:5])


def test_index_into_dim_that_may_be_empty_is_guarded():
    g = trace(lambda x: x[0], {"x": TensorSpec((Dim("n", 0, 16), 3))})
    assert [str(gd).split(" (")[0] for gd in g.guards] == ["n > 0"]


def test_symbolic_index_from_another_tensor():
    g = trace(
        lambda x, y: x[:, : y.shape[0]], {"x": TensorSpec((3, Dim("a", 8, 64))), "y": TensorSpec((Dim("b", 1, 8),))}
    )
    assert g.guards == ()
    x = np.arange(3 * 10, dtype=np.float32).reshape(3, 10)
    np.testing.assert_array_equal(run(g, x, np.zeros(4, np.float32)), x[:, :4])


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda x: x[5], "out of bounds"),
        (lambda x: x[1.5], "unsupported index"),
        (lambda x: x[True], "unsupported index"),
        (lambda x: x[..., ..., 0], "single ellipsis"),
        (lambda x: x[0, 0, 0, 0], "too many indices"),
        (lambda x: x[::-1], "positive int"),
        (lambda x: x[x > 0], "only int index tensors"),
        (lambda x: x[np.array([0]), 0], "one int index tensor"),
    ],
)
def test_bad_indices(fn, match):
    with pytest.raises(TraceError, match=match):
        trace_run(fn, A)


def test_index_errors_name_the_line():
    with pytest.raises(TraceError) as e:
        trace_run(lambda x: x[7], A)  # marker: bad-index
    assert f"test_indexing.py:{line_of('marker: bad-index')}:" in str(e.value)


def test_setitem_is_rejected():
    def f(x):
        x[0] = 1
        return x

    with pytest.raises(TraceError, match="in-place"):
        trace_run(f, A)
