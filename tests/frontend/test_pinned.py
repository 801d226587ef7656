"""Which guards pin or narrow a declared dynamic dim (aotc/frontend/pinned.py): the imported models' warning."""

from __future__ import annotations

import pytest

from aotc.frontend.pinned import PinnedDimWarning, pinned, warn_pinned
from aotc.ir.graph import Guard, Symbol
from aotc.ir.symbolic import floordiv, mod, sym

B, S = sym("batch"), sym("seq")
DIMS = [Symbol("batch", 1, 8), Symbol("seq", 1, 64)]


@pytest.mark.parametrize(
    ("guard", "found"),
    [
        (Guard(16 * B * S, "==", 272 * B, "onnx node 'r'"), ("seq", 17, 17)),  # a reshape by the traced length
        (Guard(S, "<=", 32), ("seq", 1, 32)),
        (Guard(S, ">", 4), ("seq", 5, 64)),
        (Guard(2 * S, "==", 34), ("seq", 17, 17)),
        (Guard(mod(S, 4), "==", 0), None),  # a multiple_of: every aligned size still runs
        (Guard(S, ">=", 1), None),
        (Guard(3 * S + 1, "==", 5), None),  # no size passes: the guard's own message says so when called
    ],
)
def test_a_guard_that_narrows_a_dim_is_found(guard: Guard, found: tuple | None) -> None:
    got = [(s.name, lo, hi) for s, _, lo, hi in pinned(DIMS, [guard])]
    assert got == ([found] if found else [])


def test_values_excluded_only_off_the_stride_the_guards_keep_narrow_nothing() -> None:
    quarters = [Guard(mod(B, floordiv(B, 4)), "==", 0), Guard(mod(B, 4), "==", 0)]
    assert pinned([Symbol("batch", 1, 64)], quarters) == []


def test_a_wide_range_is_solved_not_scanned() -> None:
    (found,) = pinned([Symbol("seq", 1, 65536)], [Guard(S, "<=", 512)])
    assert (found[2], found[3]) == (1, 512)


def test_the_warning_names_the_dim_the_guard_and_its_source() -> None:
    with pytest.warns(PinnedDimWarning) as warned:
        warn_pinned(DIMS, [Guard(16 * B * S, "==", 272 * B, "onnx node 'r' (Reshape)")])
    (w,) = warned
    assert str(w.message) == (
        "dim 'seq' is declared dynamic over [1, 64], but the model's guard 16*batch*seq == 272*batch (from onnx node "
        "'r' (Reshape)) pins it to one size: it runs only at seq = 17, and every other size is refused when called"
    )
