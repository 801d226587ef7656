"""Scaled dot-product attention (SDPA): kept whole through lowering (``KEPT_WHOLE``) for the flash-attention
kernel; its decomposition and reference give a row whose keys are all masked 0, as PyTorch's SDPA does."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops.base import Op, OpDef, OpKind, number_attr, one, require_float, same_dtype
from aotc.ir.ops.nn import F32, B, _up
from aotc.ir.shapes import ShapeCtx, broadcast_shapes
from aotc.ir.types import Attrs, TensorType, Value


def _sdpa_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    q, k, v = ts[:3]
    dt = same_dtype(ts[:3], "attention")
    require_float(q, "attention")
    if q.rank < 2 or k.rank != q.rank or v.rank != q.rank:
        raise ShapeError(f"attention needs q, k, v of one rank >= 2, got {q}, {k}, {v}")
    ctx.require_equal(q.shape[-1], k.shape[-1], "attention: q and k head dims differ")
    ctx.require_equal(k.shape[-2], v.shape[-2], "attention: k and v lengths differ")
    batch = broadcast_shapes(ctx, q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if len(ts) > 3:
        m = ts[3]
        if m.dtype is not DType.bool and m.dtype is not dt:
            raise ShapeError(f"attention mask must be bool or {dt.value}, got {m.dtype.value}")
        broadcast_shapes(ctx, m.shape, batch + (q.shape[-2], k.shape[-2]))
    if number_attr(attrs, "scale", None) is None and not isinstance(q.shape[-1], int):
        raise ShapeError("attention with a symbolic head dim needs an explicit scale")
    return one(dt, batch + (q.shape[-2], v.shape[-1]))


def _sdpa_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    q, k, v = xs[:3]
    dt = q.type.dtype
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(q.type.shape[-1]) if scale is None else float(scale)
    rank = k.type.rank
    kt = b.permute(k, tuple(range(rank - 2)) + (rank - 1, rank - 2))
    s = _up(b, b.op(Op.MATMUL, q, kt))
    s = b.op(Op.MUL, s, b.full(scale, F32))
    neg_inf = b.full(-math.inf, F32)
    if a.get("is_causal", False):
        lq, lk = q.type.shape[-2], k.type.shape[-2]
        row = b.op(Op.IOTA, shape=(lq, lk), axis=0, dtype=DType.int64)
        col = b.op(Op.IOTA, shape=(lq, lk), axis=1, dtype=DType.int64)
        s = b.op(Op.WHERE, b.op(Op.LE, col, row), s, neg_inf)
    if len(xs) > 3:
        m = xs[3]
        s = b.op(Op.WHERE, m, s, neg_inf) if m.type.dtype is DType.bool else b.op(Op.ADD, s, _up(b, m))
    return (b.op(Op.MATMUL, b.cast(_safe_softmax(b, s), dt), v),)


def _safe_softmax(b: B, s: Value) -> Value:
    """Softmax over the last axis of fp32 scores in which a row of only -inf (every key masked) gives 0, not
    0/0: PyTorch's SDPA does so (its ``_safe_softmax``), and so does the attention kernel."""
    axis = s.type.rank - 1
    m = b.op(Op.REDUCE_MAX, s, axes=(axis,), keepdim=True)
    m = b.op(Op.WHERE, b.op(Op.EQ, m, b.full(-math.inf, F32)), b.full(0.0, F32), m)
    e = b.op(Op.EXP, b.op(Op.SUB, s, m))
    den = b.op(Op.REDUCE_SUM, e, axes=(axis,), keepdim=True)
    return b.op(Op.DIV, e, b.op(Op.WHERE, b.op(Op.EQ, den, b.full(0.0, F32)), b.full(1.0, F32), den))


def _sdpa_ref(xs: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, ...]:
    q, k, v = (x.astype(np.float64) for x in xs[:3])
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    if a.get("is_causal", False):
        lq, lk = q.shape[-2], k.shape[-2]
        s = np.where(np.tril(np.ones((lq, lk), bool)), s, -np.inf)
    if len(xs) > 3:
        m = xs[3]
        s = np.where(m, s, -np.inf) if m.dtype == np.bool_ else s + m.astype(np.float64)
    # a row of only -inf (every key masked) gives 0, as PyTorch's SDPA does, not softmax's 0/0
    shift = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    e = np.exp(s - np.where(shift == -np.inf, 0.0, shift))
    den = np.sum(e, axis=-1, keepdims=True)
    return (((e / np.where(den == 0.0, 1.0, den)) @ v).astype(xs[0].dtype),)


DEFS = [
    OpDef(
        Op.SDPA,
        _sdpa_infer,
        _sdpa_ref,
        (3, 4),
        _sdpa_dec,
        onnx="Attention",
        attrs=("is_causal", "scale"),
        kind=OpKind.CONTRACTION,
    ),
]
