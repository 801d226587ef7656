"""High-level ops: each has a direct numpy reference and a numerically stable decomposition to primitives."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.gather_ids import NEGATIVE_INDICES, allows_negative
from aotc.ir.ops.base import Op, OpDef, OpKind, acc, number_attr, one, require_float, same_dtype
from aotc.ir.ops.elementwise import erf
from aotc.ir.ops.layout import _gather_ref
from aotc.ir.shapes import ShapeCtx, norm_axes, norm_axis, numel
from aotc.ir.types import Attrs, TensorType, Value

F32 = DType.float32
B = Any  # aotc.ir.builder.Builder; not imported to keep the op table free of cycles


def _up(b: B, x: Value) -> Value:
    """Half inputs compute in float32 (norms, softmax, transcendental activations)."""
    return b.cast(x, F32) if x.type.dtype in (DType.float16, DType.bfloat16) else x


def _same_float_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    require_float(ts[0], "activation")
    return one(ts[0].dtype, ts[0].shape)


def _f32(fn):
    def ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        return (np.asarray(fn(*[acc(x) for x in xs], attrs)).astype(xs[0].dtype),)

    return ref


# -- activations ------------------------------------------------------------------------


def _relu_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = xs[0]
    return (b.op(Op.MAXIMUM, x, b.full(0, x.type.dtype)),)


def _sigmoid(b: B, x: Value) -> Value:
    # 1/(1+exp(-x)): exp overflows to inf for very negative x, giving exactly 0, never NaN.
    one_ = b.full(1.0, x.type.dtype)
    return b.op(Op.DIV, one_, b.op(Op.ADD, one_, b.op(Op.EXP, b.op(Op.NEG, x))))


def _sigmoid_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = _up(b, xs[0])
    return (b.cast(_sigmoid(b, x), xs[0].type.dtype),)


def _silu_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = _up(b, xs[0])
    return (b.cast(b.op(Op.MUL, x, _sigmoid(b, x)), xs[0].type.dtype),)


def _gelu_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = _up(b, xs[0])
    dt = x.type.dtype
    half, one_ = b.full(0.5, dt), b.full(1.0, dt)
    if a.get("approximate", "none") == "tanh":
        x3 = b.op(Op.MUL, b.op(Op.MUL, x, x), x)
        inner = b.op(Op.ADD, x, b.op(Op.MUL, b.full(0.044715, dt), x3))
        t = b.op(Op.TANH, b.op(Op.MUL, b.full(math.sqrt(2.0 / math.pi), dt), inner))
    else:
        t = b.op(Op.ERF, b.op(Op.MUL, x, b.full(1.0 / math.sqrt(2.0), dt)))
    y = b.op(Op.MUL, b.op(Op.MUL, half, x), b.op(Op.ADD, one_, t))
    return (b.cast(y, xs[0].type.dtype),)


def _gelu_ref(x: np.ndarray, a: Attrs) -> np.ndarray:
    x = x.astype(np.float64)
    if a.get("approximate", "none") == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _gelu_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    if attrs.get("approximate", "none") not in ("none", "tanh"):
        raise ShapeError(f"gelu approximate must be 'none' or 'tanh', got {attrs.get('approximate')!r}")
    return _same_float_infer(ts, attrs, ctx)


# -- softmax family ----------------------------------------------------------------------


def _axis_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    require_float(ts[0], "softmax")
    norm_axis(attrs.get("axis", -1), ts[0].rank)
    return one(ts[0].dtype, ts[0].shape)


def _shifted(b: B, x: Value, axis: int) -> Value:
    m = b.op(Op.REDUCE_MAX, x, axes=(axis,), keepdim=True)
    return b.op(Op.SUB, x, m)


def _softmax_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = _up(b, xs[0])
    axis = norm_axis(a.get("axis", -1), x.type.rank)
    e = b.op(Op.EXP, _shifted(b, x, axis))
    y = b.op(Op.DIV, e, b.op(Op.REDUCE_SUM, e, axes=(axis,), keepdim=True))
    return (b.cast(y, xs[0].type.dtype),)


def _log_softmax_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = _up(b, xs[0])
    axis = norm_axis(a.get("axis", -1), x.type.rank)
    s = _shifted(b, x, axis)
    lse = b.op(Op.LOG, b.op(Op.REDUCE_SUM, b.op(Op.EXP, s), axes=(axis,), keepdim=True))
    return (b.cast(b.op(Op.SUB, s, lse), xs[0].type.dtype),)


def _shifted_np(x: np.ndarray, axis: int) -> np.ndarray:
    # initial=-inf lets an empty axis through (np.max refuses it), as the decomposition does.
    return x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)


def _softmax_np(x: np.ndarray, axis: int) -> np.ndarray:
    if x.ndim == 0:
        return _softmax_np(x.reshape(1), 0).reshape(())
    e = np.exp(_shifted_np(x, axis))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax_np(x: np.ndarray, axis: int) -> np.ndarray:
    if x.ndim == 0:
        return _log_softmax_np(x.reshape(1), 0).reshape(())
    s = _shifted_np(x, axis)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def _sigmoid_np(x: np.ndarray) -> np.ndarray:
    # exp(-|x|) never overflows, so the reference is quiet even outside np.errstate.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _mean_np(x: np.ndarray, axes: tuple[int, ...], keepdims: bool = True) -> np.ndarray:
    """Sum over count, so an empty axis gives NaN without np.mean's warning (the decomposition's result)."""
    count = math.prod(x.shape[a] for a in axes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(x, axis=axes, keepdims=keepdims) / count


# -- normalization --------------------------------------------------------------------------


def _norm_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    x = ts[0]
    require_float(x, "normalization")
    number_attr(attrs, "eps", 1e-5)
    n = attrs.get("ndim", 1)
    if not isinstance(n, int) or not 1 <= n <= x.rank:
        raise ShapeError(f"normalized ndim {n!r} is invalid for rank {x.rank}")
    same_dtype(ts, "normalization")
    for p in ts[1:]:
        if p.rank != n:
            raise ShapeError(f"norm weight/bias must have rank {n}, got {p}")
        for d, e in zip(p.shape, x.shape[-n:]):
            ctx.require_equal(d, e, "norm weight/bias shape differs from the normalized dims")
    return one(x.dtype, x.shape)


def _mean(b: B, x: Value, axes: tuple[int, ...]) -> Value:
    s = b.op(Op.REDUCE_SUM, x, axes=axes, keepdim=True)
    count = numel(tuple(x.type.shape[i] for i in axes))
    return b.op(Op.DIV, s, b.full(count if not isinstance(count, int) else float(count), x.type.dtype))


def _affine(b: B, y: Value, params: Sequence[Value], dtype: DType) -> Value:
    if params:
        y = b.op(Op.MUL, y, _up(b, params[0]))
    if len(params) > 1:
        y = b.op(Op.ADD, y, _up(b, params[1]))
    return b.cast(y, dtype)


def _layer_norm_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = _up(b, xs[0])
    axes = tuple(range(x.type.rank - a.get("ndim", 1), x.type.rank))
    c = b.op(Op.SUB, x, _mean(b, x, axes))
    var = _mean(b, b.op(Op.MUL, c, c), axes)
    inv = b.op(Op.RSQRT, b.op(Op.ADD, var, b.full(float(a.get("eps", 1e-5)), F32)))
    return (_affine(b, b.op(Op.MUL, c, inv), xs[1:], xs[0].type.dtype),)


def _rms_norm_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = _up(b, xs[0])
    axes = tuple(range(x.type.rank - a.get("ndim", 1), x.type.rank))
    ms = _mean(b, b.op(Op.MUL, x, x), axes)
    inv = b.op(Op.RSQRT, b.op(Op.ADD, ms, b.full(float(a.get("eps", 1e-6)), F32)))
    return (_affine(b, b.op(Op.MUL, x, inv), xs[1:], xs[0].type.dtype),)


def _layer_norm_ref(xs: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, ...]:
    x = xs[0].astype(np.float64)
    axes = tuple(range(x.ndim - a.get("ndim", 1), x.ndim))
    m = _mean_np(x, axes)
    y = (x - m) / np.sqrt(_mean_np((x - m) ** 2, axes) + a.get("eps", 1e-5))
    return (_affine_np(y, xs[1:]).astype(xs[0].dtype),)


def _rms_norm_ref(xs: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, ...]:
    x = xs[0].astype(np.float64)
    axes = tuple(range(x.ndim - a.get("ndim", 1), x.ndim))
    y = x / np.sqrt(_mean_np(x * x, axes) + a.get("eps", 1e-6))
    return (_affine_np(y, xs[1:]).astype(xs[0].dtype),)


def _affine_np(y: np.ndarray, params: Sequence[np.ndarray]) -> np.ndarray:
    if params:
        y = y * params[0].astype(np.float64)
    if len(params) > 1:
        y = y + params[1].astype(np.float64)
    return y


# -- linear, embedding ----------------------------------------------------------------------------------


def _linear_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    x, w = ts[0], ts[1]
    same_dtype(ts, "linear")
    if x.rank < 1 or w.rank != 2:
        raise ShapeError(f"linear needs x (..., in) and weight (out, in), got {x} and {w}")
    ctx.require_equal(x.shape[-1], w.shape[1], "linear: input features differ from weight")
    if len(ts) > 2:
        if ts[2].rank != 1:
            raise ShapeError(f"linear bias must be 1-D, got {ts[2]}")
        ctx.require_equal(ts[2].shape[0], w.shape[0], "linear: bias size differs from out features")
    return one(x.dtype, x.shape[:-1] + (w.shape[0],))


def _linear_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x, w = xs[0], xs[1]
    x2 = b.reshape(x, (1, x.type.shape[0])) if x.type.rank == 1 else x
    y = b.op(Op.MATMUL, x2, b.permute(w, (1, 0)))
    if x.type.rank == 1:
        y = b.reshape(y, (w.type.shape[0],))
    if len(xs) > 2:
        y = b.op(Op.ADD, y, xs[2])
    return (y,)


def _linear_ref(xs: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, ...]:
    y = acc(xs[0]) @ acc(xs[1]).T
    if len(xs) > 2:
        y = y + acc(xs[2])
    return (np.asarray(y).astype(xs[0].dtype),)


def _embedding_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    w, idx = ts
    if w.rank != 2 or not idx.dtype.is_int:
        raise ShapeError(f"embedding needs a 2-D weight and int indices, got {w} and {idx}")
    if not isinstance(attrs.get(NEGATIVE_INDICES, False), bool):
        raise ShapeError(f"embedding attr {NEGATIVE_INDICES!r} must be a bool, got {attrs[NEGATIVE_INDICES]!r}")
    return one(w.dtype, idx.shape + (w.shape[1],))


def _embedding_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    # The id rule travels with the ids: PyTorch's [0, n) unless the node allows negative ids.
    extra = {NEGATIVE_INDICES: True} if allows_negative(a) else {}
    return (b.op(Op.GATHER, xs[0], xs[1], axis=0, **extra),)


# -- small structural ops ------------------------------------------------------------------------------


def _mean_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    t = ts[0]
    require_float(t, "mean")
    axes = attrs.get("axes")
    if not isinstance(axes, tuple) or norm_axes(axes, t.rank) != axes:
        raise ShapeError(f"mean axes must be sorted, unique and non-negative, got {axes!r}")
    keep = bool(attrs.get("keepdim", False))
    shape = (
        tuple(1 if i in axes else d for i, d in enumerate(t.shape))
        if keep
        else tuple(d for i, d in enumerate(t.shape) if i not in axes)
    )
    return one(t.dtype, shape)


def _mean_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = _up(b, xs[0])
    m = _mean(b, x, a["axes"])
    if not a.get("keepdim", False):
        m = b.reshape(m, tuple(d for i, d in enumerate(x.type.shape) if i not in a["axes"]))
    return (b.cast(m, xs[0].type.dtype),)


def _tri_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    k = attrs.get("k", 0)
    if ts[0].rank < 2 or not isinstance(k, int) or not -(2**63) <= k < 2**63:
        raise ShapeError(f"tril/triu needs rank >= 2 and an int64 diagonal, got {ts[0]} and k={k!r}")
    return one(ts[0].dtype, ts[0].shape)


def _tri_dec(lower: bool):
    def dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
        x = xs[0]
        r, c = x.type.shape[-2:]
        row = b.op(Op.IOTA, shape=(r, c), axis=0, dtype=DType.int64)
        col = b.op(Op.IOTA, shape=(r, c), axis=1, dtype=DType.int64)
        diff = b.op(Op.SUB, col, row)
        k = b.full(int(a.get("k", 0)), DType.int64)
        keep = b.op(Op.LE if lower else Op.GE, diff, k)
        return (b.op(Op.WHERE, keep, x, b.full(False if x.type.dtype is DType.bool else 0, x.type.dtype)),)

    return dec


def _np(fn):
    return lambda xs, a: (np.asarray(fn(*xs, a)).astype(xs[0].dtype),)


DEFS = [
    OpDef(Op.LINEAR, _linear_infer, _linear_ref, (2, 3), _linear_dec, onnx="Gemm", kind=OpKind.CONTRACTION),
    OpDef(
        Op.RELU,
        _same_float_infer,
        _np(lambda x, a: np.maximum(x, 0)),
        (1, 1),
        _relu_dec,
        onnx="Relu",
        kind=OpKind.POINTWISE,
    ),
    OpDef(
        Op.GELU,
        _gelu_infer,
        _f32(_gelu_ref),
        (1, 1),
        _gelu_dec,
        onnx="Gelu",
        attrs=("approximate",),
        kind=OpKind.POINTWISE,
    ),
    OpDef(
        Op.SILU,
        _same_float_infer,
        _f32(lambda x, a: x * _sigmoid_np(x.astype(np.float64))),
        (1, 1),
        _silu_dec,
        kind=OpKind.POINTWISE,
    ),
    OpDef(
        Op.SIGMOID,
        _same_float_infer,
        _f32(lambda x, a: _sigmoid_np(x.astype(np.float64))),
        (1, 1),
        _sigmoid_dec,
        onnx="Sigmoid",
        kind=OpKind.POINTWISE,
    ),
    OpDef(
        Op.SOFTMAX,
        _axis_infer,
        _f32(lambda x, a: _softmax_np(x, a.get("axis", -1))),
        (1, 1),
        _softmax_dec,
        onnx="Softmax",
        attrs=("axis",),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.LOG_SOFTMAX,
        _axis_infer,
        _f32(lambda x, a: _log_softmax_np(x, a.get("axis", -1))),
        (1, 1),
        _log_softmax_dec,
        onnx="LogSoftmax",
        attrs=("axis",),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.LAYER_NORM,
        _norm_infer,
        _layer_norm_ref,
        (1, 3),
        _layer_norm_dec,
        onnx="LayerNormalization",
        attrs=("ndim", "eps"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.RMS_NORM,
        _norm_infer,
        _rms_norm_ref,
        (1, 2),
        _rms_norm_dec,
        onnx="RMSNormalization",
        attrs=("ndim", "eps"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.EMBEDDING,
        _embedding_infer,
        lambda xs, a: _gather_ref(xs, Attrs(axis=0, negative_indices=allows_negative(a))),
        (2, 2),
        _embedding_dec,
        onnx="Gather",
        attrs=(NEGATIVE_INDICES,),
        kind=OpKind.INDEX,
    ),
    OpDef(
        Op.REDUCE_MEAN,
        _mean_infer,
        _f32(lambda x, a: _mean_np(x, a["axes"], bool(a.get("keepdim", False))) if a["axes"] and x.ndim else x),
        (1, 1),
        _mean_dec,
        onnx="ReduceMean",
        attrs=("axes", "keepdim"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.TRIL,
        _tri_infer,
        _np(lambda x, a: np.tril(x, a.get("k", 0))),
        (1, 1),
        _tri_dec(True),
        onnx="Trilu",
        attrs=("k",),
        kind=OpKind.POINTWISE,
    ),
    OpDef(
        Op.TRIU,
        _tri_infer,
        _np(lambda x, a: np.triu(x, a.get("k", 0))),
        (1, 1),
        _tri_dec(False),
        onnx="Trilu",
        attrs=("k",),
        kind=OpKind.POINTWISE,
    ),
]
