"""Sign proofs the shape rules lean on: a common symbol factor, a padded length's remainders joined, and a
divisor that may be 0 inside a kernel's address bounds (nothing proved, never an error)."""

from __future__ import annotations

import itertools

import pytest

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops import OPS, Op
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic import add, floordiv, mod, mul, sym
from aotc.ir.symbolic_values import bounds, evaluate, prove_nonneg
from aotc.ir.types import TensorType
from aotc.kernels.interval_box import Box, Variables

S, B = sym("s"), sym("b")


def _holds_everywhere(e: object, ranges: dict[str, tuple[int, int]]) -> bool:
    names = sorted(ranges)
    spans = [range(ranges[n][0], ranges[n][1] + 1) for n in names]
    return all(evaluate(e, dict(zip(names, v))) >= 0 for v in itertools.product(*spans))


@pytest.mark.parametrize(
    ("e", "ranges", "proved"),
    [
        (add(mul(mul(S, S), 2), mul(S, -1)), {"s": (1, 64)}, True),  # VITS's relative positions: s*(2*s - 1)
        (add(mul(mul(B, mul(S, S)), 2), mul(mul(B, S), -1)), {"s": (1, 16), "b": (1, 8)}, True),
        (add(mul(mul(B, mul(S, S)), 2), mul(mul(B, S), -3)), {"s": (1, 16), "b": (1, 8)}, False),  # s = 1: -b
        (add(add(mul(mul(S, S), 2), mul(S, -1)), -2), {"s": (1, 64)}, False),  # s = 1: -1
    ],
)
def test_a_common_symbol_factor_is_taken_out(e: object, ranges: dict[str, tuple[int, int]], proved: bool) -> None:
    assert bounds(e, ranges)[0] < 0  # interval arithmetic alone cannot tell
    assert prove_nonneg(e, ranges) is proved
    assert _holds_everywhere(e, ranges) or not proved


def test_a_padded_length_joins_its_remainders() -> None:
    """PegasusX pads seq to its 512 block: ``(511*(s%512) + s)//512`` is ``s%512 + s//512``, so the number of
    blocks ``that - s%512 + 1`` is at least 1, which interval arithmetic over the two parts cannot see."""
    r = mod(S, 512)
    blocks = add(add(floordiv(add(mul(r, 511), S), 512), mul(r, -1)), 1)
    ranges = {"s": (1, 2048)}
    lo, hi = bounds(blocks, ranges)
    got = [evaluate(blocks, {"s": s}) for s in range(1, 2049)]
    assert lo <= min(got) and hi >= max(got)
    assert lo >= 1 and prove_nonneg(add(blocks, -1), ranges)
    # a numerator whose remainders do not meet still resolves soundly, just less tightly
    loose = floordiv(add(mul(r, 3), S), 512)
    lo, hi = bounds(loose, ranges)
    got = [evaluate(loose, {"s": s}) for s in range(1, 2049)]
    assert lo <= min(got) and hi >= max(got)


def test_a_reshape_to_a_product_of_a_symbol_is_accepted() -> None:
    ctx = ShapeCtx({"s": (1, 64)})
    dim = add(mul(mul(S, S), 2), mul(S, -1))
    (out,) = OPS[Op.RESHAPE].infer((TensorType(DType.float32, (dim, 4)),), {"shape": (dim, 2, 2)}, ctx)
    assert out.shape == (dim, 2, 2)
    with pytest.raises(ShapeError, match="may be negative"):
        bad = add(dim, -2)
        OPS[Op.RESHAPE].infer((TensorType(DType.float32, (bad, 4)),), {"shape": (bad, 4)}, ctx)


def test_a_kernel_bound_over_a_divisor_that_may_be_zero_proves_nothing() -> None:
    """A size arg of an empty dim may be 0: a proof that divides by it is simply not made (it was a
    ShapeError that stopped GLM-5-next, OLMo-hybrid and others in the scheduler)."""
    box = Box(Variables(), {"size": (0, 64), "x": (0, 10)}, ({}, {}, {}))
    assert box.nonneg(add(sym("x"), mul(mod(sym("x"), sym("size")), -1))) is False
    assert box.nonneg(sym("x")) is True
