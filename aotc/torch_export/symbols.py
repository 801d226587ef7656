"""torch's symbolic sizes as aotc expressions: sympy expressions over torch symbols, and the guard code torch
records (``L['x'].size()[0] % 4 == 0``) as aotc facts ``(lhs, rel, rhs)``.

Anything outside integer arithmetic aotc's expressions hold (+, -, *, //, %, min, max and comparisons) raises
``Untranslatable``: the importer refuses such a guard instead of dropping it.
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from aotc.ir.graph import Guard, Symbol
from aotc.ir.symbolic import SymExpr, floordiv, mod, smax, smin
from aotc.ir.types import ShapeDim

Fact = tuple[ShapeDim, str, ShapeDim]
# The largest denominator of a float in guard code taken as an exact fraction (a scale factor: 0.5, 1.5, 0.25).
MAX_DENOMINATOR = 64
# A single-symbol guard is folded into the symbol's range or multiple_of when its range has at most this many values.
MAX_REFINE_VALUES = 1 << 15


class Untranslatable(ValueError):
    """A torch expression or guard that aotc's symbolic integers cannot express."""


def to_dim(expr: Any, sym_of: Callable[[str], ShapeDim]) -> ShapeDim:
    """A sympy integer expression (``s0``, ``2*s0 + 1``, ``FloorDiv(s0, 4)``) as an aotc int or SymExpr;
    ``sym_of`` gives the aotc expression for a torch symbol name."""
    import sympy

    if isinstance(expr, int):
        return expr
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        return sym_of(expr.name)
    args = [to_dim(a, sym_of) for a in expr.args] if isinstance(expr, sympy.Basic) else None
    if args is None:
        raise Untranslatable(f"{expr!r} is not an integer expression")
    kind = type(expr).__name__
    if kind == "Add":
        return _fold(args, lambda a, b: a + b)
    if kind == "Mul":
        return _fold(args, lambda a, b: a * b)
    if kind in ("FloorDiv", "CleanDiv") and len(args) == 2:
        return floordiv(args[0], args[1])
    if kind in ("Mod", "PythonMod") and len(args) == 2:
        return mod(args[0], args[1])
    if kind == "Max":
        return _fold(args, smax)
    if kind == "Min":
        return _fold(args, smin)
    raise Untranslatable(f"{kind} in {expr}")


def _fold(args: Sequence[ShapeDim], fn: Callable[[Any, Any], ShapeDim]) -> ShapeDim:
    out = args[0]
    for a in args[1:]:
        out = fn(out, a) if isinstance(out, SymExpr) or isinstance(a, SymExpr) else _int_fn(fn, out, a)
    return out


def _int_fn(fn: Callable[[Any, Any], ShapeDim], a: int, b: int) -> int:
    if fn is smax:
        return max(a, b)
    if fn is smin:
        return min(a, b)
    return int(fn(a, b))


_REL = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


Choose = Callable[[list[list[Fact]]], list[Fact]]


def guard_facts(code: str, size_of: Callable[[str, int], ShapeDim], choose: Choose) -> list[Fact]:
    """The facts in one line of torch guard code; ``size_of(source, axis)`` gives the aotc dim of
    ``source.size()[axis]`` (``source`` as written: ``L['x']``). A disjunction (``a == 1 or b % 4 == 0``) is
    handed to ``choose``, which returns the facts to require for it: nothing when one alternative is proven, else
    the alternative that holds at the example sizes, a guard stronger than torch's, never a weaker one."""
    try:
        tree = ast.parse(code.strip(), mode="eval").body
    except SyntaxError as e:
        raise Untranslatable(f"cannot parse {code!r}: {e}") from None
    return _facts(tree, size_of, choose)


def _facts(node: ast.expr, size_of: Callable[[str, int], ShapeDim], choose: Choose) -> list[Fact]:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return [f for v in node.values for f in _facts(v, size_of, choose)]
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return choose([_facts(v, size_of, choose) for v in node.values])
    if isinstance(node, ast.Compare):
        out = []
        left = _int_expr(node.left, size_of)
        for op, right_node in zip(node.ops, node.comparators):
            rel = _REL.get(type(op))
            if rel is None:
                raise Untranslatable(f"comparison {type(op).__name__}")
            right = _int_expr(right_node, size_of)
            out.append((left, rel, right))
            left = right
        return out
    raise Untranslatable(f"{ast.unparse(node)} is not a comparison of sizes")


def _int_expr(node: ast.expr, size_of: Callable[[str, int], ShapeDim]) -> ShapeDim:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_int_expr(node.operand, size_of)  # type: ignore[operator]
    if isinstance(node, ast.BinOp):
        a, b = _int_expr(node.left, size_of), _int_expr(node.right, size_of)
        if isinstance(node.op, ast.Add):
            return a + b  # type: ignore[operator]
        if isinstance(node.op, ast.Sub):
            return a - b  # type: ignore[operator]
        if isinstance(node.op, ast.Mult):
            return a * b  # type: ignore[operator]
        if isinstance(node.op, ast.FloorDiv):
            return floordiv(a, b) if isinstance(a, SymExpr) or isinstance(b, SymExpr) else a // b
        if isinstance(node.op, ast.Mod):
            return mod(a, b) if isinstance(a, SymExpr) or isinstance(b, SymExpr) else a % b
        raise Untranslatable(f"operator {type(node.op).__name__}")
    if (
        isinstance(node, ast.Call)
        and ast.unparse(node.func) in ("math.trunc", "math.floor", "int")
        and len(node.args) == 1
    ):
        return _floor_of_rational(node, size_of)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
        args = [_int_expr(a, size_of) for a in node.args]
        if not args or node.keywords:
            raise Untranslatable(ast.unparse(node))
        return _fold(args, smax if node.func.id == "max" else smin)
    # L['x'].size()[0]
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "size"
        and not node.value.args
    ):
        return size_of(ast.unparse(node.value.func.value), int(node.slice.value))
    raise Untranslatable(ast.unparse(node))


