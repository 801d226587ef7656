"""High-level vision ops: 2-D convolution with bias, max/avg pooling, inference batch norm."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from aotc.errors import ShapeError
from aotc.ir.ops.base import Op, OpDef, OpKind, acc, number_attr, one, require_float, same_dtype
from aotc.ir.ops.nn import F32, B, _up
from aotc.ir.ops.reduce import _conv_infer, _conv_params, _conv_ref
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic import add, floordiv
from aotc.ir.types import Attrs, ShapeDim, TensorType, Value

# -- batch norm (inference form) -----------------------------------------------------------------------


def _batch_norm_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    x = ts[0]
    require_float(x, "batch_norm")
    number_attr(attrs, "eps", 1e-5)
    same_dtype(ts, "batch_norm")
    if x.rank < 2:
        raise ShapeError(f"batch_norm needs (N, C, ...), got {x}")
    for p in ts[1:]:
        if p.rank != 1:
            raise ShapeError(f"batch_norm statistics must be 1-D, got {p}")
        ctx.require_equal(p.shape[0], x.shape[1], "batch_norm parameter size differs from channels")
    return one(x.dtype, x.shape)


def _channel(b: B, p: Value, rank: int) -> Value:
    return b.reshape(_up(b, p), (p.type.shape[0],) + (1,) * (rank - 2))


def _batch_norm_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x, rank = _up(b, xs[0]), xs[0].type.rank
    mean, var = _channel(b, xs[1], rank), _channel(b, xs[2], rank)
    inv = b.op(Op.RSQRT, b.op(Op.ADD, var, b.full(float(a.get("eps", 1e-5)), F32)))
    y = b.op(Op.MUL, b.op(Op.SUB, x, mean), inv)
    if len(xs) > 3:
        y = b.op(Op.MUL, y, _channel(b, xs[3], rank))
    if len(xs) > 4:
        y = b.op(Op.ADD, y, _channel(b, xs[4], rank))
    return (b.cast(y, xs[0].type.dtype),)


def _batch_norm_ref(xs: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, ...]:
    x = xs[0].astype(np.float64)
    sh = (1, -1) + (1,) * (x.ndim - 2)
    p = [v.astype(np.float64).reshape(sh) for v in xs[1:]]
    y = (x - p[0]) / np.sqrt(p[1] + a.get("eps", 1e-5))
    if len(p) > 2:
        y = y * p[2]
    if len(p) > 3:
        y = y + p[3]
    return (y.astype(xs[0].dtype),)


# -- convolution and pooling ------------------------------------------------------------------------


def _conv2d_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    (out,) = _conv_infer(ts[:2], attrs, ctx)
    if len(ts) > 2:
        same_dtype(ts, "conv2d")
        if ts[2].rank != 1:
            raise ShapeError(f"conv bias must be 1-D, got {ts[2]}")
        ctx.require_equal(ts[2].shape[0], ts[1].shape[0], "conv bias size differs from out channels")
    return (out,)


def _conv2d_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    y = b.op(Op.CONV, xs[0], xs[1], **dict(a.items()))
    if len(xs) > 2:
        y = b.op(Op.ADD, y, b.reshape(xs[2], (xs[2].type.shape[0],) + (1,) * (y.type.rank - 2)))
    return (y,)


def _conv2d_ref(xs: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, ...]:
    (y,) = _conv_ref(xs[:2], a)
    if len(xs) > 2:
        y = (acc(y) + acc(xs[2]).reshape((-1,) + (1,) * (y.ndim - 2))).astype(y.dtype)
    return (y,)


def _pool_params(attrs: Attrs, nsp: int) -> tuple[tuple, tuple, tuple]:
    kernel = attrs.get("kernel")
    if not isinstance(kernel, tuple) or len(kernel) != nsp or any(not isinstance(k, int) or k < 1 for k in kernel):
        raise ShapeError(f"pool kernel must have {nsp} positive ints, got {kernel!r}")
    strides, pads, _, _ = _conv_params(
        Attrs(strides=attrs.get("strides", kernel), pads=attrs.get("pads", (0,) * 2 * nsp)), nsp
    )
    if any(pads[2 * i] > kernel[i] // 2 or pads[2 * i + 1] > kernel[i] // 2 for i in range(nsp)):
        raise ShapeError("pool padding must be at most half the kernel size")
    if not isinstance(attrs.get("ceil_mode", False), bool):
        raise ShapeError(f"pool ceil_mode must be a bool, got {attrs.get('ceil_mode')!r}")
    return kernel, strides, pads


def pool_length(d: ShapeDim, span: int, stride: int, lo: int, hi: int, ceil_mode: bool) -> ShapeDim:
    """How many windows of ``span`` (the dilated kernel) fit ``d`` padded by ``lo``/``hi``: torch's and ONNX's rule.
    In ceil mode a last, partial window counts too, unless it would start in the right padding."""
    room = d + lo + hi - span
    if not ceil_mode:
        return floordiv(room, stride) + 1
    # With r = d + lo - 1 (the last position a window may start at) and c = span - hi - 1, ceil mode counts
    # floor((r - c + stride - 1) / stride) + 1 windows, less any that start past r: that is the ceil count itself
    # when c >= stride - 1, and floor(r / stride) + 1 otherwise (the ceil count is then that or one more).
    if stride <= span - hi:
        return floordiv(room + stride - 1, stride) + 1
    return floordiv(d + lo - 1, stride) + 1


def ceil_extra(n: ShapeDim, d: ShapeDim, span: int, stride: int, lo: int, hi: int) -> ShapeDim:
    """How much padding past ``hi`` the last of ``n`` windows may reach (0 outside ceil mode's partial window).
    Over a dynamic dim that is exact where ``pool_length`` took the ceil count (it is then in [0, stride)), else
    the bound span - hi - 1: the padding past where the last window ends is never read."""
    e = (n - 1) * stride + span - (d + lo + hi)
    if isinstance(e, int):
        return max(e, 0)
    return e if stride <= span - hi else max(span - hi - 1, 0)


def _pool_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    x = ts[0]
    require_float(x, "pool")
    if x.rank < 3:
        raise ShapeError(f"pool needs (N, C, ...), got {x}")
    kernel, strides, pads = _pool_params(attrs, x.rank - 2)
    ceil_mode = attrs.get("ceil_mode", False)
    out = list(x.shape[:2])
    for i, k in enumerate(kernel):
        padded = add(add(x.shape[2 + i], pads[2 * i]), pads[2 * i + 1])
        ctx.check_true(padded, ">=", k, f"pool: input dim {2 + i} smaller than the kernel")
        out.append(pool_length(x.shape[2 + i], k, strides[i], pads[2 * i], pads[2 * i + 1], ceil_mode))
    return one(x.dtype, tuple(out))


def _pool_windows(b: B, x: Value, attrs: Attrs, pad_value: float, extra_value: float) -> tuple[list[Value], tuple]:
    """Every kernel offset as one strided slice of the padded input (``pad_value`` over the pads, ``extra_value``
    over what ceil mode's last window reaches past them)."""
    nsp = x.type.rank - 2
    kernel, strides, pads = _pool_params(attrs, nsp)
    (out_t,) = _pool_infer([x.type], attrs, b.ctx)
    xp = b.op(Op.PAD, x, pads=(0, 0, 0, 0) + pads, value=pad_value) if any(pads) else x
    extra = [
        ceil_extra(out_t.shape[2 + i], x.type.shape[2 + i], k, strides[i], pads[2 * i], pads[2 * i + 1])
        if attrs.get("ceil_mode", False)
        else 0
        for i, k in enumerate(kernel)
    ]
    if any(not isinstance(e, int) or e for e in extra):
        more = tuple(v for e in extra for v in (0, e))
        xp = b.op(Op.PAD, xp, pads=(0, 0, 0, 0) + more, value=extra_value)
    outs = []
    for k in np.ndindex(*kernel):
        starts = (0, 0) + tuple(int(k[i]) for i in range(nsp))
        stops = tuple(xp.type.shape[:2]) + tuple(
            add(int(k[i]) + 1, (out_t.shape[2 + i] - 1) * strides[i]) for i in range(nsp)
        )
        outs.append(b.op(Op.SLICE, xp, starts=starts, stops=stops, steps=(1, 1) + strides))
    return outs, kernel


def _max_pool_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    wins, _ = _pool_windows(b, xs[0], a, -math.inf, -math.inf)
    y = wins[0]
    for w in wins[1:]:
        y = b.op(Op.MAXIMUM, y, w)
    return (y,)


def _avg_pool_dec(b: B, xs: Sequence[Value], a: Attrs) -> tuple[Value, ...]:
    x = _up(b, xs[0])
    wins, kernel = _pool_windows(b, x, a, 0.0, 0.0)
    y = wins[0]
    for w in wins[1:]:
        y = b.op(Op.ADD, y, w)
    include = a.get("count_include_pad", True)
    if not a.get("ceil_mode", False) and (include or not any(a.get("pads", ()))):
        count = b.full(float(np.prod(kernel)), F32)
    else:
        # the divisor counts the input and (count_include_pad) the pads, never what a ceil-mode window reaches past
        ones = b.full(1.0, F32, x.type.shape)
        cwins, _ = _pool_windows(b, ones, a, 1.0 if include else 0.0, 0.0)
        count = cwins[0]
        for w in cwins[1:]:
            count = b.op(Op.ADD, count, w)
    return (b.cast(b.op(Op.DIV, y, count), xs[0].type.dtype),)


def _pool_ref(kind: str):
    def ref(xs: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, ...]:
        x = acc(xs[0])
        nsp = x.ndim - 2
        kernel, strides, pads = _pool_params(a, nsp)
        fill = -np.inf if kind == "max" else 0.0
        include = a.get("count_include_pad", True)
        widths = [(0, 0), (0, 0)]
        for i, k in enumerate(kernel):
            d, lo, hi = x.shape[2 + i], pads[2 * i], pads[2 * i + 1]
            n = pool_length(d, k, strides[i], lo, hi, a.get("ceil_mode", False))
            widths.append((lo, hi + max((n - 1) * strides[i] + k - (d + lo + hi), 0)))
        xp = np.pad(x, widths, constant_values=fill)
        # 1 over the input, and over the pads when they count; never over a ceil-mode window's overhang
        cnt = np.pad(
            np.ones_like(x),
            [(0, 0), (0, 0)] + [(pads[2 * i], pads[2 * i + 1]) for i in range(nsp)],
            constant_values=1.0 if include else 0.0,
        )
        cnt = np.pad(cnt, [(0, 0)] * 2 + [(0, w[1] - pads[2 * i + 1]) for i, w in enumerate(widths[2:])])
        view = np.lib.stride_tricks.sliding_window_view(xp, kernel, axis=tuple(range(2, 2 + nsp)))
        cview = np.lib.stride_tricks.sliding_window_view(cnt, kernel, axis=tuple(range(2, 2 + nsp)))
        sl = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
        view, cview = view[sl], cview[sl]
        red = tuple(range(-nsp, 0))
        if kind == "max":
            return (view.max(axis=red).astype(xs[0].dtype),)
        total = view.sum(axis=red)
        count = cview.sum(axis=red)
        return ((total / count).astype(xs[0].dtype),)

    return ref


DEFS = [
    OpDef(
        Op.CONV2D,
        _conv2d_infer,
        _conv2d_ref,
        (2, 3),
        _conv2d_dec,
        onnx="Conv",
        attrs=("strides", "pads", "dilations", "groups"),
        kind=OpKind.CONTRACTION,
    ),
    OpDef(
        Op.MAX_POOL2D,
        _pool_infer,
        _pool_ref("max"),
        (1, 1),
        _max_pool_dec,
        onnx="MaxPool",
        attrs=("kernel", "strides", "pads", "ceil_mode"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.AVG_POOL2D,
        _pool_infer,
        _pool_ref("avg"),
        (1, 1),
        _avg_pool_dec,
        onnx="AveragePool",
        attrs=("kernel", "strides", "pads", "count_include_pad", "ceil_mode"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.BATCH_NORM,
        _batch_norm_infer,
        _batch_norm_ref,
        (3, 5),
        _batch_norm_dec,
        onnx="BatchNormalization",
        attrs=("eps",),
        kind=OpKind.POINTWISE,
    ),
]
