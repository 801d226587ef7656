"""Symbolic dims while tracing: decisions become guards at the user's line; specialization is an error."""

from __future__ import annotations

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec, TraceError
from aotc.frontend.trace import trace
from aotc.ir.verify import verify

from .helpers import line_of, run

SEQ = Dim("seq", min=1, max=512)
BATCH = Dim("batch", min=1, max=8)


def spec(*shape, dtype="float32"):
    return {"x": TensorSpec(shape, dtype)}


def guards(g):
    return [str(gd).split(" (from")[0] for gd in g.guards]


def test_python_branch_on_a_dim_records_a_guard_with_the_line():
    def f(x):
        if x.shape[1] > 128:  # marker: branch
            return x * 2
        return x + 1

    g = trace(f, spec(BATCH, SEQ, 4))  # hint 17: takes the second branch
    assert guards(g) == ["seq <= 128"]
    assert g.guards[0].loc.endswith(f"test_guards.py:{line_of('marker: branch')}")
    x = np.ones((2, 100, 4), np.float32)
    np.testing.assert_array_equal(run(g, x), x + 1)
    assert not g.guards[0].holds({"seq": 200, "batch": 2})


def test_the_hint_picks_the_branch():
    def f(x):
        return x * 2 if x.shape[1] > 128 else x + 1

    g = trace(f, spec(BATCH, Dim("seq", 1, 512, hint=300), 4))
    assert guards(g) == ["seq > 128"]
    assert [n.op.value for n in g.nodes] == ["full", "mul"]


def test_decisions_true_for_the_whole_range_need_no_guard():
    def f(x):
        s = x.shape[1]
        assert s >= 1 and s <= 512 and s != 0 and s < 1000 and not s == 600 and bool(s)
        assert x.shape[0] * 2 > 1
        return x

    assert trace(f, spec(BATCH, SEQ)).guards == ()


def test_repeated_decisions_record_one_guard():
    def f(x):
        for _ in range(3):
            if x.shape[0] == x.shape[1]:
                pass
        return x

    g = trace(f, {"x": TensorSpec((Dim("a", 1, 64, hint=5), Dim("b", 1, 64, hint=5)))})
    assert guards(g) == ["a == b"]


def test_guards_are_implied_by_earlier_ones():
    def f(x):
        if x.shape[0] >= 10 and x.shape[0] >= 5:
            return x
        return x

    g = trace(f, spec(SEQ))
    assert guards(g) == ["seq >= 10"]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: [0] * 3 if range(x.shape[0]) else x,  # range() needs __index__
        lambda x: [1, 2, 3][x.shape[0]],
        lambda x: x.reshape(int(x.shape[0]), 4),
        lambda x: x * float(x.shape[0]),
        lambda x: x * (x.shape[0] / 2),
        lambda x: np.zeros(x.shape[0]),
    ],
)
def test_specializing_a_dynamic_dim_is_an_error(fn):
    with pytest.raises(TraceError, match=r"dynamic dim 'seq'|true division"):
        trace(fn, spec(SEQ, 4))


def test_specialization_error_names_the_line():
    def f(x):
        out = x
        for _ in range(x.shape[1]):  # marker: range
            out = out + 1
        return out

    with pytest.raises(TraceError) as e:
        trace(f, spec(BATCH, SEQ))
    msg = str(e.value)
    assert msg.startswith(f"tests/frontend/test_guards.py:{line_of('marker: range')}:")
    assert "'seq'" in msg and "specialize" in msg


