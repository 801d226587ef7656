"""Grid sampling as gathers and pointwise math: torch's ``F.grid_sample`` / ``aten.grid_sampler_2d`` over an input
(N, C, H_in, W_in) and a grid (N, H_out, W_out, 2) of (x, y) points in [-1, 1], static or dynamic sizes.

The coordinate rules are those of torch's CPU kernel (aten/src/ATen/native/cpu/GridSamplerKernel.cpp), which
eager torch runs: a grid value ``g`` maps to ``(g + 1) * (size - 1) / 2`` with align_corners, else to
``(g + 1) * size / 2 - 0.5``; padding 'border' clamps that into ``[0, size - 1]``, 'reflection' folds it back
into the input first; a tap outside the input reads 0. Each tap is one GATHER of whole channel rows: the input
laid out (N * H_in * W_in, C), the row ``(n * H_in + y) * W_in + x`` per output point, its coordinates zeroed where
the tap is outside (so every id read is valid) and its value masked to 0 there."""

from __future__ import annotations

from typing import Any

from aotc.errors import ShapeError
from aotc.frontend.context import trace_error
from aotc.frontend.elementwise import as_tensor, wrap
from aotc.frontend.resample import cubic_weights
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.types import ShapeDim, Value

B = Any  # an ``aotc.ir.builder.Builder`` or the frontend's ``Tracer`` (``op``, ``full``, ``cast``)
F32, I64 = DType.float32, DType.int64
# aten's interpolation_mode and padding_mode ints index these
MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")


class _Sampler:
    """What every tap of one grid_sample reads: the input's channel rows, the first row id of each output point's
    batch, and the input's height and width (ints or symbols)."""

    def __init__(self, b: B, x: Value, padding: str, align: bool) -> None:
        n, c, h, w = x.type.shape
        self.b, self.padding, self.align = b, padding, align
        self.h, self.w = h, w
        xf = b.cast(x, F32)
        self.rows = b.op(Op.RESHAPE, b.op(Op.PERMUTE, xf, perm=(0, 2, 3, 1)), shape=(n * h * w, c))
        batch = b.op(Op.IOTA, shape=(n, 1, 1), axis=0, dtype=I64)
        self.first = b.op(Op.MUL, batch, b.full(h * w, I64))  # the row of (n, 0, 0)
        self.w_i = b.full(w, I64)

    def f(self, v: float | ShapeDim) -> Value:
        """A float32 scalar (a size as well: its value at run time)."""
        return self.b.full(v, F32)

    def unnormalize(self, g: Value, size: ShapeDim) -> Value:
        b = self.b
        scale = b.op(Op.MUL, self.f(size - 1 if self.align else size), self.f(0.5))
        s = b.op(Op.MUL, b.op(Op.ADD, g, self.f(1.0)), scale)
        return s if self.align else b.op(Op.SUB, s, self.f(0.5))

    def clip(self, s: Value, size: ShapeDim) -> Value:
        b = self.b
        return b.op(Op.MINIMUM, b.op(Op.MAXIMUM, s, self.f(0.0)), self.f(size - 1))

    def reflect(self, s: Value, size: ShapeDim) -> Value:
        """``s`` folded back into [0, size - 1] (align_corners) or [-0.5, size - 0.5] by mirroring at the ends; a
        size-1 input with align_corners has a span of 0, which the clip after this maps every point to 0 from."""
        b = self.b
        if self.align:
            twice_span = b.op(Op.MAXIMUM, self.f(2 * (size - 1)), self.f(1.0))
            a = b.op(Op.ABS, s)
        else:
            twice_span = self.f(2 * size)
            a = b.op(Op.ABS, b.op(Op.ADD, s, self.f(0.5)))
        extra = b.op(Op.FMOD, a, twice_span)
        r = b.op(Op.MINIMUM, extra, b.op(Op.SUB, twice_span, extra))
        return r if self.align else b.op(Op.SUB, r, self.f(0.5))

    def source(self, s: Value, size: ShapeDim) -> Value:
        """An unnormalized coordinate under the padding mode ('zeros' leaves it, outside points read 0)."""
        if self.padding == "border":
            return self.clip(s, size)
        if self.padding == "reflection":
            return self.clip(self.reflect(s, size), size)
        return s

    def tap(self, cx: Value, cy: Value) -> Value:
        """The input at the integral points (cx, cy) (float32, (N, H_out, W_out)) as (N, H_out, W_out, C); 0 where a
        point is outside the input (NaN included)."""
        b = self.b
        zero = self.f(0.0)

        def inside(v: Value, size: ShapeDim) -> Value:
            return b.op(Op.AND, b.op(Op.GE, v, zero), b.op(Op.LE, v, self.f(size - 1)))

        ok = b.op(Op.AND, inside(cx, self.w), inside(cy, self.h))
        ix = b.cast(b.op(Op.WHERE, ok, cx, zero), I64)
        iy = b.cast(b.op(Op.WHERE, ok, cy, zero), I64)
        row = b.op(Op.ADD, self.first, b.op(Op.ADD, b.op(Op.MUL, iy, self.w_i), ix))
        picked = b.op(Op.GATHER, self.rows, row, axis=0)
        return b.op(Op.WHERE, self.channels(ok), picked, zero)

    def channels(self, v: Value) -> Value:
        """A (N, H_out, W_out) value shaped to broadcast over the channels of a tap."""
        return self.b.op(Op.RESHAPE, v, shape=(*v.type.shape, 1))

    def blend(self, taps: list[Value], weights: list[Value]) -> Value:
        """sum(tap * weight), in the order given (torch's)."""
        b = self.b
        y = None
        for t, wt in zip(taps, weights):
            term = b.op(Op.MUL, t, self.channels(wt))
            y = term if y is None else b.op(Op.ADD, y, term)
        return y


