"""``SymInt``: a dynamic dimension as Python sees it while tracing, and ``Size``, a shape tuple of them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aotc.errors import TraceError
from aotc.frontend.context import TraceShapeCtx, trace_error
from aotc.ir.symbolic import SymExpr, exact_div, floordiv, mod, mul, to_infix
from aotc.ir.types import ShapeDim


class SymInt:
    """An integer known only as an expression over the model's dynamic dims.

    Arithmetic builds new expressions. Comparisons and ``bool()`` answer with the dims'
    hints and record the answer as a guard (unless it holds for every allowed value).
    Turning it into a Python int would bake the hint into the graph, so that is an error.
    """

    __slots__ = ("_ctx", "expr")

    def __init__(self, expr: SymExpr, ctx: TraceShapeCtx) -> None:
        self.expr = expr
        self._ctx = ctx

    # -- arithmetic ------------------------------------------------------------------------------
    def _wrap(self, e: ShapeDim) -> int | SymInt:
        return e if isinstance(e, int) else SymInt(e, self._ctx)

    def _operand(self, other: Any) -> ShapeDim | None:
        """The integer behind other; None (NotImplemented) for types that handle us themselves."""
        if isinstance(other, float):
            raise trace_error(
                f"float arithmetic with dynamic dim {self} gives a value that depends on it; keep sizes integral"
            )
        return as_dim(other)

    def _arith(self, other: Any, fn: Any) -> Any:
        o = self._operand(other)
        return NotImplemented if o is None else self._wrap(fn(o))

    def __add__(self, other: Any) -> Any:
        return self._arith(other, lambda o: self.expr + o)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        return self._arith(other, lambda o: self.expr - o)

    def __rsub__(self, other: Any) -> Any:
        return self._arith(other, lambda o: o - self.expr)

    def __mul__(self, other: Any) -> Any:
        return self._arith(other, lambda o: mul(self.expr, o))

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> Any:
        return self._arith(other, lambda o: sym_floordiv(self.expr, o))

    def __rfloordiv__(self, other: Any) -> Any:
        return self._arith(other, lambda o: sym_floordiv(o, self.expr))

    def __mod__(self, other: Any) -> Any:
        return self._arith(other, lambda o: sym_mod(self.expr, o))

    def __rmod__(self, other: Any) -> Any:
        return self._arith(other, lambda o: sym_mod(o, self.expr))

    def __neg__(self) -> Any:
        return self._wrap(-self.expr)

    def __pos__(self) -> SymInt:
        return self

    def __truediv__(self, other: Any) -> Any:
        raise trace_error(f"true division of dynamic dim {self} gives a float that depends on it; use // instead")

    __rtruediv__ = __truediv__

    # -- decisions ------------------------------------------------------------------------------
    def _cmp(self, other: Any, rel: str) -> Any:
        if isinstance(other, float):
            return self._cmp_float(other, rel)
        o = as_dim(other)
        if o is None:
            return NotImplemented
        return self._ctx.decide(self.expr, rel, o)

    def _cmp_float(self, v: float, rel: str) -> bool:
        """Against a float, an integer compares like against the nearest integer on the right side."""
        if math.isnan(v):
            return rel == "!="
        if math.isinf(v):
            return {"==": False, "!=": True, "<": v > 0, "<=": v > 0, ">": v < 0, ">=": v < 0}[rel]
        if v.is_integer():
            return self._cmp(int(v), rel)
        if rel in ("==", "!="):
            return rel == "!="
        bound = math.ceil(v) if rel in ("<", ">=") else math.floor(v)
        return self._cmp(bound, rel)

    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        return self._cmp(other, "==")

    def __ne__(self, other: object) -> Any:  # type: ignore[override]
        return self._cmp(other, "!=")

    def __lt__(self, other: Any) -> Any:
        return self._cmp(other, "<")

    def __le__(self, other: Any) -> Any:
        return self._cmp(other, "<=")

    def __gt__(self, other: Any) -> Any:
        return self._cmp(other, ">")

    def __ge__(self, other: Any) -> Any:
        return self._cmp(other, ">=")

    def __bool__(self) -> bool:
        return self._ctx.decide(self.expr, "!=", 0)

    def __hash__(self) -> int:
        return hash(self.expr)

    # -- specialization is an error -----------------------------------------------------------
    def _specialize(self, what: str) -> TraceError:
        names = ", ".join(repr(n) for n in sorted(self.expr.free_symbols()))
        expr = "" if self.expr.is_symbol() else f" ({self})"
        return trace_error(
            f"converting dynamic dim {names}{expr} to a Python {what} would specialize it to its trace hint; "
            "keep it symbolic (use it in tensor ops, shapes and slices) or make the dim static"
        )

    def __index__(self) -> int:
        raise self._specialize("int")

    def __int__(self) -> int:
        raise self._specialize("int")

    def __float__(self) -> float:
        raise self._specialize("float")

    def __str__(self) -> str:
        return to_infix(self.expr)

    def __repr__(self) -> str:
        return f"SymInt({to_infix(self.expr)})"


def as_dim(x: Any) -> ShapeDim | None:
    """The int or SymExpr behind x, or None when x is not an integer."""
    if isinstance(x, SymInt):
        return x.expr
    if isinstance(x, SymExpr):  # shapes read off graph values inside aotc
        return x
    if isinstance(x, (bool, np.bool_, np.integer)):
        return int(x)
    if isinstance(x, int):
        return x
    return None


def sym_floordiv(a: ShapeDim, b: ShapeDim) -> ShapeDim:
    if isinstance(b, int):
        if b <= 0:
            raise trace_error(f"dynamic dim arithmetic: // by {b} is not supported (divisor must be > 0)")
        return floordiv(a, b)
    q = exact_div(a, b)
    if q is None:
        raise trace_error(
            f"cannot divide {to_infix(a)} by the dynamic {to_infix(b)}: only exact divisions by dims are supported"
        )
    return q


def sym_mod(a: ShapeDim, b: ShapeDim) -> ShapeDim:
    if isinstance(b, int):
        if b <= 0:
            raise trace_error(f"dynamic dim arithmetic: % by {b} is not supported (divisor must be > 0)")
        return mod(a, b)
    if exact_div(a, b) is not None:
        return 0
    raise trace_error(f"cannot take {to_infix(a)} % the dynamic {to_infix(b)}")


class Size(tuple):
    """A tensor's shape: a tuple of ints (static dims) and SymInts (dynamic dims)."""

    __slots__ = ()

    def numel(self) -> int | SymInt:
        n: Any = 1
        for d in self:
            n = n * d
        return n

    def __repr__(self) -> str:
        return "aotc.Size([" + ", ".join(str(d) for d in self) + "])"
