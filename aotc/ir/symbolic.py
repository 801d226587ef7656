"""Symbolic integers: normalized sums of products over named symbols.

An expression is a polynomial with integer coefficients whose atoms are
symbols, floor-divisions and remainders, and min/max. A divisor is a positive
int or a symbolic expression that is positive for every binding (a product of
dims, say): construction relies on that, and ``evaluate`` raises ShapeError
when a divisor comes out <= 0. Construction always normalizes, so two
equal-looking expressions compare equal structurally and an expression with no
symbols is a plain ``int``.

Symbols named ``$name`` are kernel index variables (see ``aotc.ir.index``);
``sym()`` refuses them, so they never clash with a user's dim names.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from aotc.errors import ShapeError

Dim = "int | SymExpr"


@dataclass(frozen=True, slots=True)
class Atom:
    """A factor of a monomial: ``sym`` (name), ``fdiv``/``mod`` (numerator, divisor), ``min``/``max`` (a, b)."""

    kind: str
    name: str = ""
    args: tuple = ()

    def key(self) -> str:
        return _atom_sexpr(self)


Monomial = tuple[Atom, ...]


@dataclass(frozen=True, slots=True)
class SymExpr:
    """sum(coeff * prod(atoms)) + const. Build through ``sym()`` and operators only."""

    terms: tuple[tuple[Monomial, int], ...]
    const: int = 0

    # -- arithmetic -------------------------------------------------------
    def __add__(self, other: int | SymExpr) -> int | SymExpr:
        return add(self, other)

    __radd__ = __add__

    def __neg__(self) -> int | SymExpr:
        return mul(self, -1)

    def __sub__(self, other: int | SymExpr) -> int | SymExpr:
        return add(self, mul(other, -1))

    def __rsub__(self, other: int | SymExpr) -> int | SymExpr:
        return add(other, mul(self, -1))

    def __mul__(self, other: int | SymExpr) -> int | SymExpr:
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: int | SymExpr) -> int | SymExpr:
        return floordiv(self, other)

    def __mod__(self, other: int | SymExpr) -> int | SymExpr:
        return mod(self, other)

    def __rfloordiv__(self, other: int) -> int | SymExpr:
        return floordiv(other, self)

    def __rmod__(self, other: int) -> int | SymExpr:
        return mod(other, self)

    # -- queries ----------------------------------------------------------
    def free_symbols(self) -> frozenset[str]:
        out: set[str] = set()
        for mono, _ in self.terms:
            for atom in mono:
                out |= _atom_symbols(atom)
        return frozenset(out)

    def is_symbol(self) -> bool:
        return (
            self.const == 0
            and len(self.terms) == 1
            and self.terms[0][1] == 1
            and len(self.terms[0][0]) == 1
            and self.terms[0][0][0].kind == "sym"
        )

    @property
    def symbol_name(self) -> str:
        if not self.is_symbol():
            raise ShapeError(f"{self} is not a single symbol")
        return self.terms[0][0][0].name

    def __str__(self) -> str:
        return to_infix(self)

    def __repr__(self) -> str:
        return f"SymExpr({to_infix(self)})"


# -- construction -------------------------------------------------------------

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Limits that keep hostile input (e.g. a corrupted artifact) from expanding a product of sums
# into millions of terms; real shape expressions stay far below them.
MAX_TERMS = 4096
MAX_DEGREE = 64


def sym(name: str) -> SymExpr:
    if not isinstance(name, str) or not _NAME.match(name) or name in ("min", "max"):
        raise ShapeError(f"invalid symbol name {name!r}: use letters, digits and _")
    return SymExpr((((Atom("sym", name),), 1),))


INDEX_PREFIX = "$"


def index_var(name: str) -> SymExpr:
    """The kernel index variable ``$name``: a symbol no user dim can be named (``sym`` refuses the ``$``)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ShapeError(f"invalid index variable name {name!r}: use letters, digits and _")
    return SymExpr((((Atom("sym", INDEX_PREFIX + name),), 1),))


def is_index_var(name: str) -> bool:
    return name.startswith(INDEX_PREFIX)


def _as_poly(x: int | SymExpr) -> SymExpr:
    if isinstance(x, SymExpr):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise ShapeError(f"expected an int or symbolic int, got {type(x).__name__}")
    return SymExpr((), x)


def _make(coeffs: dict[Monomial, int], const: int) -> int | SymExpr:
    terms = tuple(sorted(((m, c) for m, c in coeffs.items() if c != 0), key=lambda t: _mono_key(t[0])))
    if not terms:
        return const
    return SymExpr(terms, const)


def _mono_key(m: Monomial) -> str:
    return "*".join(a.key() for a in m)


