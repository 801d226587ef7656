"""Divisibility by congruence: whether an expression is a multiple of ``d`` for every binding, seen through its
residues mod ``d`` where term-by-term division fails.

A sequence padded up to a multiple of 64 traces as ``seq + (63*(seq % 64)) % 64`` (its pad is ``(-seq) mod
64``): no term divides by 64, but mod 64 the sum is ``seq + 63*seq = 64*seq``, which is 0. Hybrid-attention
models (Qwen3-Next's linear attention, Mamba-2 mixers) reshape such a padded length into chunks with a -1.
"""

from __future__ import annotations

import math

from aotc.ir.symbolic import SymExpr, exact_div, floordiv, to_sexpr

__all__ = ["divide_by_congruence", "is_multiple_of"]


def _residues(e: int | SymExpr, d: int) -> tuple[dict[str, int], int]:
    """``e mod d`` as a linear form over opaque factors (by canonical text) plus a constant, all mod ``d``. Sound
    for every integer binding: ``x % m`` is congruent to ``x`` mod ``d`` whenever ``d`` divides ``m`` (floor mod)."""
    if isinstance(e, int):
        return {}, e % d
    form: dict[str, int] = {}
    const = e.const % d
    for mono, c in e.terms:
        if c % d == 0:
            continue
        (atom,) = mono if len(mono) == 1 else (None,)
        if atom is not None and atom.kind == "mod" and isinstance(atom.args[1], int) and atom.args[1] % d == 0:
            inner, k = _residues(atom.args[0], d)
            const = (const + c * k) % d
            for key, v in inner.items():
                form[key] = (form.get(key, 0) + c * v) % d
            continue
        key = to_sexpr(SymExpr(((mono, 1),)))
        form[key] = (form.get(key, 0) + c) % d
    return form, const


def is_multiple_of(e: int | SymExpr, d: int) -> bool:
    """True when ``e`` is a multiple of ``d`` (> 0) for every binding of its symbols (False: not shown)."""
    form, const = _residues(e, d)
    return const == 0 and not any(form.values())


def divide_by_congruence(a: int | SymExpr, b: int | SymExpr) -> int | SymExpr | None:
    """``a / b`` for a monomial ``b = c * M`` that divides ``a`` exactly though not term by term: every term of
    ``a`` holds the factors ``M`` and what is left is a multiple of ``c`` by congruence. None otherwise."""
    if isinstance(b, int):
        c, rest = b, a
    elif b.const or len(b.terms) != 1:
        return None
    else:
        mono, c = b.terms[0]
        rest = exact_div(a, SymExpr(((mono, 1),)))  # b's factors out of every term (None: some term lacks one)
        if rest is None:
            return None
    if c <= 0:
        return None
    g = math.gcd(c, rest) if isinstance(rest, int) else math.gcd(c, rest.const, *(k for _, k in rest.terms))
    if g > 1:  # 8192*pad / 524288 is pad / 64: residues mod the reduced divisor
        rest, c = exact_div(rest, g), c // g
        assert rest is not None  # g divides every coefficient
    if not is_multiple_of(rest, c):
        return None
    q = exact_div(rest, c)
    return q if q is not None else floordiv(rest, c)  # exact, so the floor is the quotient
