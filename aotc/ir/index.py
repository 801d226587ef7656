"""Index expressions for kernels: index variables over ``[0, extent)``, range-aware simplification, Triton text.

A view (reshape, permute, broadcast, slice...) never copies: its consumer computes the source element's
index from its own. Those indices are ``SymExpr``s over the graph's symbols (dims, inclusive int ranges)
and index variables (``$name``, from ``IndexSpace.var``) whose extents may themselves be symbolic. The
simplifier uses both to undo the div/mod chains that reshapes build, e.g. with ``0 <= h < H``::

    ((b*S + s)*H + h) // H  ->  b*S + s        ((b*S + s)*H + h) % H  ->  h

It proves facts by bounding an expression below/above with index-free expressions (each index variable
replaced by 0 or ``extent - 1``, as its coefficient's sign says), then bounding those over the symbols'
int ranges, so relations such as ``c*H*W + h*W + w < C*H*W`` hold for every dim value, not just at the maxima.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from itertools import combinations

from aotc.errors import ShapeError
from aotc.ir.symbolic import (
    INDEX_PREFIX,
    Atom,
    Range,
    SymExpr,
    add,
    bounds,
    exact_div,
    floordiv,
    index_var,
    is_index_var,
    mod,
    mul,
    smax,
    smin,
)

__all__ = ["IndexSpace", "index_var", "is_index_var", "simplify_index", "to_triton"]


class IndexSpace:
    """Ranges of the graph symbols plus the index variables of one kernel (each over ``[0, extent)``)."""

    def __init__(self, ranges: Mapping[str, Range], multiples: Mapping[str, int] | None = None) -> None:
        for name in ranges:
            if is_index_var(name):
                raise ShapeError(f"{name!r} is an index variable: declare it with IndexSpace.var")
        self.ranges: dict[str, Range] = dict(ranges)
        self.multiples: dict[str, int] = dict(multiples or {})
        self.extents: dict[str, int | SymExpr] = {}
        self._bounds: dict[int | SymExpr, Range] = {}

    def var(self, name: str, extent: int | SymExpr) -> SymExpr:
        """A new index variable ``$name`` over ``[0, extent)``; extent is over the graph symbols only."""
        v = index_var(name)
        full = v.symbol_name
        if full in self.extents:
            raise ShapeError(f"index variable {full!r} is declared twice")
        if isinstance(extent, SymExpr) and any(is_index_var(n) for n in extent.free_symbols()):
            raise ShapeError(f"extent {extent} of {full!r} may not depend on another index variable")
        _, hi = bounds(extent, self.ranges, self.multiples)
        self.extents[full] = extent
        # An empty extent leaves the variable no value at all; any range is then sound.
        self.ranges[full] = (0, max(0, hi - 1))
        self._bounds.clear()
        return v

    # -- facts -------------------------------------------------------------------------------------------
    def bounds(self, e: int | SymExpr) -> Range:
        """Int bounds of e over every point of the space (symbols and index variables in range)."""
        known = self._bounds.get(e)
        if known is not None:
            return known
        lo, hi = bounds(e, self.ranges, self.multiples)
        if isinstance(e, SymExpr) and _has_index(e):
            lo = max(lo, bounds(self._bound(e, upper=False), self.ranges, self.multiples)[0])
            hi = min(hi, bounds(self._bound(e, upper=True), self.ranges, self.multiples)[1])
        self._bounds[e] = (lo, hi)
        return lo, hi

    def nonneg(self, e: int | SymExpr) -> bool:
        """``e >= 0`` at every point of the space."""
        return self.bounds(e)[0] >= 0

    def less(self, a: int | SymExpr, b: int | SymExpr) -> bool:
        """``a < b`` at every point of the space."""
        return self.nonneg(add(b, add(mul(a, -1), -1)))

    def _bound(self, e: int | SymExpr, upper: bool) -> int | SymExpr:
        """An expression free of index variables that is >= e (upper) or <= e (not upper) at every point."""
        if isinstance(e, int) or not _has_index(e):
            return e
        out: int | SymExpr = e.const
        for mono, c in e.terms:
            varying = [a for a in mono if _atom_has_index(a)]
            coef: int | SymExpr = c
            for a in mono:
                if not _atom_has_index(a):
                    coef = mul(coef, SymExpr((((a,), 1),)))
            if not varying:
                out = add(out, coef)
                continue
            clo, chi = bounds(coef, self.ranges, self.multiples)
            if len(varying) == 1 and (clo >= 0 or chi <= 0):
                out = add(out, mul(coef, self._atom_bound(varying[0], upper == (clo >= 0))))
            else:  # a product of index terms, or a coefficient of either sign: its int interval
                tlo, thi = bounds(SymExpr(((mono, c),)), self.ranges, self.multiples)
                out = add(out, thi if upper else tlo)
        return out

    def _atom_bound(self, a: Atom, upper: bool) -> int | SymExpr:
        if a.kind == "sym":
            return add(self.extents[a.name], -1) if upper else 0
        if a.kind in ("fdiv", "mod"):
            num, d = a.args
            if isinstance(d, SymExpr) and _has_index(d):
                return self._int_bound(a, upper)
            if a.kind == "fdiv":  # monotone in the numerator for a positive divisor
                return floordiv(self._bound(num, upper), d)
            if self.nonneg(num) and self.less(num, d):
                return self._bound(num, upper)
            return add(d, -1) if upper else 0
        x, y = (self._bound(v, upper) for v in a.args)
        return smin(x, y) if a.kind == "min" else smax(x, y)

    def _int_bound(self, a: Atom, upper: bool) -> int:
        lo, hi = bounds(SymExpr((((a,), 1),)), self.ranges, self.multiples)
        return hi if upper else lo

    # -- simplification ----------------------------------------------------------------------------------
    def simplify(self, e: int | SymExpr) -> int | SymExpr:
        """An expression equal to e at every point of the space, with the div/mod the ranges make moot gone."""
        if isinstance(e, int):
            return e
        out: int | SymExpr = e.const
        for mono, c in e.terms:
            term: int | SymExpr = c
            for atom in mono:
                term = mul(term, self._simplify_atom(atom))
            out = add(out, term)
        return out

    def _simplify_atom(self, a: Atom) -> int | SymExpr:
        if a.kind == "sym":
            return SymExpr((((a,), 1),))
        x, y = (self.simplify(v) for v in a.args)
        if a.kind == "min":
            return x if self.nonneg(add(y, mul(x, -1))) else y if self.nonneg(add(x, mul(y, -1))) else smin(x, y)
        if a.kind == "max":
            return y if self.nonneg(add(y, mul(x, -1))) else x if self.nonneg(add(x, mul(y, -1))) else smax(x, y)
        built = floordiv(x, y) if a.kind == "fdiv" else mod(x, y)
        atom = _lone_atom(built)
        if atom is None or atom.kind != a.kind:  # construction rewrote it (split off a quotient, say)
            return self.simplify(built)
        return self._range_rules(atom, built)

    def _range_rules(self, a: Atom, built: SymExpr) -> int | SymExpr:
        num, d = a.args
        if self.nonneg(num) and self.less(num, d):  # 0 <= n < d
            return 0 if a.kind == "fdiv" else num
        if a.kind == "fdiv" and self.less(num, 0) and self.nonneg(add(num, d)):  # -d <= n < 0
            return -1
        # (x*k + y) // (k*m) == x // m and (x*k + y) % (k*m) == (x % m)*k + y when 0 <= y < k
        if isinstance(num, SymExpr):
            for k, m in _factorings(num, d):
                x, y = _split_by(num, k)
                if x != 0 and self.nonneg(y) and self.less(y, k):
                    if a.kind == "fdiv":
                        return self.simplify(floordiv(x, m))
                    return add(mul(self.simplify(mod(x, m)), k), y)
        return built


def simplify_index(e: int | SymExpr, space: IndexSpace) -> int | SymExpr:
    """``space.simplify(e)``: e rewritten with the facts the space's ranges prove."""
    return space.simplify(e)


