"""Reductions with torch semantics: sum/mean/prod/amax/amin/max/min/argmax/argmin/var/all/any/logsumexp."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from aotc.frontend.context import trace_error
from aotc.frontend.elementwise import binary, cast, unary, value_of, wrap
from aotc.frontend.layout import axis, reshape_to
from aotc.frontend.symint import SymInt
from aotc.frontend.tensor_base import TensorBase
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import numel

# what torch.max(x, dim) returns: a named (values, indices) pair
MaxMin = namedtuple("MaxMin", ["values", "indices"])


def reduce_axes(x: TensorBase, dim: Any) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(x.ndim))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    out = sorted({axis(d, x.ndim) for d in dims})
    if len(out) != len(dims):
        raise trace_error(f"repeated dim in {tuple(dims)}")
    return tuple(out) if x.ndim else ()


def _reduce(x: TensorBase, op: Op, dims: tuple[int, ...], keepdim: bool) -> TensorBase:
    tr = x._t()
    return wrap(tr.op(op, x._v(), axes=dims, keepdim=bool(keepdim)), tr)


def sum_(x: TensorBase, dim: Any, keepdim: bool, dtype: Any) -> TensorBase:
    if dtype is not None:
        x = cast(x, dtype)
    elif not x.dtype.is_float:
        x = cast(x, DType.int64)  # torch sums bool and int tensors in int64
    return _reduce(x, Op.REDUCE_SUM, reduce_axes(x, dim), keepdim)


def prod(x: TensorBase, dim: Any, keepdim: bool, dtype: Any) -> TensorBase:
    if dtype is not None:
        x = cast(x, dtype)
    elif not x.dtype.is_float:
        x = cast(x, DType.int64)
    return _reduce(x, Op.REDUCE_PROD, reduce_axes(x, dim), keepdim)


def mean(x: TensorBase, dim: Any, keepdim: bool, dtype: Any) -> TensorBase:
    if dtype is not None:
        x = cast(x, dtype)
    if not x.dtype.is_float:
        raise trace_error(f"mean needs a floating-point tensor, got {x.dtype.value}; use .float() first")
    return _reduce(x, Op.REDUCE_MEAN, reduce_axes(x, dim), keepdim)


def extreme(x: TensorBase, op: Op, dim: Any, keepdim: bool) -> TensorBase:
    dims = reduce_axes(x, None if dim in ((), []) else dim)
    if x.dtype is DType.bool:
        return cast(_reduce(cast(x, DType.int32), op, dims, keepdim), DType.bool)
    return _reduce(x, op, dims, keepdim)


def max_min(x: TensorBase, dim: Any, keepdim: bool, largest: bool) -> Any:
    """``max()`` (a 0-d tensor), ``max(dim)`` ((values, indices)) or ``max(other)`` (elementwise)."""
    if isinstance(dim, TensorBase):
        return binary(Op.MAXIMUM if largest else Op.MINIMUM, x, dim)
    op = Op.REDUCE_MAX if largest else Op.REDUCE_MIN
    if dim is None:
        return extreme(x, op, None, False)
    ax = axis(dim, x.ndim)
    values = extreme(x, op, ax, keepdim)
    return MaxMin(values, arg(x, Op.ARGMAX if largest else Op.ARGMIN, ax, keepdim))


def arg(x: TensorBase, op: Op, dim: int | None, keepdim: bool) -> TensorBase:
    src = x if x.dtype is not DType.bool else cast(x, DType.int32)
    tr = x._t()
    if dim is None:
        flat = reshape_to(src, (numel(src._v().type.shape),))
        out = wrap(tr.op(op, flat._v(), axis=0, keepdim=False), tr)
        return reshape_to(out, (1,) * x.ndim) if keepdim else out
    return wrap(tr.op(op, src._v(), axis=axis(dim, x.ndim), keepdim=bool(keepdim)), tr)


def var(x: TensorBase, dim: Any, unbiased: bool | None, keepdim: bool, correction: Any) -> TensorBase:
    if unbiased is not None and correction is not None:
        raise trace_error("var/std: pass unbiased or correction, not both")
    corr = correction if correction is not None else (1 if unbiased is None or unbiased else 0)
    if not x.dtype.is_float:
        raise trace_error(f"var/std need a floating-point tensor, got {x.dtype.value}")
    dims = reduce_axes(x, dim)
    centered = x - mean(x, dims, True, None)
    total = sum_(centered * centered, dims, keepdim, None)
    count = numel(tuple(x._v().type.shape[i] for i in dims)) - corr
    tr = x._t()
    n = count if isinstance(count, (int, float)) else SymInt(count, tr.ctx)
    return total / wrap(value_of(n, x.dtype, tr), tr)


def all_any(x: TensorBase, dim: Any, keepdim: bool, every: bool) -> TensorBase:
    b = x if x.dtype is DType.bool else x != 0
    return extreme(b, Op.REDUCE_MIN if every else Op.REDUCE_MAX, dim, keepdim)


def logsumexp(x: TensorBase, dim: Any, keepdim: bool) -> TensorBase:
    if not x.dtype.is_float:
        x = cast(x, DType.float32)
    dims = reduce_axes(x, dim)
    m = extreme(x, Op.REDUCE_MAX, dims, True)
    # -inf rows would give nan from (-inf) - (-inf); shift them by 0 instead
    m = m.masked_fill(m.isinf(), 0.0)
    out = unary(Op.LOG, sum_((x - m).exp(), dims, True, None)) + m
    return out if keepdim else reshape_to(out, [d for i, d in enumerate(out._v().type.shape) if i not in dims])
