"""Size arithmetic (``sym_size``, ``operator.add/mul/floordiv`` over torch's SymInts), tuple outputs and torch's
runtime asserts. Sizes become aotc ints or ``SymInt``s; an asserted comparison becomes a guard (or nothing, when the
ranges prove it)."""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass
from typing import Any

from aotc.errors import AotcError, TraceError
from aotc.frontend.context import trace_error
from aotc.frontend.symint import SymInt, as_dim, sym_floordiv, sym_mod
from aotc.frontend.tensor import Tensor
from aotc.ir.symbolic import smax, smin
from aotc.ir.symbolic_values import evaluate

Cx = Any


@dataclass(frozen=True)
class Comparison:
    """A comparison of sizes, kept undecided until an assert turns it into a guard."""

    lhs: Any
    rel: str
    rhs: Any


def sym_size(cx: Cx, x: Tensor, dim: int) -> Any:
    return x.size(dim)


def sym_numel(cx: Cx, x: Tensor) -> Any:
    return x.numel()


def _int_args(what: str, *xs: Any) -> list[Any]:
    out = []
    for x in xs:
        d = as_dim(x)
        if d is None:
            raise trace_error(f"{what} on a non-integer {x!r} ({type(x).__name__}) is not supported")
        out.append(d)
    return out


def _wrap(cx: Cx, d: Any) -> Any:
    return d if isinstance(d, int) else SymInt(d, cx.tracer.ctx)


def arith(name: str) -> Any:
    fns = {
        "add": operator.add,
        "sub": operator.sub,
        "mul": operator.mul,
        "floordiv": sym_floordiv,
        "mod": sym_mod,
        "sym_max": smax,
        "sym_min": smin,
    }
    fn = fns[name]

    def translate(cx: Cx, a: Any, b: Any) -> Any:
        x, y = _int_args(name, a, b)
        if isinstance(x, int) and isinstance(y, int):
            ints = {"floordiv": operator.floordiv, "mod": operator.mod, "sym_max": max, "sym_min": min}
            return ints.get(name, fn)(x, y)
        if name in ("sym_min", "sym_max"):  # one side the lesser over the dims' ranges: min(2048, seq) is seq
            ctx = cx.tracer.ctx
            if ctx.proves(x, "<=", y):
                return _wrap(cx, x if name == "sym_min" else y)
            if ctx.proves(y, "<=", x):
                return _wrap(cx, y if name == "sym_min" else x)
        try:
            return _wrap(cx, fn(x, y))
        except TraceError:
            # a division aotc can't prove exact (a padded width // its window count): the same value at every
            # size the ranges allow, else torch's own expression for the result over the input dims
            known = _constant_over_ranges(cx, name, x, y)
            if known is None:
                known = cx.torch_size()
            if known is None:
                raise
            return known

    return translate


# Sizes enumerated at most to decide that a quotient is one constant over the ranges of its dims.
MAX_ENUMERATED = 1 << 12


def _constant_over_ranges(cx: Cx, name: str, x: Any, y: Any) -> int | None:
    """``x // y`` (or ``%``) when it is one value for every binding of its dims within their ranges."""
    ctx = cx.tracer.ctx
    names = sorted(set().union(*(d.free_symbols() for d in (x, y) if not isinstance(d, int))))
    axes = []
    for n in names:
        lo, hi = ctx.ranges[n]
        step = ctx.multiples.get(n, 1)
        axes.append(range(-(-lo // step) * step, hi + 1, step))
    if math.prod(len(a) for a in axes) > MAX_ENUMERATED:
        return None
    seen: set[int] = set()
    for values in itertools.product(*axes):
        env = dict(zip(names, values))
        try:
            a, b = evaluate(x, env), evaluate(y, env)
        except (ZeroDivisionError, AotcError):
            return None
        if b <= 0:
            return None
        seen.add(a // b if name == "floordiv" else a % b)
        if len(seen) > 1:
            return None
    return seen.pop() if seen else None


def neg(cx: Cx, a: Any) -> Any:
    (x,) = _int_args("neg", a)
    return _wrap(cx, -x)


def compare(rel: str) -> Any:
    def translate(cx: Cx, a: Any, b: Any) -> Any:
        x, y = _int_args(rel, a, b)
        if isinstance(x, int) and isinstance(y, int):
            return {"==": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[rel]
        return Comparison(x, rel, y)

    return translate


def assert_scalar(cx: Cx, cond: Any, msg: Any = None) -> None:
    """torch.export's runtime assert: proven by the ranges, or a guard the runtime checks on every call."""
    if isinstance(cond, bool):
        if not cond:
            raise trace_error(f"torch asserts something false at every size: {msg}")
        return
    if not isinstance(cond, Comparison):
        raise trace_error(f"a runtime assert on {type(cond).__name__} can't be checked by aotc: {msg}")
    cx.tracer.require(cond.lhs, cond.rel, cond.rhs, f"torch.export runtime assert {msg or ''}".strip())


def getitem(cx: Cx, seq: Any, i: int) -> Any:
    if isinstance(seq, (tuple, list)):
        return seq[i]
    raise trace_error(f"getitem on {type(seq).__name__} is not supported")


def no_op(cx: Cx, *args: Any) -> None:
    return None