def _has_index(e: int | SymExpr) -> bool:
    return isinstance(e, SymExpr) and any(is_index_var(n) for n in e.free_symbols())


def _atom_has_index(a: Atom) -> bool:
    return _has_index(SymExpr((((a,), 1),)))


def _lone_atom(e: int | SymExpr) -> Atom | None:
    if isinstance(e, SymExpr) and not e.const and len(e.terms) == 1 and e.terms[0][1] == 1:
        mono = e.terms[0][0]
        if len(mono) == 1:
            return mono[0]
    return None


def _factorings(num: SymExpr, d: int | SymExpr) -> list[tuple[int | SymExpr, int | SymExpr]]:
    """Ways to write the divisor as k*m with 1 < k < d: sub-products of its atoms times a factor of its int."""
    if isinstance(d, int):
        ints, atoms = d, ()
    elif d.const or len(d.terms) != 1:
        return []
    else:
        atoms, ints = d.terms[0]
    int_factors = {1, ints}
    for _, c in num.terms:
        int_factors.add(math.gcd(c, ints))
    out = []
    for n in range(len(atoms) + 1):
        for chosen in combinations(range(len(atoms)), n):
            for f in sorted(int_factors):
                k: int | SymExpr = f
                m: int | SymExpr = ints // f
                for i, atom in enumerate(atoms):
                    factor = SymExpr((((atom,), 1),))
                    if i in chosen:
                        k = mul(k, factor)
                    else:
                        m = mul(m, factor)
                if k != 1 and m != 1:
                    out.append((k, m))
    return out


