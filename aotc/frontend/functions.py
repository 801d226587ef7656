"""Module-level tensor functions, reachable as ``aotc.cat``, ``aotc.where``, ``aotc.arange``, ...

Names follow ``torch.*``; several shadow Python builtins (sum, max, abs, ...) on purpose, so the
code here reaches the builtins through ``builtins``.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from aotc.frontend import layout
from aotc.frontend import reductions as red
from aotc.frontend.arange import arange
from aotc.frontend.context import active_tracer, trace_error
from aotc.frontend.elementwise import as_tensor, binary, tracer_of, unary, wrap
from aotc.frontend.elementwise import clamp as _clamp
from aotc.frontend.elementwise import where as _where
from aotc.frontend.symint import SymInt
from aotc.frontend.tensor_base import TensorBase
from aotc.ir.dtypes import DType, dtype_of
from aotc.ir.ops import Op

__all__ = [
    "abs",
    "acos",
    "all",
    "amax",
    "amin",
    "any",
    "arange",
    "argmax",
    "argmin",
    "asin",
    "atan",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "bmm",
    "broadcast_to",
    "cat",
    "ceil",
    "chunk",
    "clamp",
    "clip",
    "concat",
    "cos",
    "empty",
    "eq",
    "erf",
    "exp",
    "expand_as",
    "flatten",
    "flip",
    "floor",
    "full",
    "full_like",
    "ge",
    "gt",
    "index_select",
    "isinf",
    "isnan",
    "le",
    "log",
    "log_softmax",
    "logical_and",
    "logical_not",
    "logical_or",
    "logsumexp",
    "lt",
    "masked_fill",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mm",
    "ne",
    "neg",
    "ones",
    "ones_like",
    "permute",
    "pow",
    "prod",
    "relu",
    "repeat_interleave",
    "reshape",
    "round",
    "rsqrt",
    "sigmoid",
    "sign",
    "sin",
    "softmax",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "sum",
    "tanh",
    "tensor",
    "transpose",
    "tril",
    "triu",
    "unbind",
    "unsqueeze",
    "var",
    "where",
    "zeros",
    "zeros_like",
]


def _t(x: Any) -> TensorBase:
    return as_tensor(x, tracer_of(x))


# -- creation ------------------------------------------------------------------------------------


def _default_dtype(value: Any) -> DType:
    if isinstance(value, builtins.bool):
        return DType.bool
    if isinstance(value, (builtins.int, SymInt)):
        return DType.int64
    if isinstance(value, builtins.float):
        return DType.float32
    raise trace_error(f"fill value must be a Python number, got {type(value).__name__}")


def _dtype(dtype: Any) -> DType | None:
    return None if dtype is None else dtype_of(dtype)


def tensor(data: Any, *, dtype: Any = None, device: Any = None) -> TensorBase:
    """A constant from Python numbers or an array (floats become float32, ints int64, as in torch)."""
    if isinstance(data, TensorBase) or (isinstance(data, (list, tuple)) and _holds_tensor(data)):
        raise trace_error("aotc.tensor() takes numbers or arrays; use stack/cat to combine tensors")
    arr = np.asarray(data)
    if arr.dtype == object:
        raise trace_error(f"aotc.tensor() can't make an array of {type(data).__name__}")
    tr = active_tracer("aotc.tensor")
    t = wrap(tr.constant(arr, arr), tr)
    return t if dtype is None else t.to(dtype)


def _holds_tensor(data: Any) -> builtins.bool:
    return builtins.any(
        isinstance(d, (TensorBase, SymInt)) or (isinstance(d, (list, tuple)) and _holds_tensor(d)) for d in data
    )


def full(size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> TensorBase:
    shape = layout.shape_arg((size,) if not isinstance(size, (tuple, list)) else (tuple(size),), "full")
    dt = _dtype(dtype) or _default_dtype(fill_value)
    tr = active_tracer("aotc.full")
    if builtins.any(isinstance(d, builtins.int) and d < 0 for d in shape):
        raise trace_error(f"negative size in {tuple(shape)}")
    if isinstance(fill_value, SymInt):
        v = tr.full(fill_value.expr, DType.int64, shape)
        return wrap(tr.cast(v, dt), tr)
    return wrap(tr.full(fill_value, dt, shape), tr)


def zeros(*size: Any, dtype: Any = None, device: Any = None) -> TensorBase:
    return full(
        size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size, 0.0, dtype=dtype or DType.float32
    )


def ones(*size: Any, dtype: Any = None, device: Any = None) -> TensorBase:
    return full(
        size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size, 1.0, dtype=dtype or DType.float32
    )


empty = zeros  # uninitialized memory has no meaning in a graph; zeros is one valid content


def full_like(x: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> TensorBase:
    t = _t(x)
    return full(tuple(t.shape), fill_value, dtype=dtype or t.dtype)


def zeros_like(x: Any, *, dtype: Any = None, device: Any = None) -> TensorBase:
    return full_like(x, 0, dtype=dtype)


def ones_like(x: Any, *, dtype: Any = None, device: Any = None) -> TensorBase:
    return full_like(x, 1, dtype=dtype)


# -- elementwise -------------------------------------------------------------------------------------


def where(condition: Any, input: Any = None, other: Any = None) -> TensorBase:
    if input is None or other is None:
        raise trace_error("where(condition) (nonzero) has a data-dependent shape; pass input and other")
    return _where(condition, input, other)


def maximum(a: Any, b: Any) -> TensorBase:
    return binary(Op.MAXIMUM, a, b)


def minimum(a: Any, b: Any) -> TensorBase:
    return binary(Op.MINIMUM, a, b)


def pow(a: Any, b: Any) -> TensorBase:
    return _t(a).pow(b) if isinstance(a, TensorBase) else _t(b).__rpow__(a)


def clamp(x: Any, min: Any = None, max: Any = None) -> TensorBase:
    return _clamp(x, min, max)


clip = clamp


def _unary(op: Op):
    def fn(x: Any) -> TensorBase:
        return unary(op, x)

    fn.__name__ = op.value
    return fn


exp, log, sqrt, rsqrt = _unary(Op.EXP), _unary(Op.LOG), _unary(Op.SQRT), _unary(Op.RSQRT)
sin, cos, tanh, erf = _unary(Op.SIN), _unary(Op.COS), _unary(Op.TANH), _unary(Op.ERF)
acos, asin, atan = _unary(Op.ACOS), _unary(Op.ASIN), _unary(Op.ATAN)
sigmoid, relu, neg, abs = _unary(Op.SIGMOID), _unary(Op.RELU), _unary(Op.NEG), _unary(Op.ABS)
floor, ceil, round, sign = _unary(Op.FLOOR), _unary(Op.CEIL), _unary(Op.ROUND), _unary(Op.SIGN)
isnan, isinf = _unary(Op.ISNAN), _unary(Op.ISINF)


def square(x: Any) -> TensorBase:
    return _t(x).square()


def logical_not(x: Any) -> TensorBase:
    return _t(x).logical_not()


def logical_and(a: Any, b: Any) -> TensorBase:
    return _t(a).logical_and(b)


def logical_or(a: Any, b: Any) -> TensorBase:
    return _t(a).logical_or(b)


def bitwise_and(a: Any, b: Any) -> TensorBase:
    return binary(Op.AND, a, b)


def bitwise_or(a: Any, b: Any) -> TensorBase:
    return binary(Op.OR, a, b)


def bitwise_xor(a: Any, b: Any) -> TensorBase:
    return binary(Op.XOR, a, b)


def bitwise_not(x: Any) -> TensorBase:
    return unary(Op.NOT, x)


def eq(a: Any, b: Any) -> TensorBase:
    return binary(Op.EQ, a, b)


def ne(a: Any, b: Any) -> TensorBase:
    return binary(Op.NE, a, b)


def lt(a: Any, b: Any) -> TensorBase:
    return binary(Op.LT, a, b)


def le(a: Any, b: Any) -> TensorBase:
    return binary(Op.LE, a, b)


def gt(a: Any, b: Any) -> TensorBase:
    return binary(Op.GT, a, b)


def ge(a: Any, b: Any) -> TensorBase:
    return binary(Op.GE, a, b)


def softmax(x: Any, dim: int, dtype: Any = None) -> TensorBase:
    return _t(x).softmax(dim, dtype)


def log_softmax(x: Any, dim: int, dtype: Any = None) -> TensorBase:
    return _t(x).log_softmax(dim, dtype)


def masked_fill(x: Any, mask: Any, value: Any) -> TensorBase:
    return _t(x).masked_fill(mask, value)


# -- layout ---------------------------------------------------------------------------------------


def cat(tensors: Sequence[Any], dim: int = 0) -> TensorBase:
    return layout.cat(tensors, dim)


concat = cat


def stack(tensors: Sequence[Any], dim: int = 0) -> TensorBase:
    return layout.stack(tensors, dim)


def matmul(a: Any, b: Any) -> TensorBase:
    return layout.matmul(a, b)


def mm(a: Any, b: Any) -> TensorBase:
    if _t(a).ndim != 2 or _t(b).ndim != 2:
        raise trace_error("mm needs two 2-D tensors")
    return layout.matmul(a, b)


def bmm(a: Any, b: Any) -> TensorBase:
    if _t(a).ndim != 3 or _t(b).ndim != 3:
        raise trace_error("bmm needs two 3-D tensors")
    return layout.matmul(a, b)


def reshape(x: Any, shape: Any) -> TensorBase:
    return layout.reshape(_t(x), (shape,))


def permute(x: Any, dims: Any) -> TensorBase:
    return layout.permute(_t(x), (dims,))


def transpose(x: Any, dim0: int, dim1: int) -> TensorBase:
    return layout.transpose(_t(x), dim0, dim1)


def squeeze(x: Any, dim: Any = None) -> TensorBase:
    return layout.squeeze(_t(x), dim)


def unsqueeze(x: Any, dim: int) -> TensorBase:
    return layout.unsqueeze(_t(x), dim)


def flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> TensorBase:
    return layout.flatten(_t(x), start_dim, end_dim)


def broadcast_to(x: Any, shape: Any) -> TensorBase:
    return layout.expand(_t(x), (shape,))


def expand_as(x: Any, other: TensorBase) -> TensorBase:
    return _t(x).expand_as(other)


def split(x: Any, split_size_or_sections: Any, dim: int = 0) -> tuple[TensorBase, ...]:
    return layout.split(_t(x), split_size_or_sections, dim)


def chunk(x: Any, chunks: int, dim: int = 0) -> tuple[TensorBase, ...]:
    return layout.chunk(_t(x), chunks, dim)


def unbind(x: Any, dim: int = 0) -> tuple[TensorBase, ...]:
    return layout.unbind(_t(x), dim)


def flip(x: Any, dims: Any) -> TensorBase:
    return layout.flip(_t(x), (dims,))


def tril(x: Any, diagonal: int = 0) -> TensorBase:
    return layout.tri(_t(x), diagonal, lower=True)


def triu(x: Any, diagonal: int = 0) -> TensorBase:
    return layout.tri(_t(x), diagonal, lower=False)


def index_select(x: Any, dim: int, index: Any) -> TensorBase:
    return layout.index_select(_t(x), dim, index)


def repeat_interleave(x: Any, repeats: int, dim: int) -> TensorBase:
    """Each slice along ``dim`` repeated ``repeats`` times in place (an int count only)."""
    t = _t(x)
    if isinstance(repeats, builtins.bool) or not isinstance(repeats, builtins.int) or repeats < 1:
        raise trace_error(f"repeat_interleave needs a positive int count, got {repeats!r}")
    ax = layout.axis(dim, t.ndim)
    src = list(t._v().type.shape)
    y = layout.unsqueeze(t, ax + 1)
    y = layout.expand(y, (src[: ax + 1] + [repeats] + src[ax + 1 :],))
    return layout.reshape_to(y, src[:ax] + [src[ax] * repeats] + src[ax + 1 :])


# -- reductions ---------------------------------------------------------------------------------------


def sum(x: Any, dim: Any = None, keepdim: builtins.bool = False, *, dtype: Any = None) -> TensorBase:
    return red.sum_(_t(x), dim, keepdim, dtype)


def mean(x: Any, dim: Any = None, keepdim: builtins.bool = False, *, dtype: Any = None) -> TensorBase:
    return red.mean(_t(x), dim, keepdim, dtype)


def prod(x: Any, dim: Any = None, keepdim: builtins.bool = False, *, dtype: Any = None) -> TensorBase:
    return red.prod(_t(x), dim, keepdim, dtype)


def max(x: Any, dim: Any = None, keepdim: builtins.bool = False) -> Any:
    return red.max_min(_t(x), dim, keepdim, largest=True)


def min(x: Any, dim: Any = None, keepdim: builtins.bool = False) -> Any:
    return red.max_min(_t(x), dim, keepdim, largest=False)


def amax(x: Any, dim: Any = (), keepdim: builtins.bool = False) -> TensorBase:
    return red.extreme(_t(x), Op.REDUCE_MAX, dim, keepdim)


def amin(x: Any, dim: Any = (), keepdim: builtins.bool = False) -> TensorBase:
    return red.extreme(_t(x), Op.REDUCE_MIN, dim, keepdim)


def argmax(x: Any, dim: int | None = None, keepdim: builtins.bool = False) -> TensorBase:
    return red.arg(_t(x), Op.ARGMAX, dim, keepdim)


def argmin(x: Any, dim: int | None = None, keepdim: builtins.bool = False) -> TensorBase:
    return red.arg(_t(x), Op.ARGMIN, dim, keepdim)


def var(
    x: Any, dim: Any = None, unbiased: Any = None, keepdim: builtins.bool = False, *, correction: Any = None
) -> TensorBase:
    return red.var(_t(x), dim, unbiased, keepdim, correction)


def std(
    x: Any, dim: Any = None, unbiased: Any = None, keepdim: builtins.bool = False, *, correction: Any = None
) -> TensorBase:
    return red.var(_t(x), dim, unbiased, keepdim, correction).sqrt()


def all(x: Any, dim: Any = None, keepdim: builtins.bool = False) -> TensorBase:
    return red.all_any(_t(x), dim, keepdim, every=True)


def any(x: Any, dim: Any = None, keepdim: builtins.bool = False) -> TensorBase:
    return red.all_any(_t(x), dim, keepdim, every=False)


def logsumexp(x: Any, dim: Any, keepdim: builtins.bool = False) -> TensorBase:
    return red.logsumexp(_t(x), dim, keepdim)
