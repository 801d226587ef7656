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

This module holds the expression type, its arithmetic and its text forms;
``symbolic_values`` what an expression evaluates to and what can be proved of
it over the symbols' ranges, ``symbolic_parse`` the reader of ``to_sexpr``.
"""

from __future__ import annotations

import math
import re
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
                out |= atom_symbols(atom)
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

SYMBOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Limits that keep hostile input (e.g. a corrupted artifact) from expanding a product of sums
# into millions of terms; real shape expressions stay far below them.
MAX_TERMS = 4096
MAX_DEGREE = 64


def sym(name: str) -> SymExpr:
    if not isinstance(name, str) or not SYMBOL_NAME.match(name) or name in ("min", "max"):
        raise ShapeError(f"invalid symbol name {name!r}: use letters, digits and _")
    return SymExpr((((Atom("sym", name),), 1),))


def _as_poly(x: int | SymExpr) -> SymExpr:
    if isinstance(x, SymExpr):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise ShapeError(f"expected an int or symbolic int, got {type(x).__name__}")
    return SymExpr((), x)


def from_terms(coeffs: dict[Monomial, int], const: int) -> int | SymExpr:
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
    return from_terms(coeffs, pa.const + pb.const)


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
    return from_terms(coeffs, const)


def _degree(terms: list[tuple[Monomial, int]]) -> int:
    return max((len(m) for m, _ in terms), default=0)


def _split(e: SymExpr, d: int) -> tuple[int | SymExpr, int | SymExpr]:
    """e == d*q + r with every coefficient of r in [0, d)."""
    q: dict[Monomial, int] = {}
    r: dict[Monomial, int] = {}
    for m, c in e.terms:
        q[m], r[m] = divmod(c, d)
    qc, rc = divmod(e.const, d)
    return from_terms(q, qc), from_terms(r, rc)


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
    return from_terms({m: c // g for m, c in e.terms}, e.const // g)


def _operand(a: object) -> int | SymExpr:
    if isinstance(a, SymExpr):
        return a
    return _as_poly(a).const  # raises ShapeError unless a is a plain int


def single_atom(r: int | SymExpr, kind: str) -> Atom | None:
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
    inner = single_atom(r, "fdiv")
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
    inner = single_atom(r, "mod")
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
        rest = remove_atoms(m, dmono)
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
    return from_terms(q, qconst), from_terms(r, a.const)


def remove_atoms(m: Monomial, sub: Monomial) -> Monomial | None:
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
    inner = single_atom(a, "fdiv")
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
    inner = single_atom(a, "mod")
    if inner is not None and exact_div(inner.args[1], d) is not None:  # d divides b: (x % b) % d == x % d
        return mod(inner.args[0], d)
    return SymExpr((((Atom("mod", args=(a, d)),), 1),))


def exact_div(a: int | SymExpr, b: int | SymExpr) -> int | SymExpr | None:
    """a / b when it is exact for every binding: b an int dividing every coefficient of a, a constant multiple
    (``(544 + 32*seq)*batch / ((272 + 16*seq)*batch)`` is 2), or a monomial dividing every term of a; else None."""
    if isinstance(a, SymExpr) and isinstance(b, SymExpr) and b.terms:
        ca, bc = dict(a.terms).get(b.terms[0][0]), b.terms[0][1]
        if ca is not None and ca % bc == 0 and add(a, mul(b, -(ca // bc))) == 0:
            return ca // bc
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


def atom_symbols(a: Atom) -> set[str]:
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


def is_sym(x: object) -> bool:
    return isinstance(x, SymExpr)
