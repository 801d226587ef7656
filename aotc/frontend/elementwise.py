"""Elementwise ops with PyTorch's type promotion: tensors, numpy arrays and Python scalars mixed freely."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aotc.frontend.context import Tracer, active_tracer, as_supported_array, trace_error
from aotc.frontend.symint import SymInt
from aotc.frontend.tensor_base import TensorBase
from aotc.ir.dtypes import DType, dtype_of, promote
from aotc.ir.ops import Op
from aotc.ir.types import Value

F32, I64, BOOL = DType.float32, DType.int64, DType.bool

# Tensors with dims outrank zero-dim tensors, which outrank Python scalars: a lower level only
# decides the dtype when it brings a higher category (bool < int < float), as torch.result_type does.
_DIMMED, _ZERO_DIM, _SCALAR = 0, 1, 2


def category(dt: DType) -> int:
    return 2 if dt.is_float else 1 if dt.is_int else 0


def is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, SymInt, np.generic)) and not isinstance(x, np.ndarray)


def _scalar_dtype(x: Any) -> DType:
    if isinstance(x, (bool, np.bool_)):
        return BOOL
    if isinstance(x, (int, SymInt, np.integer)):
        return I64
    if isinstance(x, (float, np.floating)):
        return F32
    raise trace_error(f"unsupported scalar {x!r} of type {type(x).__name__}")


def _level_dtype(x: Any) -> tuple[int, DType]:
    if isinstance(x, TensorBase):
        return (_DIMMED if x.ndim else _ZERO_DIM), x.dtype
    if isinstance(x, np.ndarray):
        arr = as_supported_array(x)
        return (_DIMMED if arr.ndim else _ZERO_DIM), dtype_of(arr.dtype)
    if is_scalar(x):
        return _SCALAR, _scalar_dtype(x)
    raise trace_error(f"expected a tensor, numpy array or Python number, got {type(x).__name__}")


def result_type(*xs: Any) -> DType:
    """torch.result_type over tensors, numpy arrays and Python scalars."""
    groups: dict[int, DType] = {}
    for x in xs:
        level, dt = _level_dtype(x)
        groups[level] = promote(groups[level], dt) if level in groups else dt
    out: DType | None = None
    for level in (_DIMMED, _ZERO_DIM, _SCALAR):
        if level in groups and (out is None or category(groups[level]) > category(out)):
            out = groups[level]
    assert out is not None, "result_type needs at least one operand"
    return out


def tracer_of(*xs: Any) -> Tracer:
    for x in xs:
        if isinstance(x, TensorBase):
            return x._t()
    return active_tracer()


def value_of(x: Any, dtype: DType | None, tr: Tracer) -> Value:
    """x as a graph value, cast to dtype (None: keep its own)."""
    if isinstance(x, TensorBase):
        v = x._v()
        if x._t() is not tr:
            raise trace_error("a tensor from another trace was used here")
    elif isinstance(x, np.ndarray):
        v = tr.constant(x, x)
    elif is_scalar(x):
        val: Any = x.expr if isinstance(x, SymInt) else x.item() if isinstance(x, np.generic) else x
        dt = dtype or _scalar_dtype(x)
        if isinstance(x, SymInt) and not dt.is_int:
            # the graph computes symbolic values in int64; convert like any int tensor
            return tr.cast(tr.full(val, I64), dt)
        if isinstance(val, float) and not dt.is_float and not val.is_integer():
            raise trace_error(f"the scalar {val} can't be represented as {dt.value}")
        return tr.full(val, dt)
    else:
        raise trace_error(f"expected a tensor, numpy array or Python number, got {type(x).__name__}")
    return v if dtype is None else tr.cast(v, dtype)


def wrap(v: Value, tr: Tracer) -> TensorBase:
    return tr.tensor(v)


def as_tensor(x: Any, tr: Tracer | None = None, dtype: DType | None = None) -> TensorBase:
    tr = tr or tracer_of(x)
    if isinstance(x, TensorBase) and dtype in (None, x.dtype):
        return x
    return wrap(value_of(x, dtype, tr), tr)


# -- binary ops -------------------------------------------------------------------------------------

_COMPARE = {Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE}
_LOGICAL = {Op.AND, Op.OR, Op.XOR}
_BOOL_ARITH = {Op.MUL: Op.AND, Op.ADD: Op.OR}


def binary(op: Op, a: Any, b: Any) -> TensorBase:
    tr = tracer_of(a, b)
    dt = result_type(a, b)
    if op in _LOGICAL:
        if dt.is_float:  # as torch: bitwise ops take bool and integer operands only
            got = ", ".join(_level_dtype(x)[1].value for x in (a, b))
            raise trace_error(f"bitwise {op.value} (&, |, ^) needs bool or integer operands, got {got}")
    elif op is Op.DIV and not dt.is_float:
        dt = F32  # true division of integers gives the default float dtype, as in torch
    elif dt is BOOL and op in _BOOL_ARITH:  # as torch: bool * bool is and, bool + bool is or, both bool
        op = _BOOL_ARITH[op]
    elif op not in _COMPARE and dt is BOOL:
        raise trace_error(f"arithmetic ({op.value}) on bool tensors is not supported; convert with .int() or .float()")
    return wrap(tr.op(op, value_of(a, dt, tr), value_of(b, dt, tr)), tr)


def floor_divide(a: Any, b: Any) -> TensorBase:
    """torch.floor_divide: rounds toward negative infinity for ints and floats."""
    tr = tracer_of(a, b)
    dt = result_type(a, b)
    if dt is BOOL:
        raise trace_error("// on bool tensors is not supported")
    va, vb = value_of(a, dt, tr), value_of(b, dt, tr)
    if dt.is_float:
        return wrap(tr.op(Op.FLOOR, tr.op(Op.DIV, va, vb)), tr)
    # a - a mod b is an exact multiple of b, so the truncating integer division is exact
    return wrap(tr.op(Op.DIV, tr.op(Op.SUB, va, tr.op(Op.MOD, va, vb)), vb), tr)


def where(cond: Any, a: Any, b: Any) -> TensorBase:
    tr = tracer_of(cond, a, b)
    c = as_tensor(cond, tr)
    if c.dtype is not BOOL:
        raise trace_error(f"where's condition must be a bool tensor, got {c.dtype.value}")
    dt = result_type(a, b)
    return wrap(tr.op(Op.WHERE, c._v(), value_of(a, dt, tr), value_of(b, dt, tr)), tr)


# -- unary ops --------------------------------------------------------------------------------------

# Ops defined on floats only; int and bool inputs compute in float32, as torch does.
FLOAT_UNARY = {
    *(Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.RECIPROCAL, Op.SIN, Op.COS, Op.TANH, Op.ERF),
    *(Op.ACOS, Op.ASIN, Op.ATAN),
}
HIGH_LEVEL_FLOAT = {Op.SIGMOID, Op.SILU, Op.GELU, Op.RELU, Op.SOFTMAX, Op.LOG_SOFTMAX}
_ROUNDING = {Op.FLOOR, Op.CEIL, Op.ROUND}


def unary(op: Op, x: Any, **attrs: Any) -> TensorBase:
    tr = tracer_of(x)
    t = as_tensor(x, tr)
    v = t._v()
    if op in FLOAT_UNARY or op in HIGH_LEVEL_FLOAT:
        if op is Op.RELU and not t.dtype.is_float:
            if t.dtype is BOOL:
                raise trace_error("relu of a bool tensor is not supported")
            return wrap(tr.op(Op.MAXIMUM, v, tr.full(0, t.dtype)), tr)
        v = tr.cast(v, F32) if not t.dtype.is_float else v
    elif op in _ROUNDING and not t.dtype.is_float:
        return t  # rounding an integer tensor is the identity in torch
    elif op in (Op.NEG, Op.ABS, Op.SIGN) and t.dtype is BOOL:
        raise trace_error(f"{op.value} of a bool tensor is not supported")
    elif op is Op.NOT and t.dtype.is_float:
        raise trace_error(f"~ (bitwise not) needs a bool or integer tensor, got {t.dtype.value}")
    elif op in (Op.ISNAN, Op.ISINF) and not t.dtype.is_float:
        return wrap(tr.full(False, BOOL, t._v().type.shape), tr)
    return wrap(tr.op(op, v, **attrs), tr)


def pow_(a: Any, b: Any) -> TensorBase:
    tr = tracer_of(a, b)
    dt = result_type(a, b)
    if dt is BOOL:
        dt = I64
    return wrap(tr.op(Op.POW, value_of(a, dt, tr), value_of(b, dt, tr)), tr)


def clamp(x: Any, min: Any = None, max: Any = None) -> TensorBase:
    if min is None and max is None:
        raise trace_error("clamp needs min or max")
    tr = tracer_of(x, min, max)
    dt = result_type(*(v for v in (x, min, max) if v is not None))
    out = value_of(x, dt, tr)
    if min is not None:
        out = tr.op(Op.MAXIMUM, out, value_of(min, dt, tr))
    if max is not None:
        out = tr.op(Op.MINIMUM, out, value_of(max, dt, tr))
    return wrap(out, tr)


def cast(x: TensorBase, dtype: Any) -> TensorBase:
    if (isinstance(dtype, str) and dtype in ("double", "float64")) or dtype in (np.float64, float):
        raise trace_error("float64 is not supported by aotc; use float32")
    dt = dtype_of(dtype)
    return x if x.dtype is dt else wrap(x._t().cast(x._v(), dt), x._t())


def stack_dtypes(xs: Sequence[Any]) -> DType:
    return result_type(*xs)