def test_static_dims_are_plain_ints():
    def f(x):
        n = x.shape[1]
        assert type(n) is int
        return x.reshape(x.shape[0], n // 2, 2)[:, [0, 1, 2][n - 4]]

    g = trace(f, spec(BATCH, 4))
    assert g.outputs[0].type.shape[1:] == (2,)


def test_tensor_value_control_flow_names_the_line():
    def f(x):
        if (x > 0).any():  # marker: tensor-if
            return x
        return -x

    with pytest.raises(TraceError) as e:
        trace(f, spec(BATCH))
    assert f"test_guards.py:{line_of('marker: tensor-if')}:" in str(e.value)
    assert "control flow depends on tensor values" in str(e.value)


def test_reshape_round_trip_is_proven_without_guards():
    def f(x):
        b, s, h = x.shape
        y = x.reshape(b * s, h) * 2
        z = y.view(b, s, h)
        w = z.view(b, s, 4, -1).transpose(1, 2)
        return w.reshape(b, -1, s, 2).flatten(1, 2).view(b, 4, s, 2).permute(0, 2, 1, 3).reshape(b, s, h)

    g = trace(f, spec(BATCH, SEQ, 8))
    assert g.guards == ()
    x = np.random.default_rng(0).standard_normal((3, 5, 8)).astype(np.float32)
    np.testing.assert_allclose(run(g, x), x * 2)


def test_reshape_minus_one_with_inexact_division_records_a_modulo_guard():
    def f(x):
        return x.reshape(-1, 2)  # marker: reshape-mod

    g = trace(f, spec(Dim("n", 1, 100, hint=18)))
    assert guards(g) == ["n%2 == 0"]
    assert g.guards[0].loc.endswith(f":{line_of('marker: reshape-mod')}")
    np.testing.assert_array_equal(run(g, np.arange(6, dtype=np.float32)), np.arange(6).reshape(3, 2))
    assert not g.guards[0].holds({"n": 7})


def test_reshape_that_fails_at_the_hint_is_an_error():
    def f(x):
        return x.reshape(-1, 2)  # marker: bad-reshape

    with pytest.raises(TraceError) as e:
        trace(f, spec(Dim("n", 1, 100, hint=17)))
    assert f":{line_of('marker: bad-reshape')}:" in str(e.value)


def test_reshape_needing_equal_dims_guards_them():
    def f(x, y):
        b, s = x.shape
        return y.reshape(b, s)

    g = trace(f, {"x": TensorSpec((BATCH, SEQ)), "y": TensorSpec((Dim("n", 1, 4096, hint=7 * 17),))})
    assert guards(g) == ["n == batch*seq"]


def test_multiple_of_proves_divisibility():
    g = trace(lambda x: x.view(x.shape[0] // 8, 8, 3), spec(Dim("s", 8, 512, multiple_of=8), 3))
    assert g.guards == ()


def test_a_minus_one_next_to_a_quotient_of_a_multiple_of_dim_is_inferred():
    """6*batch elements over (batch//4) * 4 is exactly 6 once batch is a multiple of 4: written as 4*(batch//4)."""
    f = lambda x: x.reshape(x.shape[0] // 4, 4, -1) * 2  # noqa: E731
    g = trace(f, spec(Dim("batch", 4, 64, multiple_of=4), 6))
    assert g.guards == ()
    assert str(g.outputs[0].type.shape[2]) == "6"
    for n in (4, 12):
        x = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
        np.testing.assert_array_equal(run(g, x=x), x.reshape(n // 4, 4, 6) * 2)
    # two dims: (b, s, 8) -> (b // 2, s // 4, -1) is 64 per group when b and s are multiples of 2 and 4
    h = lambda x: x.reshape(x.shape[0] // 2, x.shape[1] // 4, -1)  # noqa: E731
    g = trace(h, spec(Dim("b", 2, 8, multiple_of=2), Dim("s", 4, 64, multiple_of=4), 8))
    assert str(g.outputs[0].type.shape[2]) == "64"


def test_a_minus_one_that_is_not_exact_for_every_size_names_the_dims():
    with pytest.raises(TraceError) as e:
        trace(lambda x: x.reshape(x.shape[0] // 4, 4, -1), spec(Dim("batch", 1, 64), 6))  # marker: inexact
    msg = str(e.value)
    assert f"test_guards.py:{line_of('marker: inexact')}:" in msg
    assert "cannot infer the -1 size: 6*batch elements divided by 4*(batch//4) is not a whole number" in msg
    assert "batch in [1, 64]" in msg and "multiple_of" in msg


def test_seq_modulo_heads_is_checked():
    def f(x):
        s = x.shape[0]
        assert s % 4 == 0
        return x.view(s // 4, 4)

    g = trace(f, spec(Dim("s", 1, 512, hint=64)))
    assert guards(g) == ["s%4 == 0"]
    assert trace(f, spec(Dim("s", 4, 512, multiple_of=4))).guards == ()


def test_broadcasting_different_dims():
    def f(x, y):
        return x + y  # marker: broadcast

    with pytest.raises(TraceError) as e:
        trace(f, {"x": TensorSpec((SEQ,)), "y": TensorSpec((Dim("other", 1, 512),))})
    assert f"test_guards.py:{line_of('marker: broadcast')}:" in str(e.value)
    assert "cannot broadcast" in str(e.value)
    g = trace(f, {"x": TensorSpec((Dim("a", 1, 64, hint=9),)), "y": TensorSpec((Dim("b", 1, 64, hint=9),))})
    assert guards(g) == ["a == b"]
    verify(g)


def test_broadcasting_a_dim_against_a_static_size():
    g = trace(lambda x, y: x + y, {"x": TensorSpec((Dim("a", 1, 64, hint=3),)), "y": TensorSpec((3,))})
    assert guards(g) == ["a == 3"]


def test_symint_arithmetic():
    seen = {}

    def f(x):
        b, s = x.shape
        seen["exprs"] = [str(e) for e in (b + s, s - 1, 2 * s, s * b, s // 2, s % 3, -s, (b * s) // s, 3 + s)]
        seen["int"] = (s - s, s * 0 + 4)
        return x

    trace(f, spec(BATCH, SEQ))
    assert seen["exprs"] == [
        "batch + seq",
        "seq - 1",
        "2*seq",
        "batch*seq",
        "seq//2",
        "seq%3",
        "-seq",
        "batch",
        "seq + 3",
    ]
    assert seen["int"] == (0, 4)


def test_shape_errors_become_trace_errors_with_the_line():
    def f(x):
        return x @ x  # marker: matmul

    with pytest.raises(TraceError) as e:
        trace(f, spec(BATCH, 3))
    assert f"test_guards.py:{line_of('marker: matmul')}:" in str(e.value)


def test_nodes_carry_the_users_line():
    def f(x):
        y = x * 2  # marker: node-mul
        return aotc.exp(y)  # marker: node-exp

    g = trace(f, spec(BATCH))
    locs = {n.op.value: n.loc for n in g.nodes}
    assert locs["mul"].endswith(f"test_guards.py:{line_of('marker: node-mul')}")
    assert locs["exp"].endswith(f"test_guards.py:{line_of('marker: node-exp')}")


def test_guards_survive_verification_of_dependent_ops():
    def f(x):
        s = x.shape[0]
        if s >= 6:
            return x[s - 6 : s - 2]
        return x

    g = trace(f, spec(SEQ))
    verify(g, "trace")
    np.testing.assert_array_equal(run(g, np.arange(10, dtype=np.float32)), np.arange(4, 8))


def test_comparisons_with_floats():
    seen = []

    def f(x):
        s = x.shape[0]
        seen.extend([s > 2.5, s <= 16.5, s == 3.5, s != 3.5, s < float("inf"), s >= 17.0])
        return x

    g = trace(f, spec(SEQ))
    assert seen == [True, False, False, True, True, True]
    assert guards(g) == ["seq > 2", "seq > 16"]


def test_float_arithmetic_on_a_dim_is_an_error():
    with pytest.raises(TraceError, match="float arithmetic with dynamic dim seq"):
        trace(lambda x: x.reshape(x.shape[0] * 0.5, 2), spec(SEQ))


def test_squeeze_of_a_dim_that_may_be_one_is_guarded():
    g = trace(lambda x: x.squeeze(), spec(SEQ, 1, 3))
    assert guards(g) == ["seq != 1"]
    assert g.outputs[0].type.rank == 2
    g = trace(lambda x: x.squeeze(1), spec(SEQ, 1, 3))
    assert g.guards == ()


def test_tensors_from_another_trace_are_rejected():
    kept = []

    def first(x):
        kept.append(x * 2)
        return x

    trace(first, spec(3))
    with pytest.raises(TraceError, match="another trace"):
        trace(lambda x: kept[0], spec(3))
    with pytest.raises(TraceError, match="another trace"):
        trace(lambda x: x + kept[0], spec(3))
