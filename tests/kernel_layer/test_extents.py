"""The extents each launch's code claims (aotc/kernels/reach.py), on the shapes that once made them refuse the
compiler's own plans: values with no elements, pad taps at fixed positions outside their input (a pooling
window that starts on the pad), rows of no elements, and offsets whose interval bounds run past their value
(clamped). Each plan must pass the reader's checks with nothing left per shape, and run under the interpreter
with every access fenced to the offsets its extents claim (conftest.py)."""

from __future__ import annotations

import numpy as np

from aotc.artifact.plan_checks import plan_facts
from aotc.ir import DType, Op, Symbol, TensorType, sym
from aotc.ir.symbolic import floordiv, mod
from aotc.ir.symbolic_values import bounds
from aotc.kernels.scheduler import schedule_graph
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check

F32 = DType.float32


def _verified(g):
    s = schedule_graph(g)
    facts = plan_facts(g, s)
    assert facts.facts == () and facts.live == (), facts
    return s


def _extent(s, k, arg):
    kernel = s.kernels[k]
    j = [a.name for a in kernel.args].index(arg)
    return kernel.extents.lows[j], kernel.extents.highs[j]


def test_a_value_with_no_elements_is_not_touched() -> None:
    g = make_graph({"x": TensorType(F32, (0, 3))}, lambda b, x: [b.op(Op.NEG, x)])
    s = _verified(g)
    assert _extent(s, 0, "x_ptr") == (0, -1) and _extent(s, 0, "out_ptr") == (0, -1)
    check(g, [np.zeros((0, 3), np.float32)])


def test_a_reduction_over_empty_rows_keeps_the_row_mask_on_its_loads() -> None:
    g = make_graph({"x": TensorType(F32, (3, 0))}, lambda b, x: [b.op(Op.REDUCE_SUM, x, axes=(1,), keepdim=False)])
    s = _verified(g)
    assert "rmask" in s.kernels[0].source.split("tl.load(")[1].split(")")[1]  # the load's mask
    assert _extent(s, 0, "x_ptr") == (0, -1)
    check(g, [np.zeros((3, 0), np.float32)])


def test_a_pad_tap_at_a_fixed_position_outside_its_input_is_never_read() -> None:
    """A window that starts on the pad (AveragePool with ceil_mode): the tap's position is the constant -1,
    ``inside = (-1 >= 0) & ...`` keeps no lane, and its load counts nothing."""

    def body(b, x):
        padded = b.op(Op.PAD, x, pads=(0, 0, 1, 1), value=0.0)
        first = b.op(Op.SLICE, padded, starts=(0, 0), stops=(2, 1), steps=(1, 1))
        last = b.op(Op.SLICE, padded, starts=(0, 3), stops=(2, 4), steps=(1, 1))
        return [b.op(Op.ADD, first, last)]

    g = make_graph({"x": TensorType(F32, (2, 2))}, body)
    s = _verified(g)
    lo, hi = _extent(s, 0, "x_ptr")
    assert lo == 0 and hi == -1  # both taps land on the pad
    check(g, [np.arange(4, dtype=np.float32).reshape(2, 2)])


def test_a_regrouped_pad_verifies_and_stays_inside_its_input() -> None:
    """A reshape of a pad, permuted and flipped: the pad's position is a variable guarded by ``inside``."""

    def body(b, x):
        padded = b.op(Op.PAD, x, pads=(0, 0, 1, 1, 0, 0))
        return [b.op(Op.FLIP, b.permute(b.reshape(padded, (10, 4)), (1, 0)), axes=(1,))]

    g = make_graph({"x": TensorType(F32, (2, 3, 4))}, body)
    s = _verified(g)
    lo, hi = _extent(s, 0, "x_ptr")
    assert lo == 0 and hi == 23
    check(g, [np.arange(24, dtype=np.float32).reshape(2, 3, 4)])


def test_a_padded_window_dim_of_symbolic_size_verifies() -> None:
    """Swin's window padding: a dim rounded up to a multiple of 4, ``(w + (3*(w%4))%4)//4``, is at least 1 for
    every w >= 1, which interval arithmetic cannot see (``w//4`` may be 0); bounds enumerate the few w."""
    w = sym("w")
    d = floordiv(w + mod(3 * mod(w, 4), 4), 4)
    assert bounds(floordiv(sym("n"), d), {"w": (1, 64), "n": (0, 100)})[0] == 0
    g = make_graph(
        {"x": TensorType(F32, (w,))},
        lambda b, x: [b.op(Op.NEG, x)],
        symbols=(Symbol("w", 1, 64),),
    )
    _verified(g)
