"""Shape reasoning shared by op rules: broadcasting, axes, and a context that decides dim equality."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from aotc.errors import ShapeError
from aotc.ir.symbolic import SymExpr, add, exact_div, floordiv, mul, sym, to_infix
from aotc.ir.symbolic_residue import divide_by_congruence
from aotc.ir.symbolic_values import Range, bounds, prove_nonneg, substitute
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
        facts: Iterable[tuple[ShapeDim, str, ShapeDim]] = (),
    ) -> None:
        self.ranges = dict(ranges or {})
        self.multiples = dict(multiples or {})
        self.equal_pairs = {frozenset((a, b)) for a, b in equalities}
        # Guards the runtime checks before anything runs, kept as "e >= 0" and "e == 0" forms.
        self._nonneg: list[ShapeDim] = []
        self._zero: list[ShapeDim] = []
        # Verifying a graph asks the same questions for many nodes; answers hold until a fact is added.
        self._proven: dict[ShapeDim, bool] = {}
        for a, b in equalities:
            self.add_fact(a, "==", b)
        for lhs, rel, rhs in facts:
            self.add_fact(lhs, rel, rhs)

    def add_fact(self, lhs: ShapeDim, rel: str, rhs: ShapeDim) -> None:
        """Assume ``lhs rel rhs`` (a recorded guard) in later decisions."""
        self._proven.clear()
        d = add(lhs, mul(rhs, -1))
        if rel == "==":
            self.equal_pairs.add(frozenset((lhs, rhs)))
            self._zero.append(d)
            self._nonneg += [d, mul(d, -1)]
            self._add_divisibility(d)
        elif rel in (">=", ">", "<=", "<"):
            self._nonneg.append(_nonneg_form(lhs, rel, rhs))

    def _add_divisibility(self, d: ShapeDim) -> None:
        # c * (y % k) == 0 also means y == k * (y // k), the form a reshape's element count takes.
        if not isinstance(d, SymExpr) or d.const or len(d.terms) != 1 or len(d.terms[0][0]) != 1:
            return
        atom = d.terms[0][0][0]
        if atom.kind != "mod":
            return
        y, k = atom.args
        self._zero.append(add(y, mul(floordiv(y, k), -k)))
        if isinstance(y, SymExpr) and y.is_symbol() and isinstance(k, int):
            self.multiples[y.symbol_name] = math.lcm(self.multiples.get(y.symbol_name, 1), k)

    def bounds(self, d: ShapeDim) -> Range:
        try:
            return bounds(d, self.ranges, self.multiples)
        except ShapeError:
            return (-(2**62), 2**62)

    def proves_nonneg(self, e: ShapeDim) -> bool:
        """``e >= 0`` for every binding allowed by the ranges and the facts."""
        known = self._proven.get(e)
        if known is None:
            known = self._proves(e) or any(self.bounds(add(e, mul(f, -1)))[0] >= 0 for f in self._nonneg)
            self._proven[e] = known
        return known

    def _proves(self, e: ShapeDim) -> bool:
        try:
            return prove_nonneg(e, self.ranges, self.multiples)
        except ShapeError:  # a divisor that may be 0 within the ranges: nothing is proved
            return False

    def exact_div(self, a: ShapeDim, b: ShapeDim) -> ShapeDim | None:
        """``a / b`` when it is exact for every binding, also where that takes the dims' ``multiple_of``: a dim
        ``n`` with multiple_of m is ``m * (n // m)``, so ``6*batch / (4*(batch//4))`` is 6 when batch is a
        multiple of 4. None when it is not exact for some binding (or this cannot show that it is)."""
        q = exact_div(a, b)
        if q is None:
            q = divide_by_congruence(a, b)  # a padded length: seq + (63*(seq % 64)) % 64 over 64
        if q is not None or isinstance(b, int):
            return q
        names = set(b.free_symbols()) | (set(a.free_symbols()) if isinstance(a, SymExpr) else set())
        env = {
            n: mul(self.multiples[n], floordiv(sym(n), self.multiples[n]))
            for n in names
            if self.multiples.get(n, 1) > 1
        }
        if not env:
            return None
        env.update({n: sym(n) for n in names - set(env)})
        return exact_div(substitute(a, env), substitute(b, env))

    def known_equal(self, a: ShapeDim, b: ShapeDim) -> bool:
        if a == b or frozenset((a, b)) in self.equal_pairs:
            return True
        d = add(a, mul(b, -1))
        if self.bounds(d) == (0, 0) or any(_is_multiple(d, z) for z in self._zero):
            return True
        return bool(self._nonneg) and self.proves_nonneg(d) and self.proves_nonneg(mul(d, -1))

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
        ok = self.known_equal(lhs, rhs) if rel == "==" else self.proves_nonneg(_nonneg_form(lhs, rel, rhs))
        if not ok:
            raise ShapeError(f"{what}: cannot prove {to_infix(lhs)} {rel} {to_infix(rhs)}")


def _nonneg_form(lhs: ShapeDim, rel: str, rhs: ShapeDim) -> ShapeDim:
    """An expression that is >= 0 exactly when ``lhs rel rhs`` holds (dims are integers)."""
    d = add(lhs, mul(rhs, -1))
    return {">=": d, ">": add(d, -1), "<=": mul(d, -1), "<": add(mul(d, -1), -1)}[rel]


def _is_multiple(d: ShapeDim, z: ShapeDim) -> bool:
    """d == c * z for a rational c, so z == 0 implies d == 0."""
    if not isinstance(d, SymExpr) or not isinstance(z, SymExpr):
        return False
    dt, zt = dict(d.terms), dict(z.terms)
    if dt.keys() != zt.keys():
        return False
    ratios = {Fraction(c, zt[m]) for m, c in dt.items()}
    if z.const:
        ratios.add(Fraction(d.const, z.const))
    elif d.const:
        return False
    return len(ratios) == 1


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
            elif result != d:
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
