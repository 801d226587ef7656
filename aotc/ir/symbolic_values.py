"""The values a symbolic expression takes: at one binding (``evaluate``, and ``substitute`` for a binding to
expressions), over the symbols' int ranges (``bounds``), and what holds for every binding in range
(``prove_nonneg``, ``divisor``).

Bounds come from interval arithmetic over the normalized terms, tightened where a floor-division written as a
remainder bounds better; a divisor interval arithmetic cannot prove positive is bounded by counting, when the
bindings are few.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

from aotc.errors import ShapeError
from aotc.ir.symbolic import (
    Atom,
    Monomial,
    SymExpr,
    add,
    atom_symbols,
    floordiv,
    from_terms,
    mod,
    mul,
    remove_atoms,
    single_atom,
    smax,
    smin,
    to_infix,
)


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
        rest = remove_atoms(mono, dmono)
        if rest is None or c % dc:
            continue
        q: int | SymExpr = c // dc
        for atom in rest:
            q = mul(q, SymExpr((((atom,), 1),)))
        r = add(a, mul(mul(d, q), -1))
        if isinstance(r, int):
            return q, r
    return None


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
    for alt in (_floordivs_as_mods(e), _mods_joined(e)):
        if alt is not None:
            alo, ahi = (alt, alt) if isinstance(alt, int) else _interval(alt, ranges, multiples or {})
            lo, hi = max(lo, alo), min(hi, ahi)
    return lo, hi


def _mods_joined(e: SymExpr) -> int | SymExpr | None:
    """e with each numerator of a division by an int d that holds both ``c*x`` and ``x%d`` written with
    ``x = d*(x//d) + x%d``, so the remainders meet and the division resolves: a length padded to 512,
    ``(511*(x%512) + x)//512``, is ``x%512 + x//512``. None when no numerator has such a pair."""
    if not any(_joinable(a) is not None for mono, _ in e.terms for a in mono):
        return None
    out: int | SymExpr = e.const
    for mono, c in e.terms:
        term: int | SymExpr = c
        for atom in mono:
            joined = _joinable(atom)
            term = mul(term, SymExpr((((atom,), 1),)) if joined is None else joined)
        out = add(out, term)
    return out


def _joinable(a: Atom) -> int | SymExpr | None:
    """The division atom ``a`` with its numerator's plain symbols split by their own remainder by its int
    divisor (see _mods_joined), or None when it has none."""
    if a.kind not in ("fdiv", "mod") or not isinstance(a.args[1], int) or not isinstance(a.args[0], SymExpr):
        return None
    num, d = a.args
    coeffs = dict(num.terms)
    changed: int | SymExpr = num
    for mono, _ in num.terms:
        if len(mono) != 1 or mono[0].kind != "mod" or mono[0].args[1] != d:
            continue
        x = mono[0].args[0]
        if not (isinstance(x, SymExpr) and x.is_symbol()):
            continue
        k = coeffs.get(((x.terms[0][0][0]),), 0)
        if k:  # k*x = k*d*(x//d) + k*(x%d)
            changed = add(changed, mul(add(add(mul(floordiv(x, d), d), mod(x, d)), mul(x, -1)), k))
    if changed is num:
        return None
    return floordiv(changed, d) if a.kind == "fdiv" else mod(changed, d)


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
    base = from_terms(rest, e.const)
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
    rest_of = _without_common_symbol(e, ranges)
    if rest_of is not None:  # e = x*q with x >= 0: q >= 0 is enough (2*s*s - s is s*(2*s - 1))
        return _monotone_nonneg(rest_of, ranges, multiples, depth - 1)
    for x in sorted(e.free_symbols()):
        slope: dict[Monomial, int] = {}
        rest: dict[Monomial, int] = {}
        linear = True
        for mono, c in e.terms:
            plain = [a for a in mono if a.kind == "sym" and a.name == x]
            if any(a.kind != "sym" and x in atom_symbols(a) for a in mono) or len(plain) > 1:
                linear = False
                break
            if plain:
                rest_mono = tuple(a for a in mono if a is not plain[0])
                slope[rest_mono] = slope.get(rest_mono, 0) + c
            else:
                rest[mono] = c
        if not linear or x not in ranges:
            continue
        a, b = from_terms({k: v for k, v in slope.items() if k}, slope.get((), 0)), from_terms(rest, e.const)
        lo, hi = ranges[x]
        if bounds(a, ranges, multiples)[0] >= 0:
            at = lo
        elif bounds(a, ranges, multiples)[1] <= 0:
            at = hi
        else:
            continue
        return _monotone_nonneg(add(b, mul(a, at)), ranges, multiples, depth - 1)
    return False


def _without_common_symbol(e: SymExpr, ranges: Mapping[str, Range]) -> int | SymExpr | None:
    """``e / x`` for a plain symbol ``x >= 0`` that is a factor of every term of ``e`` (no constant); else None."""
    if e.const:
        return None
    for atom in e.terms[0][0]:
        if atom.kind != "sym" or ranges.get(atom.name, (-1, 0))[0] < 0:
            continue
        parts = [(remove_atoms(mono, (atom,)), c) for mono, c in e.terms]
        if all(m is not None for m, _ in parts):
            return from_terms(dict(parts), 0)
    return None


def _product(options: list[list[int | SymExpr]]) -> list[tuple[int | SymExpr, ...]]:
    combos: list[tuple[int | SymExpr, ...]] = [()]
    for opts in options:
        combos = [(*c, o) for c in combos for o in opts][:MAX_LOWER_FORMS]
    return combos


def _flat_args(a: Atom) -> list[int | SymExpr]:
    """``max(max(x, y), z)`` -> ``[x, y, z]``: each is at most the max (at least the min, for a min)."""
    out: list[int | SymExpr] = []
    for x in a.args:
        inner = single_atom(x, a.kind)
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
