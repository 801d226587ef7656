"""Nearest, (bi)linear and bicubic resampling as gathers and pointwise math, over static or dynamic spatial dims: torch's
``F.interpolate`` / ``aten.upsample_nearest*d`` / ``aten.upsample_(bi)linear*d`` / ``aten.upsample_bicubic2d``, and the ONNX importer's Resize of
a dynamic dim. Each resized axis is one step: source coordinates from an iota over the output length (float32,
as torch's CPU kernels compute them), then a gather (nearest) or two gathers blended by the fractional part
(linear). Separable, so a 2-D resize is the width step then the height step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from aotc.errors import ShapeError
from aotc.frontend.context import trace_error
from aotc.frontend.elementwise import as_tensor, wrap
from aotc.frontend.symint import as_dim
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.symbolic import floordiv
from aotc.ir.types import ShapeDim, Value

# ``b``: an ``aotc.ir.builder.Builder`` (the ONNX importer) or the frontend's ``Tracer``; both have ``op``,
# ``full`` and ``cast``.
B = Any
F32, I64 = DType.float32, DType.int64
MODES = ("nearest", "linear", "cubic")
CUBIC_A = -0.75  # torch's bicubic coefficient


def scaled_length(n_in: ShapeDim, scale: float, what: str) -> ShapeDim:
    """``floor(n_in * scale)``, torch's output length for a scale factor: exact over a dynamic dim when the
    scale is a fraction with a small denominator (2, 0.5, 1.5, ...)."""
    if isinstance(n_in, int):
        return math.floor(n_in * scale)
    f = Fraction(scale)
    if f <= 0 or f.denominator > 64:
        raise ShapeError(
            f"{what}: scale_factor {scale} over the dynamic dim {n_in} has no exact output length; "
            "give the output size instead"
        )
    return floordiv(n_in * f.numerator, f.denominator)


def _ratio(b: B, n_in: ShapeDim, n_out: ShapeDim, scale: float | None) -> Value:
    """torch's compute_scales_value, in float32: 1/scale when a scale was given, else in/out."""
    if scale is not None and scale > 0:
        return b.full(float(1.0 / scale), F32)
    if isinstance(n_in, int) and isinstance(n_out, int):
        return b.full(float(n_in) / n_out if n_out else 0.0, F32)
    return b.op(Op.DIV, b.full(n_in, F32), b.full(n_out, F32))


