"""Index expressions for kernels: index variables over ``[0, extent)`` and range-aware simplification.

A view (reshape, permute, broadcast, slice...) never copies: its consumer computes the source element's
index from its own. Those indices are ``SymExpr``s over the graph's symbols (dims, inclusive int ranges)
and index variables (``$name``, from ``IndexSpace.var``) whose extents may themselves be symbolic. The
simplifier uses both to undo the div/mod chains that reshapes build, e.g. with ``0 <= h < H``::

    ((b*S + s)*H + h) // H  ->  b*S + s        ((b*S + s)*H + h) % H  ->  h

and to merge the digits of an unravelled index back when its row-major offset is taken again, which holds
for every int, in range or not::

    H*(r // H) + r % H  ->  r                  8*((r // 8) % 4) + r % 8  ->  r % 32

It proves facts by bounding an expression below/above with index-free expressions (each index variable
replaced by 0 or ``extent - 1``, as its coefficient's sign says), then bounding those over the symbols'
int ranges, so relations such as ``c*H*W + h*W + w < C*H*W`` hold for every dim value, not just at the maxima.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from itertools import combinations

from aotc.errors import ShapeError
from aotc.ir.symbolic import SYMBOL_NAME, Atom, SymExpr, add, exact_div, floordiv, mod, mul, smax, smin
from aotc.ir.symbolic_values import Range, bounds

# The bounds of an expression the space cannot bound: wider than any index.
_UNKNOWN = 2**126

__all__ = [
    "IndexSpace",
    "by_strides",
    "divisions",
    "flatten",
    "index_var",
    "is_index_var",
    "simplify_index",
    "unflatten",
]


# Kernel index variables are symbols named ``$name``: ``sym`` refuses the ``$``, so none clashes with a user's dim.
INDEX_PREFIX = "$"


def index_var(name: str) -> SymExpr:
    """The kernel index variable ``$name``: a symbol no user dim can be named (``sym`` refuses the ``$``)."""
    if not isinstance(name, str) or not SYMBOL_NAME.match(name):
        raise ShapeError(f"invalid index variable name {name!r}: use letters, digits and _")
    return SymExpr((((Atom("sym", INDEX_PREFIX + name),), 1),))


def is_index_var(name: str) -> bool:
    return name.startswith(INDEX_PREFIX)


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
        self._simple: dict[tuple[SymExpr, bool], int | SymExpr] = {}  # stays valid as variables are added

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
        try:
            lo, hi = bounds(e, self.ranges, self.multiples)
            if isinstance(e, SymExpr) and _has_index(e):
                lo = max(lo, bounds(self._bound(e, upper=False), self.ranges, self.multiples)[0])
                hi = min(hi, bounds(self._bound(e, upper=True), self.ranges, self.multiples)[1])
        except ShapeError:  # a divisor that may be 0 (a dim of an empty tensor): nothing is known
            lo, hi = -_UNKNOWN, _UNKNOWN
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
    def simplify(self, e: int | SymExpr, merge: bool = True) -> int | SymExpr:
        """An expression equal to e at every point of the space, with the div/mod the ranges make moot gone
        and, if ``merge``, the digits of a split index merged back (``k*(b // k) + b % k -> b``)."""
        out = self._simplify(e, merge)
        if merge:  # digits merged inside one part of e may be read by another part as well: then keep them
            plain = self._simplify(e, False)
            if divisions(plain) < divisions(out):
                return plain
        return out

    def _simplify(self, e: int | SymExpr, merge: bool) -> int | SymExpr:
        if isinstance(e, int):
            return e
        known = self._simple.get((e, merge))
        if known is not None:
            return known
        out: int | SymExpr = e.const
        for mono, c in e.terms:
            term: int | SymExpr = c
            for atom in mono:
                term = mul(term, self._simplify_atom(atom, merge))
            out = add(out, term)
        merged = _merge_digits(out) if merge and isinstance(out, SymExpr) else None
        if merged is not None:  # fewer div/mod atoms each time, so this ends
            out = self._simplify(merged, merge)
        self._simple[(e, merge)] = out
        return out

    def _simplify_atom(self, a: Atom, merge: bool) -> int | SymExpr:
        if a.kind == "sym":
            return SymExpr((((a,), 1),))
        x, y = (self._simplify(v, merge) for v in a.args)
        if a.kind == "min":
            return x if self.nonneg(add(y, mul(x, -1))) else y if self.nonneg(add(x, mul(y, -1))) else smin(x, y)
        if a.kind == "max":
            return y if self.nonneg(add(y, mul(x, -1))) else x if self.nonneg(add(x, mul(y, -1))) else smax(x, y)
        built = floordiv(x, y) if a.kind == "fdiv" else mod(x, y)
        atom = _lone_atom(built)
        if atom is None or atom.kind != a.kind:  # construction rewrote it (split off a quotient, say)
            return self._simplify(built, merge)
        return self._range_rules(atom, built, merge)

    def _range_rules(self, a: Atom, built: SymExpr, merge: bool) -> int | SymExpr:
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
                        return self._simplify(floordiv(x, m), merge)
                    return add(mul(self._simplify(mod(x, m), merge), k), y)
        return built


def divisions(e: int | SymExpr, held: Collection[int | SymExpr] = ()) -> int:
    """How many distinct ``//`` and ``%`` evaluating e takes, not counting (nor looking into) the expressions
    in ``held``, which a kernel variable already holds."""
    seen: set[Atom] = set()

    def walk(x: int | SymExpr) -> None:
        if isinstance(x, int) or x in held:
            return
        for mono, _ in x.terms:
            for a in mono:
                if a.kind == "sym" or a in seen or _lone(a) in held:
                    continue
                seen.add(a)
                for v in a.args:
                    walk(v)

    walk(e)
    return sum(a.kind in ("fdiv", "mod") for a in seen)


def flatten(index: Sequence[int | SymExpr], dims: Sequence[int | SymExpr]) -> int | SymExpr:
    """The row-major position of ``index`` in a shape ``dims`` (the outermost size is never read)."""
    out: int | SymExpr = 0
    for i, d in zip(index, dims):
        out = add(mul(out, d), i)
    return out


def unflatten(flat: int | SymExpr, dims: Sequence[int | SymExpr]) -> list[int | SymExpr]:
    """Per-dim indices of the row-major position ``flat`` in a shape ``dims``; the outermost takes no modulo,
    as ``flat`` lies below the product. A shape with a static 0 holds no element: every index is 0."""
    if any(isinstance(d, int) and d == 0 for d in dims):
        return [0] * len(dims)
    out: list[int | SymExpr] = []
    stride: int | SymExpr = 1
    for d in reversed(dims[1:]):
        out.append(mod(floordiv(flat, stride), d))
        stride = mul(stride, d)
    if dims:
        out.append(floordiv(flat, stride))
    return out[::-1]


def by_strides(flat: int | SymExpr, dims: Sequence[int | SymExpr]) -> list[int | SymExpr]:
    """Per-dim parts ``p`` with ``flatten(p, dims) == flat``, for printing an offset dim by dim: each term
    holding an index variable goes to the outermost dim (of size other than 1) whose stride divides it; the
    rest, index-free, to the innermost dim."""
    parts: list[int | SymExpr] = [0] * len(dims)
    if not dims:
        return parts
    rest = flat
    stride: int | SymExpr = 1
    strides = []
    for d in reversed(dims):
        strides.append(stride)
        stride = mul(stride, d)
    strides.reverse()
    for k in range(len(dims) - 1):
        if (isinstance(dims[k], int) and dims[k] == 1) or not isinstance(rest, SymExpr):
            continue
        for mono, c in rest.terms:
            term = SymExpr(((mono, c),))
            if not _has_index(term):
                continue
            q = exact_div(term, strides[k])
            if q is not None:
                parts[k] = add(parts[k], q)
                rest = add(rest, mul(term, -1))
    parts[-1] = rest
    return parts


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


def _merge_digits(e: SymExpr) -> int | SymExpr | None:
    """e with one pair of digit terms merged, or None when no pair is there. For positive k, m and any ints b, t
    (floor division): ``y*(b % k) + y*k*(b // k) == y*b`` and ``y*(b % k) + y*k*((b // k + t) % m) ==
    y*((b + k*t) % (k*m))``. Unravelling an index and taking its row-major offset again leaves such pairs behind."""
    terms = [(SymExpr(((mono, c),)), mono, c) for mono, c in e.terms]
    for i, (low, mono, c) in enumerate(terms):
        for pos, atom in enumerate(mono):
            if atom.kind != "mod":
                continue
            b, k = atom.args
            y = _cofactor(mono, pos, c)
            high = floordiv(b, k)
            for j, (other, mono2, c2) in enumerate(terms):
                if j == i:
                    continue
                for pos2, atom2 in enumerate(mono2):
                    if _cofactor(mono2, pos2, c2) != mul(y, k):
                        continue
                    if _lone(atom2) == high:
                        merged = mul(y, b)
                    elif atom2.kind == "mod" and _holds_once(atom2.args[0], high):
                        # (b//k + t) % m with t any int (a constant normalization moved, say): the digits of b + k*t
                        t = add(atom2.args[0], mul(high, -1))
                        merged = mul(y, mod(add(b, mul(k, t)), mul(k, atom2.args[1])))
                    else:
                        continue
                    out = add(add(e, mul(add(low, other), -1)), merged)
                    if divisions(out) < divisions(e):  # not when the digits are read elsewhere in e as well
                        return out
    return None


def _holds_once(e: int | SymExpr, atom: int | SymExpr) -> bool:
    """Whether ``atom`` (a lone atom) is one term of e, with coefficient 1."""
    return isinstance(e, SymExpr) and isinstance(atom, SymExpr) and len(atom.terms) == 1 and atom.terms[0] in e.terms


def _cofactor(mono: tuple[Atom, ...], pos: int, c: int) -> int | SymExpr:
    """The term ``c * prod(mono)`` with its atom at ``pos`` left out."""
    rest = mono[:pos] + mono[pos + 1 :]
    return SymExpr(((rest, c),)) if rest else c


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


def _lone(a: Atom) -> SymExpr:
    return SymExpr((((a,), 1),))