def add(a: int | SymExpr, b: int | SymExpr) -> int | SymExpr:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    pa, pb = _as_poly(a), _as_poly(b)
    coeffs = dict(pa.terms)
    for m, c in pb.terms:
        coeffs[m] = coeffs.get(m, 0) + c
    return _make(coeffs, pa.const + pb.const)


def mul(a: int | SymExpr, b: int | SymExpr) -> int | SymExpr:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    pa, pb = _as_poly(a), _as_poly(b)
    coeffs: dict[Monomial, int] = {}
    ta = list(pa.terms) + ([((), pa.const)] if pa.const else [])
    tb = list(pb.terms) + ([((), pb.const)] if pb.const else [])
    if len(ta) * len(tb) > MAX_TERMS or _degree(ta) + _degree(tb) > MAX_DEGREE:
        raise ShapeError("symbolic expression is too large")
    const = 0
    for ma, ca in ta:
        for mb, cb in tb:
            m = tuple(sorted(ma + mb, key=Atom.key))
            if m:
                coeffs[m] = coeffs.get(m, 0) + ca * cb
            else:
                const += ca * cb
    return _make(coeffs, const)


def _degree(terms: list[tuple[Monomial, int]]) -> int:
    return max((len(m) for m, _ in terms), default=0)


def _split(e: SymExpr, d: int) -> tuple[int | SymExpr, int | SymExpr]:
    """e == d*q + r with every coefficient of r in [0, d)."""
    q: dict[Monomial, int] = {}
    r: dict[Monomial, int] = {}
    for m, c in e.terms:
        q[m], r[m] = divmod(c, d)
    qc, rc = divmod(e.const, d)
    return _make(q, qc), _make(r, rc)


def _check_divisor(d: object, op: str) -> int | SymExpr:
    if isinstance(d, SymExpr):
        return d  # positive by the caller's ranges; evaluate() checks each binding
    if not isinstance(d, int) or isinstance(d, bool) or d <= 0:
        raise ShapeError(f"{op} needs a positive int or symbolic divisor, got {d!r}")
    return d


def _content(e: SymExpr, d: int) -> int:
    g = math.gcd(d, e.const)
    for _, c in e.terms:
        g = math.gcd(g, c)
    return g


