"""Reductions with torch semantics: sum/mean/prod/amax/amin/max/min/argmax/argmin/var/all/any/logsumexp."""

from __future__ import annotations

import math
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


# -- norms (torch.linalg.vector_norm / matrix_norm), as reductions of |x| accumulated in float32 -----------------


def _norm_order(ord: Any, what: str) -> float:
    if isinstance(ord, bool) or not isinstance(ord, (int, float)) or math.isnan(ord):
        raise trace_error(f"{what} ord must be a number (inf and -inf included), got {ord!r}")
    return float(ord)


def vector_norm(x: TensorBase, ord: Any = 2, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> TensorBase:
    """``torch.linalg.vector_norm``: ord inf / -inf (max / min of |x|), 0 (the count of nonzeros), 1, 2 and any
    other p (``sum(|x|^p)^(1/p)``) over ``dim`` (None: every dim)."""
    p = _norm_order(ord, "vector_norm")
    if dtype is not None:
        x = cast(x, dtype)
    if not x.dtype.is_float:
        raise trace_error(f"vector_norm needs a floating-point tensor, got {x.dtype.value}; use .float() first")
    out_dtype = x.dtype
    xf = cast(x, DType.float32) if x.dtype in (DType.float16, DType.bfloat16) else x
    dims = reduce_axes(xf, dim)
    a = unary(Op.ABS, xf)
    if p == math.inf:
        r = extreme(a, Op.REDUCE_MAX, dims, keepdim)
    elif p == -math.inf:
        r = extreme(a, Op.REDUCE_MIN, dims, keepdim)
    elif p == 0:
        r = sum_(cast(xf != 0, xf.dtype), dims, keepdim, None)
    elif p == 1:
        r = sum_(a, dims, keepdim, None)
    elif p == 2:
        r = unary(Op.SQRT, sum_(xf * xf, dims, keepdim, None))
    else:
        r = sum_(a**p, dims, keepdim, None) ** (1.0 / p)
    return cast(r, out_dtype)


MATRIX_ORDS = "'fro', 1, -1, inf and -inf"


def matrix_norm(
    x: TensorBase, ord: Any = "fro", dim: Any = (-2, -1), keepdim: bool = False, dtype: Any = None
) -> TensorBase:
    """``torch.linalg.matrix_norm`` over the two dims ``dim``: 'fro', and 1 / -1 (max / min column sum of |x|),
    inf / -inf (max / min row sum). 'nuc', 2 and -2 need singular values: refused."""
    if ord in ("nuc", 2, -2):
        raise trace_error(
            f"matrix_norm ord={ord!r} needs singular values (an SVD), which aotc does not compute; "
            f"ord {MATRIX_ORDS} are supported"
        )
    dims = tuple(dim) if isinstance(dim, (list, tuple)) else None
    if dims is None or len(dims) != 2 or len({axis(d, x.ndim) for d in dims}) != 2:
        raise trace_error(f"matrix_norm needs two distinct dims, got dim={dim!r}")
    rows, cols = (axis(d, x.ndim) for d in dims)
    if ord == "fro":
        return vector_norm(x, 2, (rows, cols), keepdim, dtype)
    p = _norm_order(ord, "matrix_norm") if not isinstance(ord, str) else None
    if p not in (1.0, -1.0, math.inf, -math.inf):
        raise trace_error(f"matrix_norm ord must be one of {MATRIX_ORDS}, got {ord!r}")
    summed, over = (rows, cols) if abs(p) == 1 else (cols, rows)  # 1: sum each column; inf: sum each row
    s = vector_norm(x, 1, summed, True, dtype)
    r = extreme(s, Op.REDUCE_MAX if p > 0 else Op.REDUCE_MIN, (over,), True)
    if keepdim:
        return r
    return reshape_to(r, [d for i, d in enumerate(r._v().type.shape) if i not in (rows, cols)])