def _split_by(num: SymExpr, k: int | SymExpr) -> tuple[int | SymExpr, int | SymExpr]:
    """num == x*k + y: x from the terms k divides exactly, y the rest (with the constant)."""
    x: int | SymExpr = 0
    y: int | SymExpr = num.const
    for mono, c in num.terms:
        term = SymExpr(((mono, c),))
        q = exact_div(term, k)
        if q is None:
            y = add(y, term)
        else:
            x = add(x, q)
    return x, y


# -- Triton text -------------------------------------------------------------------------------------------

_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$|^[0-9]+$")


def to_triton(e: int | SymExpr, names: Mapping[str, str], space: IndexSpace | None = None) -> str:
    """Python/Triton source text for e; ``names`` maps every symbol and index variable to its Triton text.

    Triton's integer ``//`` and ``%`` truncate toward zero (C semantics), which equals floor division only
    for a non-negative numerator; the divisor is always positive. Index math has non-negative numerators,
    so they print as plain ``//`` and ``%``. Given ``space``, a numerator it cannot prove non-negative
    prints in a form that is exact for either sign.
    """
    return _Printer(names, space).expr(e)


class _Printer:
    def __init__(self, names: Mapping[str, str], space: IndexSpace | None) -> None:
        self.names, self.space = names, space

    def expr(self, e: int | SymExpr) -> str:
        if isinstance(e, int):
            return str(e)
        parts: list[tuple[int, str]] = []
        for mono, c in e.terms:
            factors = [self.atom(a) for a in mono]
            body = " * ".join(([str(abs(c))] if abs(c) != 1 else []) + factors)
            parts.append((-1 if c < 0 else 1, body))
        if e.const:
            parts.append((-1 if e.const < 0 else 1, str(abs(e.const))))
        out = ("-" if parts[0][0] < 0 else "") + parts[0][1]
        for sign, body in parts[1:]:
            out += f" - {body}" if sign < 0 else f" + {body}"
        return out

    def wrapped(self, e: int | SymExpr) -> str:
        text = self.expr(e)
        return text if _SIMPLE.match(text) else f"({text})"

    def atom(self, a: Atom) -> str:
        if a.kind == "sym":
            try:
                text = self.names[a.name]
            except KeyError:
                what = "index variable" if a.name.startswith(INDEX_PREFIX) else "symbol"
                raise ShapeError(f"to_triton: {what} {a.name!r} has no name in the kernel") from None
            return text if _SIMPLE.match(text) else f"({text})"
        if a.kind in ("min", "max"):
            x, y = (self.expr(v) for v in a.args)
            return f"tl.{a.kind}imum({x}, {y})"
        num, d = (self.wrapped(v) for v in a.args)
        if self.space is None or self.space.nonneg(a.args[0]):
            return f"({num} {'//' if a.kind == 'fdiv' else '%'} {d})"
        # floor mod from the truncating one: (n % d + d) % d; then n - that is a multiple of d, exact to divide
        fmod = f"(({num} % {d} + {d}) % {d})"
        return fmod if a.kind == "mod" else f"(({num} - {fmod}) // {d})"
