"""Transposed convolution as primitives, shared by ``F.conv_transpose1d/2d`` (and so the torch importer) and the
ONNX importer's ConvTranspose: zeros inserted between the input's elements (the stride), padded by the kernel's
span less the padding (cropped where the padding is larger), then a stride-1 convolution with the kernel flipped
and its in/out channels swapped per group. One lowering, so both importers agree to the bit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aotc.frontend import layout
from aotc.frontend.context import trace_error
from aotc.frontend.elementwise import as_tensor, tracer_of, value_of, wrap
from aotc.frontend.tensor import Tensor
from aotc.ir.ops import Op
from aotc.ir.types import ShapeDim, Value

# ``b`` is anything with ``op(Op, *values, **attrs) -> Value``: an ``aotc.ir.builder.Builder`` (the ONNX
# importer) or the frontend's ``Tracer`` (which also records each node's source line).
B = Any


def _reshape(b: B, x: Value, shape: Sequence[ShapeDim]) -> Value:
    return x if tuple(shape) == x.type.shape else b.op(Op.RESHAPE, x, shape=tuple(shape))


def _dilate(b: B, x: Value, axis: int, s: int) -> Value:
    """``s - 1`` zeros between the elements along ``axis``: (d,) -> ((d - 1) * s + 1,)."""
    if s == 1:
        return x
    shape = x.type.shape
    d = shape[axis]
    y = _reshape(b, x, shape[: axis + 1] + (1,) + shape[axis + 1 :])
    pads = [0] * 2 * y.type.rank
    pads[2 * (axis + 1) + 1] = s - 1
    y = b.op(Op.PAD, y, pads=tuple(pads), value=0.0)
    y = _reshape(b, y, shape[:axis] + (d * s,) + shape[axis + 1 :])
    stops = tuple((d - 1) * s + 1 if i == axis else n for i, n in enumerate(y.type.shape))
    return b.op(Op.SLICE, y, starts=(0,) * y.type.rank, stops=stops, steps=(1,) * y.type.rank)


def _pad_or_crop(b: B, x: Value, edges: Sequence[int]) -> Value:
    """(before, after) per spatial axis: positive amounts pad with zeros, negative ones crop."""
    nsp = len(edges) // 2
    crop = [max(-e, 0) for e in edges]
    if any(crop):
        shape = x.type.shape
        starts = (0, 0) + tuple(crop[2 * i] for i in range(nsp))
        stops = tuple(shape[:2]) + tuple(shape[2 + i] - crop[2 * i + 1] for i in range(nsp))
        x = b.op(Op.SLICE, x, starts=starts, stops=stops, steps=(1,) * x.type.rank)
    pads = [max(e, 0) for e in edges]
    if not any(pads):
        return x
    return b.op(Op.PAD, x, pads=(0, 0, 0, 0, *pads), value=0.0)


def conv_transpose_value(
    b: B,
    x: Value,
    w: Value,
    bias: Value | None,
    strides: Sequence[int],
    pads_lo: Sequence[int],
    pads_hi: Sequence[int],
    dilations: Sequence[int],
    output_padding: Sequence[int],
    groups: int,
) -> Value:
    """y of ``x`` (N, C_in, *spatial) with ``w`` (C_in, C_out / groups, *kernel): every spatial length becomes
    ``(d - 1) * stride - lo - hi + dilation * (k - 1) + output_padding + 1``, as torch and ONNX define it."""
    nsp = x.type.rank - 2
    kernel = w.type.shape[2:]
    cin, cout_g = w.type.shape[:2]
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    y = x
    for i in range(nsp):
        y = _dilate(b, y, 2 + i, strides[i])
    edges: list[int] = []
    for i in range(nsp):
        edges += [spans[i] - 1 - pads_lo[i], spans[i] - 1 - pads_hi[i] + output_padding[i]]
    y = _pad_or_crop(b, y, edges)
    wg = _reshape(b, w, (groups, cin // groups, cout_g, *kernel))
    wt = b.op(Op.PERMUTE, wg, perm=(0, 2, 1, *range(3, 3 + nsp)))
    wt = _reshape(b, wt, (groups * cout_g, cin // groups, *kernel))
    wt = b.op(Op.FLIP, wt, axes=tuple(range(2, 2 + nsp)))
    attrs = {"strides": (1,) * nsp, "pads": (0,) * 2 * nsp, "dilations": tuple(dilations), "groups": groups}
    y = b.op(Op.CONV, y, wt, **attrs)
    if bias is not None:
        y = b.op(Op.ADD, y, _reshape(b, bias, (bias.type.shape[0],) + (1,) * nsp))
    return y


# -- torch.nn.functional's conv_transpose1d / conv_transpose2d --------------------------------------------------


def _ints(v: Any, n: int, what: str) -> tuple[int, ...]:
    vals = (v,) * n if isinstance(v, int) else tuple(v) * n if len(v) == 1 else tuple(v)
    if len(vals) != n or any(isinstance(a, bool) or not isinstance(a, int) for a in vals):
        raise trace_error(f"{what} must be an int or {n} ints, got {v!r}")
    return vals


def conv_transpose(
    x: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    output_padding: Any,
    groups: int,
    dilation: Any,
    nsp: int,
) -> Tensor:
    """torch's ``conv_transpose{nsp}d``: input (N, C_in, *spatial) or unbatched (C_in, *spatial), weight
    (C_in, C_out / groups, *kernel)."""
    what = f"conv_transpose{nsp}d"
    tr = tracer_of(x, weight, bias)
    t = as_tensor(x, tr)
    w = as_tensor(weight, tr)
    if t.ndim not in (nsp + 1, nsp + 2):
        raise trace_error(f"{what} needs an input of rank {nsp + 2} (batched) or {nsp + 1}, got rank {t.ndim}")
    if w.ndim != nsp + 2 or not all(isinstance(d, int) for d in w.shape):
        raise trace_error(f"{what} weight must be a static (in, out/groups, *kernel) of rank {nsp + 2}, got {w.shape}")
    if isinstance(padding, str):
        raise trace_error(f"{what} padding must be ints (torch has no padding={padding!r} for it)")
    strides, pads = _ints(stride, nsp, f"{what} stride"), _ints(padding, nsp, f"{what} padding")
    out_pad, dil = _ints(output_padding, nsp, f"{what} output_padding"), _ints(dilation, nsp, f"{what} dilation")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 or w.shape[0] % groups:
        raise trace_error(
            f"{what} groups must be a positive int dividing the {w.shape[0]} input channels, got {groups!r}"
        )
    if any(s < 1 for s in strides) or any(d < 1 for d in dil) or any(p < 0 for p in pads):
        raise trace_error(f"{what} needs stride and dilation >= 1 and padding >= 0, got {strides}, {dil}, {pads}")
    if any(op < 0 or op >= max(s, d) for op, s, d in zip(out_pad, strides, dil)):
        raise trace_error(f"{what} output_padding {out_pad} must be >= 0 and smaller than the stride or dilation")
    unbatched = t.ndim == nsp + 1
    if unbatched:
        t = layout.unsqueeze(t, 0)
    tr.require(t._v().type.shape[1], "==", w.shape[0], f"{what}: input channels differ from the weight's {w.shape[0]}")
    b_v = None if bias is None else value_of(as_tensor(bias, tr), t.dtype, tr)
    y = conv_transpose_value(tr, t._v(), value_of(w, t.dtype, tr), b_v, strides, pads, pads, dil, out_pad, groups)
    out = wrap(y, tr)
    return layout.squeeze(out, 0) if unbatched else out


def conv_transpose1d(
    x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
    groups: int = 1, dilation: Any = 1,
) -> Tensor:  # fmt: skip
    return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 1)


def conv_transpose2d(
    x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
    groups: int = 1, dilation: Any = 1,
) -> Tensor:  # fmt: skip
    return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 2)
