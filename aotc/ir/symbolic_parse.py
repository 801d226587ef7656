"""Symbolic expressions read back from their canonical prefix text (``to_sexpr``), as an artifact stores them."""

from __future__ import annotations

import functools
import re

from aotc.errors import ShapeError
from aotc.ir.index import INDEX_PREFIX, index_var
from aotc.ir.symbolic import SYMBOL_NAME, SymExpr, add, floordiv, mod, mul, smax, smin, sym

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
    if SYMBOL_NAME.match(tok) and tok not in ("min", "max"):
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
        return smin(a, b) if op == "min" else smax(a, b)
    raise ShapeError(f"bad symbolic expression operator {op!r}")
