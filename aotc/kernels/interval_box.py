"""Interval arithmetic over expressions in a kernel's own names (size args, constexprs, the grid and the
placeholders of the templates' variables), for ``Reach.extents``: each variable resolved under the mask terms of
the access being bounded, from what its template declared (``Variables``).

Bounds are expressions over the kernel's names, not numbers: each name's interval over the graph's ranges gives
the signs that products and quotients need. Floor division and remainder are bounded for both floor (the
interpreter) and truncating (the GPU) semantics; a divisor that cannot be proved positive is bounded as if it were,
and the fact joins ``Box.requires`` for the reader to prove or check per shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aotc.errors import ShapeError
from aotc.ir.schedule import Size
from aotc.ir.symbolic import Atom, SymExpr, add, floordiv, mul, smax, smin, sym
from aotc.ir.symbolic_values import Range, bounds, evaluate, prove_nonneg, reduce_quotients, substitute

Interval = tuple[Size, Size]  # inclusive


@dataclass
class Variables:
    """What a kernel's templates declared of their variables, by the variable's text (``Reach``'s declarations)."""

    texts: dict[str, str] = field(default_factory=dict)  # placeholder name -> text
    bounds: dict[str, tuple[Size, Size]] = field(default_factory=dict)  # text -> [lo, hi)
    defs: dict[str, Size] = field(default_factory=dict)  # text -> expression over names and placeholders
    guards: dict[str, list[tuple[str, Size | None, Size | None]]] = field(
        default_factory=dict
    )  # term -> (text, lo, hi)


class Box:
    """Interval arithmetic over expressions in the kernel's names."""

    def __init__(
        self,
        variables: Variables,
        names: Mapping[str, Range],
        graph: tuple[Mapping[str, Size], Mapping[str, Range], Any],
    ) -> None:
        self.vars, self.names = variables, names
        # what the compiler passes for each name, over the graph's symbols, and their ranges and multiples
        self.passed, self.ranges, self.multiples = graph
        self._resolved: dict[tuple[str, frozenset[str]], tuple[Interval, frozenset[Size]]] = {}
        # what must hold (>= 0) for the access being bounded to touch anything: its variables' intervals
        # non-empty, its mask terms' ``when`` facts
        self.conditions: set[Size] = set()
        self.requires: list[Size] = []  # divisors bounded as positive without a proof

    def live(self, conditions: Iterable[Size]) -> Size:
        """0 where a condition is proved to fail, else the 0/1 expression of those that fail, with what the
        compiler passes, at the symbols' least or greatest binding (an empty tensor's dim at its min 0); one that
        holds at both counts as holding, which only leaves the access counted (sound, and no fact for the reader
        to check per shape)."""
        out: Size = 1
        low = {n: r[0] for n, r in self.ranges.items()}
        high = {n: r[1] for n, r in self.ranges.items()}
        for c in sorted(conditions, key=str):
            if self.nonneg(c):
                continue
            if self.nonneg(add(mul(c, -1), -1)):
                return 0
            try:
                passed = substitute(c, self.passed)
                holds = evaluate(passed, low) >= 0 and evaluate(passed, high) >= 0
            except ShapeError:
                holds = False
            if not holds:
                out = mul(out, smax(smin(add(c, 1), 1), 0))
        return out

    def nonneg(self, e: Size) -> bool:
        if isinstance(e, int):
            return e >= 0
        try:
            return prove_nonneg(e, self.names)
        except ShapeError:  # a divisor inside e may be 0 over the names' ranges (a size arg of an empty dim)
            return False

    def within(self, v: SymExpr, top: Size, terms: frozenset[str]) -> bool:
        """Whether placeholder ``v`` lies in ``[0, top)`` wherever the mask ``terms`` keeps a lane: proved over the
        names' ranges, or over the graph's with what the compiler passes for the names (two size args of one
        dim, ``size_2 - 3 < h3 - 2``), which then joins the facts the extents rest on (``requires``): a launch
        that passes other values must prove it again."""
        lo, hi = self.interval(v, terms)
        pending = []
        for fact in (lo, add(add(top, -1), mul(hi, -1))):
            if self.nonneg(fact):
                continue
            try:
                passed = reduce_quotients(substitute(fact, self.passed))
                if not prove_nonneg(passed, self.ranges, self.multiples):
                    return False
            except ShapeError:
                return False
            pending.append(fact)
        self.requires.extend(pending)
        return True

    def tighter(self, a: Size, b: Size, lower: bool) -> Size:
        """The tighter of two bounds of one value (both hold, so the larger lower / smaller upper one does)."""
        if a == b or self.nonneg(add(a, mul(b, -1)) if lower else add(b, mul(a, -1))):
            return a
        if self.nonneg(add(b, mul(a, -1)) if lower else add(a, mul(b, -1))):
            return b
        return smax(a, b) if lower else smin(a, b)

    def least(self, xs: Iterable[Size]) -> Size:
        return self._fold(xs, smin, lambda a, b: self.nonneg(add(b, mul(a, -1))))

    def greatest(self, xs: Iterable[Size]) -> Size:
        return self._fold(xs, smax, lambda a, b: self.nonneg(add(a, mul(b, -1))))

    def _fold(
        self, xs: Iterable[Size], join: Callable[[Size, Size], Size], covers: Callable[[Size, Size], bool]
    ) -> Size:
        """The join of ``xs``, leaving out each one another covers (``covers(a, b)``: a is as extreme as b)."""
        kept: list[Size] = []
        for x in dict.fromkeys(xs):
            if any(covers(k, x) for k in kept):
                continue
            kept = [k for k in kept if not covers(x, k)] + [x]
        out = kept[0]
        for x in kept[1:]:
            out = join(out, x)
        return out

    # -- resolving template variables ----------------------------------------------------------------
    def variable(self, name: str, terms: frozenset[str]) -> Interval:
        return self.resolve(self.vars.texts[name], terms)

    def resolve(self, text: str, terms: frozenset[str]) -> Interval:
        """The interval of template variable ``text`` under the mask ``terms``; what it rests on joins
        ``conditions``."""
        key = (text, terms)
        hit = self._resolved.get(key)
        if hit is None:
            outer, self.conditions = self.conditions, set()
            try:
                iv = self._variable(text, terms)
                hit = self._resolved[key] = (iv, frozenset(self.conditions | {add(iv[1], mul(iv[0], -1))}))
            finally:
                self.conditions = outer | self.conditions
        self.conditions |= hit[1]
        return hit[0]

    def _variable(self, text: str, terms: frozenset[str]) -> Interval:
        lo: Size | None = None
        hi: Size | None = None
        for term in sorted(terms):  # every guard the mask holds: the variable is inside each
            for t, glo, ghi in self.vars.guards.get(term, ()):
                if t == text and glo is not None:
                    lo = glo if lo is None else smax(lo, glo)
                if t == text and ghi is not None:
                    hi = add(ghi, -1) if hi is None else smin(hi, add(ghi, -1))
        if lo is not None and hi is not None:
            return lo, hi
        if text in self.vars.defs:
            base = self.interval(self.vars.defs[text], terms)
        elif text in self.vars.bounds:
            blo, bhi = self.vars.bounds[text]
            base = (blo, add(bhi, -1))
        else:
            raise RuntimeError(
                f"kernel builder: template variable {text!r} has no declared range (aotc/kernels/reach.py)"
            )
        return (base[0] if lo is None else lo, base[1] if hi is None else hi)

    # -- interval arithmetic -----------------------------------------------------------------------------
    def interval(self, e: Size, terms: frozenset[str]) -> Interval:
        """Bounds of ``e`` where every template variable holds what it may under the mask ``terms``. Terms
        with the same variable atoms are bounded together, their coefficients summed (``x*seq - x`` is
        ``x*(seq - 1)``, not ``x*seq`` less the most ``x`` may be)."""
        if isinstance(e, int):
            return e, e
        groups: dict[tuple[Atom, ...], Size] = {}
        fixed: Size = e.const
        for mono, c in e.terms:
            varying = tuple(a for a in mono if self._varies(a))
            coef: Size = c
            for a in mono:
                if a not in varying:
                    coef = mul(coef, SymExpr((((a,), 1),)))
            if varying:
                groups[varying] = add(groups.get(varying, 0), coef)
            else:
                fixed = add(fixed, coef)
        lo: Size = fixed
        hi: Size = fixed
        for varying, coef in groups.items():
            if coef == 0:
                continue
            vlo, vhi = self._product([self._atom(a, terms) for a in varying])
            if self.nonneg(coef):
                tlo, thi = mul(coef, vlo), mul(coef, vhi)
            elif self.nonneg(mul(coef, -1)):
                tlo, thi = mul(coef, vhi), mul(coef, vlo)
            else:  # a coefficient of either sign (it is fixed for a launch): the larger and smaller end
                a, b = mul(coef, vlo), mul(coef, vhi)
                tlo, thi = smin(a, b), smax(a, b)
            lo, hi = add(lo, tlo), add(hi, thi)
        return lo, hi

    def _varies(self, a: Atom) -> bool:
        if a.kind == "sym":
            return a.name in self.vars.texts
        return any(isinstance(x, SymExpr) and x.free_symbols() & self.vars.texts.keys() for x in a.args)

    def _product(self, parts: list[Interval]) -> Interval:
        if len(parts) == 1:
            return parts[0]
        if all(self.nonneg(p[0]) for p in parts):
            plo: Size = 1
            phi: Size = 1
            for p in parts:
                plo, phi = mul(plo, p[0]), mul(phi, p[1])
            return plo, phi
        nlo, nhi = 1, 1  # signs unknown: the corners' numeric hull over the names' ranges
        for p in parts:
            a, b = self._numeric(p[0]), self._numeric(p[1])
            cands = (nlo * a[0], nlo * b[1], nhi * a[0], nhi * b[1])
            nlo, nhi = min(cands), max(cands)
        return nlo, nhi

    def _numeric(self, e: Size) -> Range:
        if isinstance(e, int):
            return e, e
        return bounds(e, self.names)

    def _atom(self, a: Atom, terms: frozenset[str]) -> Interval:
        if a.kind == "sym":
            if a.name in self.vars.texts:
                return self.variable(a.name, terms)
            if a.name not in self.names:
                raise RuntimeError(f"kernel builder: {a.name!r} in an offset is no size arg, constexpr or grid dim")
            e = sym(a.name)
            return e, e
        if a.kind in ("fdiv", "mod"):
            num, d = a.args
            floor = _floor_idiom(num, d) if a.kind == "fdiv" else None
            if floor is not None:  # floor(n / d) in either semantics, n's own interval: monotone in n
                self._positive(d)
                flo, fhi = self.interval(floor, terms)
                return floordiv(flo, d), floordiv(fhi, d)
            nlo, nhi = self.interval(num, terms)
            if isinstance(d, SymExpr) and d.free_symbols() & self.vars.texts.keys():
                return self._quotient_of_variable(a.kind, nlo, nhi, self.interval(d, terms))
            self._positive(d)
            if a.kind == "fdiv":  # floor(nlo/d) is at most the floor or truncated quotient of any n >= nlo
                return floordiv(nlo, d), floordiv(nhi, d) if self.nonneg(nhi) else smax(floordiv(nhi, d), 0)
            if not self.nonneg(nlo):  # a truncating remainder of a negative n lies in (-d, 0]
                return add(1, mul(d, -1)), add(d, -1)
            if self.nonneg(add(add(d, -1), mul(nhi, -1))):
                return nlo, nhi
            return 0, add(d, -1)
        (xlo, xhi), (ylo, yhi) = (self.interval(v, terms) for v in a.args)
        if a.kind == "min":
            return smin(xlo, ylo), smin(xhi, yhi)
        return smax(xlo, ylo), smax(xhi, yhi)

    def _positive(self, d: Size) -> None:
        """Bounds below rest on ``d >= 1``: proved here, or left to the reader (``requires``)."""
        if not self.nonneg(add(d, -1)):
            self.requires.append(add(d, -1))

    def _quotient_of_variable(self, kind: str, nlo: Size, nhi: Size, d: Interval) -> Interval:
        """``n // d`` or ``n % d`` for ``n`` in ``[nlo, nhi]`` and a divisor in ``d``: its least value at least 1
        (``requires``). A floor quotient grows with ``n`` and moves toward 0 as ``d`` grows, so its extremes are
        at the corners; a truncated one lies between the floor one and 0."""
        dlo, dhi = d
        self._positive(dlo)
        dlo, dhi = smax(dlo, 1), smax(dhi, 1)  # as they are wherever the requirement holds
        if kind == "fdiv":
            lo = smin(smin(floordiv(nlo, dlo), floordiv(nlo, dhi)), 0)
            hi = smax(smax(floordiv(nhi, dlo), floordiv(nhi, dhi)), 0)
            return lo, hi
        if self.nonneg(nlo):
            return 0, add(dhi, -1)
        return add(1, mul(dhi, -1)), add(dhi, -1)


def _floor_idiom(num: Size, d: Size) -> Size | None:
    """``n`` where ``num`` is ``n - (n % d + d) % d``: the floored quotient's idiom (``(n % d + d) % d`` is the
    floored remainder whether ``%`` truncates or floors, so ``num`` is ``d * floor(n / d)`` and ``num // d`` is
    ``floor(n / d)``), which interval arithmetic would bound as ``n`` less up to ``d - 1``; else None."""
    if isinstance(num, int):
        return None
    for mono, c in num.terms:
        if c != -1 or len(mono) != 1 or mono[0].kind != "mod" or mono[0].args[1] != d:
            continue
        inner = add(mono[0].args[0], mul(d, -1))  # n % d
        if not isinstance(inner, SymExpr) or inner.const or len(inner.terms) != 1:
            continue
        ((imono, ic),) = inner.terms
        if ic != 1 or len(imono) != 1 or imono[0].kind != "mod" or imono[0].args[1] != d:
            continue
        n = imono[0].args[0]
        if add(num, SymExpr(((mono, 1),))) == n:
            return n
    return None
