"""``aotc.arange`` (torch.arange): an iota scaled by the step and shifted by the start, its length a dim
expression when the start or end is a dynamic dim."""

from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from aotc.frontend.context import active_tracer, trace_error
from aotc.frontend.elementwise import wrap
from aotc.frontend.symint import SymInt, as_dim
from aotc.frontend.tensor_base import TensorBase
from aotc.ir.dtypes import DType, dtype_of
from aotc.ir.ops import Op
from aotc.ir.symbolic import floordiv, smax
from aotc.ir.types import ShapeDim


def _integral_float(v: Any) -> int | None:
    """A float with an integral value as that int (torch's float arange over such bounds is exact), else None."""
    if isinstance(v, (builtins.float, np.floating)) and math.isfinite(v) and builtins.float(v).is_integer():
        return builtins.int(v)
    return None


def _dynamic_bounds(start: Any, end: Any, step: Any) -> tuple[list[ShapeDim], bool]:
    """start, end and step as ints and dim expressions, and whether one was given as a float: a float step over
    dynamic dims (``torch.arange(klen, -qlen, -1.0)``) is the int arange, in the float dtype torch gives it."""
    vals = (start, end, step)
    got: list[ShapeDim] = []
    for v in vals:
        d = as_dim(v)
        d = _integral_float(v) if d is None else d
        if d is None:
            shown = ", ".join(f"{n}={v!r}" for n, v in zip(("start", "end", "step"), vals))
            raise trace_error(
                f"arange with a dynamic dim needs int start, end and step (or floats with integral values), got {shown}"
            )
        got.append(d)
    return got, builtins.any(as_dim(v) is None for v in vals)


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None) -> TensorBase:
    """torch.arange; ``end`` (and ``start``) may be dynamic dims when the others are ints or integral floats."""
    if end is None:
        start, end = 0, start
    tr = active_tracer("aotc.arange")
    ints = [as_dim(v) for v in (start, end, step)]
    floats = False
    if builtins.any(isinstance(v, SymInt) for v in (start, end, step)):
        ints, floats = _dynamic_bounds(start, end, step)
    if builtins.all(i is not None for i in ints):
        a, b, s = ints
        if not isinstance(s, builtins.int) or s == 0:
            raise trace_error(f"arange step must be a non-zero int, got {step!r}")
        n: ShapeDim = floordiv(b - a + s - 1, s) if s > 0 else floordiv(a - b - s - 1, -s)
        if not isinstance(n, builtins.int) and not tr.ctx.proves(n, ">=", 0):
            n = smax(n, 0)
        # torch's dtype rule: a float among start, end and step gives the default float dtype
        dt = dtype_of(dtype) if dtype is not None else DType.float32 if floats else DType.int64
        base = DType.int64 if dt.is_int else dt
    else:
        a, b, s = (builtins.float(v) for v in (start, end, step))
        if s == 0:
            raise trace_error("arange step must be non-zero")
        n = builtins.max(math.ceil((b - a) / s), 0)
        dt = dtype_of(dtype) if dtype is not None else DType.float32
        base = DType.float32 if not dt.is_float else dt
    if isinstance(n, builtins.int) and n < 0:
        n = 0
    out = wrap(tr.op(Op.IOTA, shape=(n,), axis=0, dtype=base), tr)
    if s != 1:
        out = out * (s if base.is_int else builtins.float(s))
    if a != 0:
        out = out + (SymInt(a, tr.ctx) if not isinstance(a, (builtins.int, builtins.float)) else a)
    return out if out.dtype is dt else out.to(dt)