def _divide_exact(e: SymExpr, g: int) -> int | SymExpr:
    return _make({m: c // g for m, c in e.terms}, e.const // g)


def _operand(a: object) -> int | SymExpr:
    if isinstance(a, SymExpr):
        return a
    return _as_poly(a).const  # raises ShapeError unless a is a plain int


def _single_atom(r: int | SymExpr, kind: str) -> Atom | None:
    """The atom when r is exactly one atom of this kind (coefficient 1, no constant)."""
    if isinstance(r, SymExpr) and r.const == 0 and len(r.terms) == 1 and r.terms[0][1] == 1:
        mono = r.terms[0][0]
        if len(mono) == 1 and mono[0].kind == kind:
            return mono[0]
    return None


def floordiv(a: int | SymExpr, d: int | SymExpr) -> int | SymExpr:
    d = _check_divisor(d, "//")
    if isinstance(d, SymExpr):
        return _sym_floordiv(_operand(a), d)
    if isinstance(a, int):
        return a // d
    if d == 1:
        return a
    q, r = _split(a, d)
    if isinstance(r, int):
        return add(q, r // d)
    g = _content(r, d)
    if g > 1:  # (g*x) // (g*d) == x // d
        return add(q, floordiv(_divide_exact(r, g), d // g))
    inner = _single_atom(r, "fdiv")
    if inner is not None:  # (x // a) // b == x // (a*b) for positive a, b
        return add(q, floordiv(inner.args[0], mul(inner.args[1], d)))
    return add(q, SymExpr((((Atom("fdiv", args=(r, d)),), 1),)))


def mod(a: int | SymExpr, d: int | SymExpr) -> int | SymExpr:
    d = _check_divisor(d, "%")
    if isinstance(d, SymExpr):
        return _sym_mod(_operand(a), d)
    if isinstance(a, int):
        return a % d
    if d == 1:
        return 0
    _, r = _split(a, d)
    if isinstance(r, int):
        return r % d
    g = _content(r, d)
    if g > 1:  # (g*x) % (g*d) == g * (x % d)
        return mul(g, mod(_divide_exact(r, g), d // g))
    inner = _single_atom(r, "mod")
    if inner is not None and isinstance(inner.args[1], int) and inner.args[1] % d == 0:
        return mod(inner.args[0], d)
    return SymExpr((((Atom("mod", args=(r, d)),), 1),))


# Symbolic divisors. The divisor d is positive for every binding, and so is each factor of a
# one-term divisor (dims are never negative): the rules below rely on both.


def _split_sym(a: SymExpr, d: SymExpr) -> tuple[int | SymExpr, int | SymExpr] | None:
    """a == d*q + r, moving into q each term of a that is a multiple of the one-term divisor d."""
    if d.const or len(d.terms) != 1:
        return None
    dmono, dc = d.terms[0]
    if dc <= 0:
        return None
    q: dict[Monomial, int] = {}
    r: dict[Monomial, int] = {}
    qconst = 0
    for m, c in a.terms:
        rest = _remove_atoms(m, dmono)
        if rest is None:
            r[m] = r.get(m, 0) + c
            continue
        qc, rc = divmod(c, dc)
        if not rest:
            qconst += qc
        elif qc:
            q[rest] = q.get(rest, 0) + qc
        if rc:
            r[m] = r.get(m, 0) + rc
    return _make(q, qconst), _make(r, a.const)


def _remove_atoms(m: Monomial, sub: Monomial) -> Monomial | None:
    rest = list(m)
    for atom in sub:
        if atom not in rest:
            return None
        rest.remove(atom)
    return tuple(rest)


def _common_factor(r: SymExpr, d: SymExpr) -> tuple[int, Monomial] | None:
    """An int g > 1 or atoms shared by every term of r (r has no constant) and the one-term divisor d."""
    if r.const or d.const or len(d.terms) != 1:
        return None
    dmono, dc = d.terms[0]
    g = _content(r, dc)
    shared = list(dmono)
    for m, _ in r.terms:
        left = list(m)
        keep = []
        for atom in shared:
            if atom in left:
                left.remove(atom)
                keep.append(atom)
        shared = keep
    if g == 1 and not shared:
        return None
    return g, tuple(shared)


def _cancel(e: int | SymExpr, g: int, atoms: Monomial) -> int | SymExpr:
    out = exact_div(e, g) if g > 1 else e
    for atom in atoms:
        out = exact_div(out, SymExpr((((atom,), 1),)))
    assert out is not None  # the caller checked every term holds g and the atoms
    return out


def _sym_floordiv(a: int | SymExpr, d: SymExpr) -> int | SymExpr:
    if isinstance(a, int):
        if a in (0, -1):  # 0 <= 0/d < 1 and -1 <= -1/d < 0 for every d >= 1
            return a
        return SymExpr((((Atom("fdiv", args=(a, d)),), 1),))
    q = exact_div(a, d)
    if q is not None:
        return q
    split = _split_sym(a, d)
    if split is not None and split[0] != 0:
        return add(split[0], _sym_floordiv(split[1], d))
    common = _common_factor(a, d)
    if common is not None:  # (g*k*x) // (g*k*y) == x // y
        return floordiv(_cancel(a, *common), _cancel(d, *common))
    inner = _single_atom(a, "fdiv")
    if inner is not None:  # (x // b) // d == x // (b*d) for positive b, d
        return floordiv(inner.args[0], mul(inner.args[1], d))
    return SymExpr((((Atom("fdiv", args=(a, d)),), 1),))


def _sym_mod(a: int | SymExpr, d: SymExpr) -> int | SymExpr:
    if a == 0:
        return 0
    if isinstance(a, int):
        return SymExpr((((Atom("mod", args=(a, d)),), 1),))
    if exact_div(a, d) is not None:
        return 0
    split = _split_sym(a, d)
    if split is not None and split[0] != 0:
        return _sym_mod(split[1], d)
    common = _common_factor(a, d)
    if common is not None:  # (g*k*x) % (g*k*y) == g*k * (x % y)
        g, atoms = common
        factor: int | SymExpr = g
        for atom in atoms:
            factor = mul(factor, SymExpr((((atom,), 1),)))
        return mul(factor, mod(_cancel(a, *common), _cancel(d, *common)))
    inner = _single_atom(a, "mod")
    if inner is not None and exact_div(inner.args[1], d) is not None:  # d divides b: (x % b) % d == x % d
        return mod(inner.args[0], d)
    return SymExpr((((Atom("mod", args=(a, d)),), 1),))


def exact_div(a: int | SymExpr, b: int | SymExpr) -> int | SymExpr | None:
    """a / b when it is exact for every binding: b an int dividing every coefficient of a, or a
    single monomial dividing every term of a; else None."""
    if isinstance(b, int):
        if b == 0:
            return None
        if isinstance(a, int):
            return a // b if a % b == 0 else None
        if a.const % b or any(c % b for _, c in a.terms):
            return None
        return floordiv(a, b) if b > 0 else floordiv(mul(a, -1), -b)  # exact, so floor is the quotient
    if b.const or len(b.terms) != 1 or isinstance(a, int) or a.const:
        return None
    (bmono, bc), out = b.terms[0], 0
    for mono, c in a.terms:
        rest = list(mono)
        for atom in bmono:
            if atom not in rest:
                return None
            rest.remove(atom)
        if c % bc:
            return None
        term: int | SymExpr = c // bc
        for atom in rest:
            term = mul(term, SymExpr((((atom,), 1),)))
        out = add(out, term)
    return out


def _minmax(kind: str, a: int | SymExpr, b: int | SymExpr) -> int | SymExpr:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b) if kind == "min" else max(a, b)
    if a == b:
        return a
    diff = add(a, mul(b, -1))
    if isinstance(diff, int):  # a and b differ by a constant
        return (b if diff > 0 else a) if kind == "min" else (a if diff > 0 else b)
    _as_poly(a), _as_poly(b)  # type check; plain ints stay ints inside the atom
    x, y = sorted((a, b), key=to_sexpr)
    return SymExpr((((Atom(kind, args=(x, y)),), 1),))


def smin(a: int | SymExpr, b: int | SymExpr) -> int | SymExpr:
    return _minmax("min", a, b)


def smax(a: int | SymExpr, b: int | SymExpr) -> int | SymExpr:
    return _minmax("max", a, b)


def substitute(e: int | SymExpr, env: Mapping[str, int | SymExpr]) -> int | SymExpr:
    """``e`` with every symbol replaced by its expression in ``env`` (all at once), rebuilt and normalized;
    ShapeError for a symbol ``env`` lacks or an int divisor that comes out <= 0."""
    if isinstance(e, int):
        return e
    out: int | SymExpr = e.const
    for mono, c in e.terms:
        term: int | SymExpr = c
        for atom in mono:
            term = mul(term, _substitute_atom(atom, env))
        out = add(out, term)
    return out


def _substitute_atom(a: Atom, env: Mapping[str, int | SymExpr]) -> int | SymExpr:
    if a.kind == "sym":
        try:
            return env[a.name]
        except KeyError:
            raise ShapeError(f"symbol {a.name!r} is not bound") from None
    x, y = (substitute(v, env) for v in a.args)
    if a.kind == "fdiv":
        return floordiv(x, y)
    if a.kind == "mod":
        return mod(x, y)
    return smin(x, y) if a.kind == "min" else smax(x, y)


def reduce_quotients(e: int | SymExpr) -> int | SymExpr:
    """``e`` with each floor-division or remainder by a divisor of several terms whose numerator is a multiple of
    the divisor plus a constant reduced: ``(3*b*s - 3*b - 1) // (3*s - 3)`` is ``b - 1`` (positive divisors, as
    everywhere). Construction leaves such quotients alone (file expressions keep their canonical forms); the plan
    checks reduce what they substitute before proving it."""
    if isinstance(e, int) or not _has_poly_divisor(e):
        return e
    out: int | SymExpr = e.const
    for mono, c in e.terms:
        term: int | SymExpr = c
        for atom in mono:
            term = mul(term, _reduce_atom(atom))
        out = add(out, term)
    return out


def _has_poly_divisor(e: int | SymExpr) -> bool:
    if isinstance(e, int):
        return False
    for mono, _ in e.terms:
        for a in mono:
            if a.kind == "sym":
                continue
            d = a.args[1]
            if a.kind in ("fdiv", "mod") and isinstance(d, SymExpr) and (len(d.terms) > 1 or d.const):
                return True
            if any(_has_poly_divisor(x) for x in a.args):
                return True
    return False


def _reduce_atom(a: Atom) -> int | SymExpr:
    if a.kind == "sym":
        return SymExpr((((a,), 1),))
    x, y = (reduce_quotients(v) for v in a.args)
    if a.kind in ("fdiv", "mod") and isinstance(y, SymExpr) and (len(y.terms) > 1 or y.const):
        split = _poly_quotient(x, y)
        if split is not None:
            q, r = split
            return add(q, floordiv(r, y)) if a.kind == "fdiv" else mod(r, y)
    if a.kind == "fdiv":
        return floordiv(x, y)
    if a.kind == "mod":
        return mod(x, y)
    return smin(x, y) if a.kind == "min" else smax(x, y)


def _poly_quotient(a: int | SymExpr, d: SymExpr) -> tuple[int | SymExpr, int] | None:
    """(q, r) with ``a == d*q + r`` and r an int, for a monomial q found from one term of d; else None."""
    if isinstance(a, int):
        return None
    lead = next(((m, c) for m, c in d.terms if m), None)
    if lead is None:
        return None
    dmono, dc = lead
    for mono, c in a.terms:
        rest = _remove_atoms(mono, dmono)
        if rest is None or c % dc:
            continue
        q: int | SymExpr = c // dc
        for atom in rest:
            q = mul(q, SymExpr((((atom,), 1),)))
        r = add(a, mul(mul(d, q), -1))
        if isinstance(r, int):
            return q, r
    return None


# -- evaluation and ranges -----------------------------------------------------


def evaluate(e: int | SymExpr, env: Mapping[str, int]) -> int:
    """The value of e with every symbol bound in env."""
    if isinstance(e, int):
        return e
    total = e.const
    for m, c in e.terms:
        p = c
        for atom in m:
            p *= _eval_atom(atom, env)
        total += p
    return total


def _eval_atom(a: Atom, env: Mapping[str, int]) -> int:
    if a.kind == "sym":
        try:
            return env[a.name]
        except KeyError:
            raise ShapeError(f"symbol {a.name!r} is not bound") from None
    if a.kind in ("fdiv", "mod"):
        num, d = evaluate(a.args[0], env), evaluate(a.args[1], env)
        if d <= 0:
            raise ShapeError(f"divisor {to_infix(a.args[1])} = {d} is not positive")
        return num // d if a.kind == "fdiv" else num % d
    x, y = evaluate(a.args[0], env), evaluate(a.args[1], env)
    return min(x, y) if a.kind == "min" else max(x, y)


Range = tuple[int, int]


def bounds(
    e: int | SymExpr,
    ranges: Mapping[str, Range],
    multiples: Mapping[str, int] | None = None,
) -> Range:
    """An interval holding e for every binding of its symbols within ranges."""
    if isinstance(e, int):
        return (e, e)
    lo, hi = _interval(e, ranges, multiples or {})
    # Interval arithmetic sees h and h//2 as unrelated, so h - 2*(h//2) looks like it may be
    # negative. The same value written with h%2 instead of the floor-division is bounded
    # tightly; both intervals hold e, so their intersection does too.
    alt = _floordivs_as_mods(e)
    if alt is not None:
        alo, ahi = (alt, alt) if isinstance(alt, int) else _interval(alt, ranges, multiples or {})
        lo, hi = max(lo, alo), min(hi, ahi)
    return lo, hi


def _interval(e: SymExpr, ranges: Mapping[str, Range], multiples: Mapping[str, int]) -> Range:
    lo = hi = e.const
    for m, c in e.terms:
        tlo, thi = c, c
        for atom in m:
            alo, ahi = _atom_bounds(atom, ranges, multiples)
            cands = (tlo * alo, tlo * ahi, thi * alo, thi * ahi)
            tlo, thi = min(cands), max(cands)
        lo += tlo
        hi += thi
    return lo, hi


def _floordivs_as_mods(e: SymExpr) -> int | SymExpr | None:
    """e with each term c*(r//d) split as (c - q*d)*(r//d) + q*(r - r%d), q = c//d; None if no term splits."""
    out: int | SymExpr = e
    for m, c in e.terms:
        if len(m) != 1 or m[0].kind != "fdiv" or not isinstance(m[0].args[1], int) or c // m[0].args[1] == 0:
            continue
        r, d = m[0].args
        q = c // d
        term = SymExpr(((m, 1),))
        out = add(add(out, mul(term, -q * d)), mul(add(r, mul(mod(r, d), -1)), q))
    return None if out is e else out


def _atom_bounds(a: Atom, ranges: Mapping[str, Range], multiples: Mapping[str, int]) -> Range:
    if a.kind == "sym":
        try:
            return ranges[a.name]
        except KeyError:
            raise ShapeError(f"symbol {a.name!r} has no range") from None
    if a.kind in ("fdiv", "mod"):
        num, d = a.args
        dlo, dhi = bounds(d, ranges, multiples)
        if dlo <= 0:  # interval bounds are loose (4*cdiv(y, 4)//4 looks as if it could be 0): count, if few
            dlo, dhi = _enumerated(d, ranges, multiples) or (dlo, dhi)
        if dlo <= 0:
            raise ShapeError(f"divisor {to_infix(d)} may be {dlo}, not positive, within the symbols' ranges")
        lo, hi = bounds(num, ranges, multiples)
        if a.kind == "fdiv":  # floor(n/d) is monotone in n, and in d for a fixed sign of n: the corners hold it
            cands = (lo // dlo, lo // dhi, hi // dlo, hi // dhi)
            return min(cands), max(cands)
        if isinstance(d, int) and divisor(num, multiples) % d == 0:
            return (0, 0)
        if 0 <= lo and hi < dlo:
            return lo, hi
        return (0, min(dhi - 1, hi) if lo >= 0 else dhi - 1)
    (xlo, xhi), (ylo, yhi) = (bounds(x, ranges, multiples) for x in a.args)
    if a.kind == "min":
        return min(xlo, ylo), min(xhi, yhi)
    return max(xlo, ylo), max(xhi, yhi)


# At most this many bindings are evaluated to bound a divisor that interval arithmetic cannot prove positive.
MAX_ENUMERATED = 4096
_ENUMERATED: dict[tuple, Range | None] = {}


def _enumerated(e: SymExpr, ranges: Mapping[str, Range], multiples: Mapping[str, int]) -> Range | None:
    """The exact range of ``e`` over every binding of its symbols (each a multiple of its ``multiples``), when
    there are at most ``MAX_ENUMERATED`` of them and ``e`` evaluates at each; else None."""
    names = sorted(e.free_symbols())
    spans = []
    for n in names:
        if n not in ranges:
            return None
        lo, hi = ranges[n]
        m = multiples.get(n, 1)
        spans.append((n, -(-lo // m) * m, hi, m))
    key = (e, tuple(spans))
    if key in _ENUMERATED:
        return _ENUMERATED[key]
    count = 1
    for _, lo, hi, m in spans:
        count *= max(0, (hi - lo) // m + 1)
    out: Range | None = None
    if 0 < count <= MAX_ENUMERATED:
        values = []
        try:
            for combo in itertools.product(*(range(lo, hi + 1, m) for _, lo, hi, m in spans)):
                values.append(evaluate(e, dict(zip(names, combo))))
            out = (min(values), max(values))
        except ShapeError:
            out = None
    if len(_ENUMERATED) > 4096:
        _ENUMERATED.clear()
    _ENUMERATED[key] = out
    return out


# At most this many lower forms (one argument picked per min/max term) are tried per proof.
MAX_LOWER_FORMS = 64


def prove_nonneg(
    e: int | SymExpr,
    ranges: Mapping[str, Range],
    multiples: Mapping[str, int] | None = None,
) -> bool:
    """Whether ``e >= 0`` for every binding of its symbols within ranges; False when not proved (nor disproved).

    Interval bounds lose the link between a term and the same term inside a max: ``max(a, b) - a`` looks as
    if it could be negative. A sum is at least the same sum with a positive ``max(a, b)`` term written as
    ``a`` (or ``b``), and with a negative ``min(a, b)`` term written likewise, so the proof also bounds those
    lower forms, of ``e`` and of ``e`` with its floor-divisions written as remainders (an aligned size
    ``256*((x + 255)//256) - x`` is ``255 - (x + 255)%256``)."""
    if isinstance(e, int):
        return e >= 0
    m = multiples or {}
    if bounds(e, ranges, m)[0] >= 0:
        return True
    alt = _floordivs_as_mods(e)
    forms = [e] if alt is None else [e, alt]
    for form in forms:
        for low in _lower_forms(form):
            if (low if isinstance(low, int) else bounds(low, ranges, m)[0]) >= 0:
                return True
    scaled = _without_floordivs(e)
    return _monotone_nonneg(e if scaled is None else scaled, ranges, m, len(ranges))


def _lower_forms(e: int | SymExpr) -> list[int | SymExpr]:
    """Expressions at most ``e`` for every binding: each positive max term (and negative min term) replaced
    by one of the atom's arguments."""
    if isinstance(e, int):
        return []
    picks: list[tuple[int, list[int | SymExpr]]] = []
    rest: dict[Monomial, int] = {}
    for mono, c in e.terms:
        if len(mono) == 1 and (mono[0].kind, c > 0) in (("max", True), ("min", False)):
            picks.append((c, _flat_args(mono[0])))
        else:
            rest[mono] = c
    if not picks:
        return []
    base = _make(rest, e.const)
    out: list[int | SymExpr] = []
    for choice in _product([args for _, args in picks]):
        low = base
        for (c, _), arg in zip(picks, choice):
            low = add(low, mul(arg, c))
        out.append(low)
    return out


def _without_floordivs(e: SymExpr) -> int | SymExpr | None:
    """A polynomial at most ``L*e`` (L > 0) with no floor-division by an int: ``d*(r//d)`` lies in
    ``[r - d + 1, r]``, so each term ``c*(r//d)`` is replaced by ``c*(L/d)*(r - d + 1)`` for ``c > 0`` and by
    ``c*(L/d)*r`` for ``c < 0``. None when ``e`` has no such term."""
    divs = [m[0].args[1] for m, _ in e.terms if len(m) == 1 and m[0].kind == "fdiv" and isinstance(m[0].args[1], int)]
    if not divs:
        return None
    scale = math.lcm(*divs)
    out: int | SymExpr = e.const * scale
    for mono, c in e.terms:
        if len(mono) == 1 and mono[0].kind == "fdiv" and isinstance(mono[0].args[1], int):
            r, d = mono[0].args
            out = add(out, mul(add(r, 1 - d) if c > 0 else r, c * (scale // d)))
        else:
            out = add(out, SymExpr(((mono, c * scale),)))
    return out


def _monotone_nonneg(e: int | SymExpr, ranges: Mapping[str, Range], multiples: Mapping[str, int], depth: int) -> bool:
    """``e >= 0`` by monotonicity: where a symbol ``x`` occurs only as a plain factor of degree one,
    ``e = x*a + b``; if ``a >= 0`` is proved, ``e`` is least at ``x``'s minimum (at its maximum if ``a <= 0``),
    so ``e`` with ``x`` fixed there is proved instead (``3*b*s - 3*b`` over ``s >= 2``)."""
    if bounds(e, ranges, multiples)[0] >= 0:
        return True
    if isinstance(e, int) or depth <= 0:
        return False
    for x in sorted(e.free_symbols()):
        slope: dict[Monomial, int] = {}
        rest: dict[Monomial, int] = {}
        linear = True
        for mono, c in e.terms:
            plain = [a for a in mono if a.kind == "sym" and a.name == x]
            if any(a.kind != "sym" and x in _atom_symbols(a) for a in mono) or len(plain) > 1:
                linear = False
                break
            if plain:
                rest_mono = tuple(a for a in mono if a is not plain[0])
                slope[rest_mono] = slope.get(rest_mono, 0) + c
            else:
                rest[mono] = c
        if not linear or x not in ranges:
            continue
        a, b = _make({k: v for k, v in slope.items() if k}, slope.get((), 0)), _make(rest, e.const)
        lo, hi = ranges[x]
        if bounds(a, ranges, multiples)[0] >= 0:
            at = lo
        elif bounds(a, ranges, multiples)[1] <= 0:
            at = hi
        else:
            continue
        return _monotone_nonneg(add(b, mul(a, at)), ranges, multiples, depth - 1)
    return False


def _product(options: list[list[int | SymExpr]]) -> list[tuple[int | SymExpr, ...]]:
    combos: list[tuple[int | SymExpr, ...]] = [()]
    for opts in options:
        combos = [(*c, o) for c in combos for o in opts][:MAX_LOWER_FORMS]
    return combos


def _flat_args(a: Atom) -> list[int | SymExpr]:
    """``max(max(x, y), z)`` -> ``[x, y, z]``: each is at most the max (at least the min, for a min)."""
    out: list[int | SymExpr] = []
    for x in a.args:
        inner = _single_atom(x, a.kind)
        out.extend(_flat_args(inner) if inner is not None else [x])
    return out


def divisor(e: int | SymExpr, multiples: Mapping[str, int]) -> int:
    """A positive int known to divide e for every binding (0 divides nothing: e == 0 gives 0)."""
    if isinstance(e, int):
        return abs(e)
    g = abs(e.const)
    for m, c in e.terms:
        t = abs(c)
        for atom in m:
            t *= multiples.get(atom.name, 1) if atom.kind == "sym" else 1
        g = math.gcd(g, t)
    return g


# -- text forms ------------------------------------------------------------------


def to_sexpr(e: int | SymExpr) -> str:
    """Canonical prefix form, used for serialization: ``(+ 3 (* 2 batch) (// seq 4))``."""
    if isinstance(e, int):
        return str(e)
    parts = [_mono_sexpr(m, c) for m, c in e.terms]
    if e.const:
        parts.append(str(e.const))
    return parts[0] if len(parts) == 1 else "(+ " + " ".join(parts) + ")"


def _mono_sexpr(m: Monomial, c: int) -> str:
    factors = ([str(c)] if c != 1 else []) + [_atom_sexpr(a) for a in m]
    return factors[0] if len(factors) == 1 else "(* " + " ".join(factors) + ")"


def _atom_sexpr(a: Atom) -> str:
    if a.kind == "sym":
        return a.name
    op = {"fdiv": "//", "mod": "%"}.get(a.kind, a.kind)
    return f"({op} {to_sexpr(a.args[0])} {to_sexpr(a.args[1])})"


def _atom_symbols(a: Atom) -> set[str]:
    if a.kind == "sym":
        return {a.name}
    out: set[str] = set()
    for x in a.args:
        if isinstance(x, SymExpr):
            out |= x.free_symbols()
    return out


def to_infix(e: int | SymExpr) -> str:
    """Readable form for messages: ``2*batch + seq//4``."""
    if isinstance(e, int):
        return str(e)
    out = ""
    for i, (m, c) in enumerate(e.terms):
        wrap = len(m) > 1 or c not in (1, -1)
        body = "*".join(f"({_atom_infix(a)})" if wrap and a.kind in ("fdiv", "mod") else _atom_infix(a) for a in m)
        if c == 1:
            term = body
        elif c == -1:
            term = "-" + body
        else:
            term = f"{c}*{body}"
        out += term if i == 0 else (f" - {term[1:]}" if term.startswith("-") else f" + {term}")
    if e.const:
        out += f" - {-e.const}" if e.const < 0 else f" + {e.const}"
    return out


def _atom_infix(a: Atom) -> str:
    if a.kind == "sym":
        return a.name
    x, y = (to_infix(v) for v in a.args)
    if a.kind in ("fdiv", "mod"):
        op = "//" if a.kind == "fdiv" else "%"
        num, d = a.args
        simple = num.is_symbol() if isinstance(num, SymExpr) else num >= 0
        inner = x if simple else f"({x})"
        den = y if isinstance(d, int) or d.is_symbol() else f"({y})"
        return f"{inner}{op}{den}"
    return f"{a.kind}({x}, {y})"


_TOKEN = re.compile(r"\s*(\(|\)|-?[0-9]+|\$?[A-Za-z_][A-Za-z0-9_]*|//|%|\+|\*)")


def parse(text: str, index_vars: bool = False) -> int | SymExpr:
    """Inverse of ``to_sexpr``; raises ShapeError on anything malformed. Index variables (``$i``) belong to
    kernels, not to shapes: they parse only when ``index_vars`` is set."""
    if not isinstance(text, str):
        raise ShapeError(f"bad symbolic expression {text!r}: expected text")
    # An artifact repeats the same dims and grids many times; expressions are immutable, so a cache is safe.
    # Errors are not cached, so a malformed text raises every time.
    return _parse_cached(text, index_vars)


@functools.lru_cache(maxsize=8192)
def _parse_cached(text: str, index_vars: bool) -> int | SymExpr:
    tokens: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ShapeError(f"bad symbolic expression {text!r} at {pos}")
        tokens.append(m.group(1))
        pos = m.end()
    if not tokens or len(tokens) > 10_000:
        raise ShapeError(f"bad symbolic expression {text!r}")
    value, end = _parse_at(tokens, 0, 0, index_vars)
    if end != len(tokens):
        raise ShapeError(f"trailing tokens in symbolic expression {text!r}")
    return value


def _parse_at(tokens: list[str], i: int, depth: int, index_vars: bool) -> tuple[int | SymExpr, int]:
    if depth > 64 or i >= len(tokens):
        raise ShapeError("bad symbolic expression: unbalanced or too deep")
    tok = tokens[i]
    if tok == "(":
        if i + 1 >= len(tokens):
            raise ShapeError("bad symbolic expression: unbalanced")
        op = tokens[i + 1]
        args: list[int | SymExpr] = []
        j = i + 2
        while j < len(tokens) and tokens[j] != ")":
            v, j = _parse_at(tokens, j, depth + 1, index_vars)
            args.append(v)
        if j >= len(tokens) or not args:
            raise ShapeError("bad symbolic expression: unbalanced")
        return _apply(op, args), j + 1
    if tok.lstrip("-").isdigit():
        if len(tok) > 40:  # far past int64; also below Python's limit on int() of long strings
            raise ShapeError(f"bad symbolic expression: integer {tok[:20]}... is too long")
        return int(tok), i + 1
    if _NAME.match(tok) and tok not in ("min", "max"):
        return sym(tok), i + 1
    if index_vars and tok.startswith(INDEX_PREFIX):
        return index_var(tok[1:]), i + 1
    raise ShapeError(f"bad symbolic expression token {tok!r}")


def _apply(op: str, args: list[int | SymExpr]) -> int | SymExpr:
    if op == "+":
        out: int | SymExpr = 0
        for a in args:
            out = add(out, a)
        return out
    if op == "*":
        out = 1
        for a in args:
            out = mul(out, a)
        return out
    if len(args) != 2:
        raise ShapeError(f"bad symbolic expression: {op} takes 2 arguments")
    a, b = args
    if op in ("//", "%"):
        return floordiv(a, b) if op == "//" else mod(a, b)
    if op in ("min", "max"):
        return _minmax(op, a, b)
    raise ShapeError(f"bad symbolic expression operator {op!r}")


def is_sym(x: object) -> bool:
    return isinstance(x, SymExpr)