def _along(b: B, v: Value, rank: int, axis: int) -> Value:
    """A (n,) vector shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    shape = tuple(v.type.shape[0] if i == axis else 1 for i in range(rank))
    return b.op(Op.RESHAPE, v, shape=shape)


def resample_axis(
    b: B, x: Value, axis: int, n_out: ShapeDim, mode: str, align_corners: bool, scale: float | None
) -> Value:
    """``x`` resized along ``axis`` to ``n_out`` (mode 'nearest' or 'linear'), with torch's coordinate rules:
    nearest takes ``min(floor(i * s), n_in - 1)``; linear samples at ``i * (n_in - 1) / (n_out - 1)`` with
    align_corners, else at ``max((i + 0.5) * s - 0.5, 0)``, s being 1/scale when a scale was given, else
    n_in / n_out."""
    n_in = x.type.shape[axis]
    i = b.cast(b.op(Op.IOTA, shape=(n_out,), axis=0, dtype=I64), F32)
    last = b.full(n_in - 1, I64)
    if mode == "nearest":
        src = b.op(Op.FLOOR, b.op(Op.MUL, i, _ratio(b, n_in, n_out, scale)))
        idx = b.op(Op.MINIMUM, b.cast(src, I64), last)
        return b.op(Op.GATHER, x, idx, axis=axis)
    if mode not in MODES:
        raise ShapeError(f"resampling mode {mode!r} is not supported ({', '.join(MODES)} are)")
    if align_corners:
        if isinstance(n_out, int) and n_out <= 1:
            step = b.full(0.0, F32)
        else:
            step = b.op(Op.DIV, b.full(n_in - 1, F32), b.full(n_out - 1, F32))
        src = b.op(Op.MUL, i, step)
    else:
        half = b.full(0.5, F32)
        src = b.op(Op.SUB, b.op(Op.MUL, b.op(Op.ADD, i, half), _ratio(b, n_in, n_out, scale)), half)
        if mode == "linear":  # torch clamps a linear source coordinate at 0, a cubic one not
            src = b.op(Op.MAXIMUM, src, b.full(0.0, F32))
    if mode == "cubic":
        return _cubic(b, x, axis, src, last)
    lo_f = b.op(Op.FLOOR, src)
    lo = b.op(Op.MINIMUM, b.cast(lo_f, I64), last)
    hi = b.op(Op.MINIMUM, b.op(Op.ADD, lo, b.full(1, I64)), last)
    frac = b.op(Op.MINIMUM, b.op(Op.MAXIMUM, b.op(Op.SUB, src, lo_f), b.full(0.0, F32)), b.full(1.0, F32))
    xf = b.cast(x, F32) if x.type.dtype is not F32 else x
    rank = x.type.rank
    w1 = _along(b, frac, rank, axis)
    w0 = b.op(Op.SUB, b.full(1.0, F32), w1)
    y0 = b.op(Op.GATHER, xf, lo, axis=axis)
    y1 = b.op(Op.GATHER, xf, hi, axis=axis)
    y = b.op(Op.ADD, b.op(Op.MUL, y0, w0), b.op(Op.MUL, y1, w1))
    return b.cast(y, x.type.dtype)


def cubic_weights(b: B, t: Value) -> list[Value]:
    """The four weights of torch's cubic convolution kernel (A = -0.75) for the taps floor(src) - 1 .. floor(src) + 2,
    at the distance ``t = src - floor(src)`` (float32); bicubic resampling and grid sampling share them."""
    one = b.full(1.0, F32)

    def c(v: float) -> Value:
        return b.full(v, F32)

    def near(d: Value) -> Value:  # |d| <= 1: ((A + 2) d - (A + 3)) d^2 + 1
        inner = b.op(Op.SUB, b.op(Op.MUL, c(CUBIC_A + 2), d), c(CUBIC_A + 3))
        return b.op(Op.ADD, b.op(Op.MUL, b.op(Op.MUL, inner, d), d), one)

    def far(d: Value) -> Value:  # 1 < |d| < 2: ((A d - 5A) d + 8A) d - 4A
        inner = b.op(Op.ADD, b.op(Op.MUL, b.op(Op.SUB, b.op(Op.MUL, c(CUBIC_A), d), c(5 * CUBIC_A)), d), c(8 * CUBIC_A))
        return b.op(Op.SUB, b.op(Op.MUL, inner, d), c(4 * CUBIC_A))

    u = b.op(Op.SUB, one, t)
    return [far(b.op(Op.ADD, t, one)), near(t), near(u), far(b.op(Op.ADD, u, one))]


def _cubic(b: B, x: Value, axis: int, src: Value, last: Value) -> Value:
    """torch's bicubic step: the four taps floor(src) - 1 .. floor(src) + 2, each clamped into the input, weighted
    by the cubic convolution kernel at the distance t = src - floor(src)."""
    base_f = b.op(Op.FLOOR, src)
    weights = cubic_weights(b, b.op(Op.SUB, src, base_f))
    base = b.cast(base_f, I64)
    xf = b.cast(x, F32) if x.type.dtype is not F32 else x
    rank = x.type.rank
    zero = b.full(0, I64)
    y = None
    for k, w in enumerate(weights):
        idx = b.op(Op.MINIMUM, b.op(Op.MAXIMUM, b.op(Op.ADD, base, b.full(k - 1, I64)), zero), last)
        term = b.op(Op.MUL, b.op(Op.GATHER, xf, idx, axis=axis), _along(b, w, rank, axis))
        y = term if y is None else b.op(Op.ADD, y, term)
    return b.cast(y, x.type.dtype)


# -- torch.nn.functional.interpolate ------------------------------------------------------------------------

_TORCH_MODES = {
    "nearest": "nearest",
    "linear": "linear",
    "bilinear": "linear",
    "trilinear": "linear",
    "bicubic": "cubic",
}
_RANKS = {"linear": 3, "bilinear": 4, "trilinear": 5, "bicubic": 4}


def resample(
    x: Any,
    sizes: Sequence[Any] | None,
    scales: Sequence[float | None] | None,
    mode: str,
    align_corners: bool | None,
    what: str,
) -> Tensor:
    """``x`` (N, C, *spatial) resized to ``sizes`` (output lengths; None: from ``scales``), with ``scales`` the
    scale factors torch's kernels map coordinates by (None: in/out)."""
    t = as_tensor(x)
    nsp = t.ndim - 2
    if nsp < 1:
        raise trace_error(f"{what} needs an input (N, C, *spatial), got rank {t.ndim}")
    if mode not in _TORCH_MODES or (mode in _RANKS and t.ndim != _RANKS[mode]):
        want = f"a rank-{_RANKS[mode]} input" if mode in _RANKS else f"mode in {sorted(_TORCH_MODES)}"
        raise trace_error(f"{what} mode {mode!r} is not supported here (needs {want})")
    if mode == "nearest" and align_corners:
        raise trace_error(f"{what}: align_corners only applies to the linear modes, not {mode!r}")
    scales = list(scales) if scales is not None else [None] * nsp
    if len(scales) != nsp:
        raise trace_error(f"{what} needs {nsp} scale factors, got {len(scales)}")
    src = t._v().type.shape
    tr = t._t()
    try:
        if sizes is None:
            if any(s is None for s in scales):
                raise trace_error(f"{what} needs an output size or a scale factor per spatial dim")
            out = [scaled_length(src[2 + i], float(s), what) for i, s in enumerate(scales)]
        else:
            out = [as_dim(s) for s in sizes]
            if len(out) != nsp or any(d is None for d in out):
                raise trace_error(f"{what} output size must be {nsp} sizes, got {list(sizes)}")
        y = t._v()
        for i in reversed(range(nsp)):  # the last axis first, as torch's separable kernels blend
            if out[i] == src[2 + i] and scales[i] in (None, 1.0):
                continue  # identity: every source coordinate is its own index
            scale = None if scales[i] is None else float(scales[i])
            y = resample_axis(tr, y, 2 + i, out[i], _TORCH_MODES[mode], bool(align_corners), scale)
    except ShapeError as e:
        raise trace_error(str(e)) from None
    return wrap(y, tr)


def interpolate(
    x: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """``torch.nn.functional.interpolate`` for modes nearest, linear, bilinear, bicubic and trilinear."""
    t = as_tensor(x)
    nsp = t.ndim - 2
    if antialias:
        raise trace_error("interpolate with antialias=True is not supported")
    if (size is None) == (scale_factor is None):
        raise trace_error("interpolate needs exactly one of size and scale_factor")
    if size is not None:
        sizes = list(size) if isinstance(size, (list, tuple)) else [size] * nsp
        return resample(t, sizes, None, mode, align_corners, "interpolate")
    factors = list(scale_factor) if isinstance(scale_factor, (list, tuple)) else [scale_factor] * nsp
    if recompute_scale_factor:  # torch then maps coordinates by in/out of the computed size
        try:
            sizes = [scaled_length(t._v().type.shape[2 + i], float(f), "interpolate") for i, f in enumerate(factors)]
        except ShapeError as e:
            raise trace_error(str(e)) from None
        return resample(t, sizes, None, mode, align_corners, "interpolate")
    return resample(t, None, [float(f) for f in factors], mode, align_corners, "interpolate")