def grid_sample_value(b: B, x: Value, grid: Value, mode: str, padding: str, align_corners: bool) -> Value:
    """``F.grid_sample(x, grid, mode, padding, align_corners)`` built with ``b``; ShapeError on bad input."""
    if mode not in MODES:
        raise ShapeError(f"grid_sample mode must be one of {', '.join(MODES)}, got {mode!r}")
    if padding not in PADDINGS:
        raise ShapeError(f"grid_sample padding_mode must be one of {', '.join(PADDINGS)}, got {padding!r}")
    if x.type.rank != 4 or grid.type.rank != 4:
        raise ShapeError(
            f"grid_sample needs an input (N, C, H, W) and a grid (N, H_out, W_out, 2), got ranks "
            f"{x.type.rank} and {grid.type.rank} (5-D volumes are not supported)"
        )
    if grid.type.shape[3] != 2 or grid.type.shape[0] != x.type.shape[0]:
        raise ShapeError(
            f"grid_sample grid must be (N, H_out, W_out, 2) with the input's N = {x.type.shape[0]}, "
            f"got {grid.type.shape}"
        )
    if not (x.type.dtype.is_float and grid.type.dtype.is_float):
        raise ShapeError(
            f"grid_sample needs floating input and grid, got {x.type.dtype.value} and {grid.type.dtype.value}"
        )
    n, h_out, w_out = grid.type.shape[:3]
    g = b.cast(grid, F32)

    def coord(k: int) -> Value:
        one = b.op(Op.SLICE, g, starts=(0, 0, 0, k), stops=(n, h_out, w_out, k + 1), steps=(1, 1, 1, 1))
        return b.op(Op.RESHAPE, one, shape=(n, h_out, w_out))

    sm = _Sampler(b, x, padding, align_corners)
    sx, sy = sm.unnormalize(coord(0), sm.w), sm.unnormalize(coord(1), sm.h)
    one = sm.f(1.0)
    if mode == "nearest":  # round half to even, as nearbyint
        y = sm.tap(b.op(Op.ROUND, sm.source(sx, sm.w)), b.op(Op.ROUND, sm.source(sy, sm.h)))
    elif mode == "bilinear":
        sx, sy = sm.source(sx, sm.w), sm.source(sy, sm.h)
        x0, y0 = b.op(Op.FLOOR, sx), b.op(Op.FLOOR, sy)
        x1, y1 = b.op(Op.ADD, x0, one), b.op(Op.ADD, y0, one)
        tw, te = b.op(Op.SUB, sx, x0), b.op(Op.SUB, x1, sx)  # distances to the west and east taps
        tn, ts = b.op(Op.SUB, sy, y0), b.op(Op.SUB, y1, sy)
        weights = [b.op(Op.MUL, ts, te), b.op(Op.MUL, ts, tw), b.op(Op.MUL, tn, te), b.op(Op.MUL, tn, tw)]
        taps = [sm.tap(x0, y0), sm.tap(x1, y0), sm.tap(x0, y1), sm.tap(x1, y1)]
        y = sm.blend(taps, weights)
    else:  # bicubic: 4 x 4 taps around floor(s), each through the padding rule; along x first, then along y
        x0, y0 = b.op(Op.FLOOR, sx), b.op(Op.FLOOR, sy)
        wx = cubic_weights(b, b.op(Op.SUB, sx, x0))
        wy = cubic_weights(b, b.op(Op.SUB, sy, y0))
        xs = [sm.source(b.op(Op.ADD, x0, sm.f(float(i - 1))), sm.w) for i in range(4)]
        lines = []
        for j in range(4):
            yj = sm.source(b.op(Op.ADD, y0, sm.f(float(j - 1))), sm.h)
            lines.append(sm.blend([sm.tap(xi, yj) for xi in xs], wx))
        y = sm.blend(lines, wy)
    return b.cast(b.op(Op.PERMUTE, y, perm=(0, 3, 1, 2)), x.type.dtype)


def grid_sample(
    input: Any, grid: Any, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool | None = None
) -> Tensor:
    """``torch.nn.functional.grid_sample`` over 4-D inputs: modes bilinear, nearest and bicubic; padding zeros,
    border and reflection; align_corners None means False, as in torch."""
    t = as_tensor(input)
    tr = t._t()
    g = as_tensor(grid, tr)
    try:
        return wrap(grid_sample_value(tr, t._v(), g._v(), mode, padding_mode, bool(align_corners)), tr)
    except ShapeError as e:
        raise trace_error(str(e)) from None
