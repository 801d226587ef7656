"""Shape reasoning shared by op rules: broadcasting, axes, and a context that decides dim equality."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from aotc.errors import ShapeError
from aotc.ir.symbolic import Range, SymExpr, add, bounds, mul, to_infix
from aotc.ir.types import Shape, ShapeDim


class ShapeCtx:
    """Decides facts about symbolic dims for op shape rules.

    The base context knows symbol ranges, ``multiple_of`` facts and equalities
    that guards already assert. The tracer subclasses it to turn an undecided
    question into a recorded guard.
    """

    def __init__(
        self,
        ranges: Mapping[str, Range] | None = None,
        multiples: Mapping[str, int] | None = None,
        equalities: Iterable[tuple[ShapeDim, ShapeDim]] = (),
    ) -> None:
        self.ranges = dict(ranges or {})
        self.multiples = dict(multiples or {})
        self.equal_pairs = {frozenset((a, b)) for a, b in equalities}

    def bounds(self, d: ShapeDim) -> Range:
        try:
            return bounds(d, self.ranges, self.multiples)
        except ShapeError:
            return (-(2**62), 2**62)

    def known_equal(self, a: ShapeDim, b: ShapeDim) -> bool:
        if a == b or frozenset((a, b)) in self.equal_pairs:
            return True
        return self.bounds(add(a, mul(b, -1))) == (0, 0)

    def require_equal(self, a: ShapeDim, b: ShapeDim, what: str) -> None:
        if not self.known_equal(a, b):
            raise ShapeError(f"{what}: {to_infix(a)} != {to_infix(b)}")

    def is_one(self, d: ShapeDim) -> bool:
        return d == 1

    def require(self, cond: bool, what: str) -> None:
        if not cond:
            raise ShapeError(what)

    def check_true(self, lhs: ShapeDim, rel: str, rhs: ShapeDim, what: str) -> None:
        """Require ``lhs rel rhs`` for every binding; the tracer may record it as a guard instead."""
        lo, hi = self.bounds(add(lhs, mul(rhs, -1)))
        ok = {
            "==": lo == hi == 0,
            ">=": lo >= 0,
            ">": lo > 0,
            "<=": hi <= 0,
            "<": hi < 0,
        }[rel]
        if not ok:
            raise ShapeError(f"{what}: cannot prove {to_infix(lhs)} {rel} {to_infix(rhs)}")


DEFAULT_CTX = ShapeCtx()


def broadcast_shapes(ctx: ShapeCtx, *shapes: Shape) -> Shape:
    """NumPy broadcasting over symbolic shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[ShapeDim] = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        result: ShapeDim = 1
        for d in dims:
            if ctx.is_one(d):
                continue
            if ctx.is_one(result):
                result = d
            else:
                ctx.require_equal(result, d, f"cannot broadcast shapes {fmt_shapes(shapes)} at dim {i}")
        out.append(result)
    return tuple(out)


def fmt_shape(s: Shape) -> str:
    return "(" + ", ".join(to_infix(d) for d in s) + ("," if len(s) == 1 else "") + ")"


def fmt_shapes(shapes: Sequence[Shape]) -> str:
    return " and ".join(fmt_shape(s) for s in shapes)


def norm_axis(axis: int, rank: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int) or not -max(rank, 1) <= axis < max(rank, 1):
        raise ShapeError(f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def norm_axes(axes: Iterable[int] | int | None, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    out = tuple(sorted({norm_axis(a, rank) for a in axes}))
    return out


def numel(shape: Shape) -> ShapeDim:
    n: ShapeDim = 1
    for d in shape:
        n = mul(n, d)
    return n


def is_sym(d: object) -> bool:
    return isinstance(d, SymExpr)