def _floor_of_rational(node: ast.Call, size_of: Callable[[str, int], ShapeDim]) -> ShapeDim:
    """``math.trunc(0.5 * torch.sym_float(L['x'].size()[2]))`` (an output size for a scale factor): a size times an
    exact fraction, rounded down; trunc is floor there because sizes are never negative."""
    num, den = _rational(node.args[0], size_of)
    negative = num < 0 if isinstance(num, int) else num.const < 0 or any(c < 0 for _, c in num.terms)
    if negative and ast.unparse(node.func) != "math.floor":
        raise Untranslatable(f"{ast.unparse(node)} of a value that may be negative")
    return floordiv(num, den) if isinstance(num, SymExpr) else num // den


def _rational(node: ast.expr, size_of: Callable[[str, int], ShapeDim]) -> tuple[ShapeDim, int]:
    """A float expression of sizes as (integer expression, positive denominator): constants exactly (0.5 is 1/2),
    ``torch.sym_float(size)``, products and quotients by constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        f = Fraction(node.value)
        if f.denominator > MAX_DENOMINATOR:
            raise Untranslatable(f"{node.value} is not a fraction with a small denominator")
        return f.numerator, f.denominator
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.sym_float" and len(node.args) == 1:
        return _int_expr(node.args[0], size_of), 1
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        (a, da), (b, db) = _rational(node.left, size_of), _rational(node.right, size_of)
        if isinstance(node.op, ast.Mult):
            return a * b, da * db  # type: ignore[operator]
        if not isinstance(b, int) or b <= 0:
            raise Untranslatable(f"{ast.unparse(node)} divides by a size")
        return a * db, da * b  # type: ignore[operator]
    return _int_expr(node, size_of), 1


def single_symbol_refinements(symbols: Sequence[Symbol], guards: Sequence[Guard]) -> tuple[list[Symbol], list[Guard]]:
    """Guards over one symbol become its range and ``multiple_of`` where that says exactly the same thing:
    ``batch % 4 == 0`` and ``8*batch == 32*(batch // 4)`` become ``multiple_of=4``, ``seq <= 64`` a tighter max.
    The runtime then refuses a bad value with its usual range or multiple message. A guard that is more than a bound
    or a divisor of its symbol stays too: later stages prove shapes from it (``(h + h%2)//2 == (h + h%2 + 1)//2``
    holds at every size, but only the guard tells the verifier so)."""
    by_name = {s.name: s for s in symbols}
    kept: list[Guard] = []
    for g in guards:
        names = free_symbols_of(g.lhs) | free_symbols_of(g.rhs)
        s = by_name.get(next(iter(names))) if len(names) == 1 else None
        if s is None or s.max - s.min + 1 > MAX_REFINE_VALUES:
            kept.append(g)
            continue
        ok = [v for v in range(s.min, s.max + 1) if g.holds({s.name: v})]
        refined = _as_range(s, ok)
        if refined is not None:
            by_name[s.name] = refined
        if refined is None or not _plain(g):
            kept.append(g)
    return [by_name[s.name] for s in symbols], kept


def _plain(g: Guard) -> bool:
    """``s <= 16``, ``s != 1`` or ``s % 4 == 0``: what a range and a divisor say in full."""
    lhs, rhs = (g.lhs, g.rhs) if isinstance(g.rhs, int) else (g.rhs, g.lhs)
    if not isinstance(rhs, int) or not isinstance(lhs, SymExpr):
        return False
    if lhs.is_symbol():
        return True
    if g.rel != "==" or rhs != 0 or lhs.const or len(lhs.terms) != 1:
        return False
    ((mono, _),) = lhs.terms
    return len(mono) == 1 and mono[0].kind == "mod" and isinstance(mono[0].args[1], int)


def _as_range(s: Symbol, ok: list[int]) -> Symbol | None:
    """``s`` with the range and divisor whose values are exactly ``ok`` (among s's own values), if there is one."""
    allowed = [v for v in ok if v % s.multiple_of == 0]
    if not allowed:
        return None  # no value passes: keep the guard, whose message says which
    lo, hi = allowed[0], allowed[-1]
    step = 0
    for a, b in itertools.pairwise(allowed):
        step = math.gcd(step, b - a)
    step = step or s.multiple_of
    if step % s.multiple_of or lo % step:
        return None
    if allowed != list(range(lo, hi + 1, step)):
        return None
    every_multiple = [v for v in range(s.min, s.max + 1) if v % step == 0 and lo <= v <= hi]
    if every_multiple != allowed:
        return None
    return Symbol(s.name, lo, hi, step)


def finite_int(v: Any) -> int | None:
    """A range bound as an int; None for torch's and sympy's infinities."""
    if isinstance(v, int):
        return v
    return int(v) if getattr(v, "is_Integer", False) else None


def free_symbols_of(e: ShapeDim) -> frozenset[str]:
    return e.free_symbols() if isinstance(e, SymExpr) else frozenset()
