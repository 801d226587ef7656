"""ATen neural-network ops aotc keeps whole -> aotc's high-level ops: linear and matmuls, embedding, layer/RMS/batch
norm, convolution (1-D as 2-D, 3-D; transposed 1-D and 2-D), pooling (2-D, 3-D), upsampling, grid sampling and
scaled-dot-product attention."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aotc.frontend import functional as F
from aotc.frontend import functions as T
from aotc.frontend import layout
from aotc.frontend import volume as V
from aotc.frontend.context import trace_error
from aotc.frontend.conv_transpose import conv_transpose as conv_transpose_nd
from aotc.frontend.grid_sample import MODES as GRID_MODES
from aotc.frontend.grid_sample import PADDINGS as GRID_PADDINGS
from aotc.frontend.grid_sample import grid_sample
from aotc.frontend.resample import resample
from aotc.frontend.tensor import Tensor

Cx = Any


def linear(cx: Cx, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    return F.linear(x, weight, bias)


def addmm(cx: Cx, bias: Tensor, a: Tensor, b: Tensor, beta: Any = 1, alpha: Any = 1) -> Tensor:
    y = T.matmul(a, b)
    if alpha != 1:
        y = y * alpha
    return y + (bias if beta == 1 else bias * beta)


def matmul(cx: Cx, a: Tensor, b: Tensor) -> Tensor:
    return T.matmul(a, b)


def baddbmm(cx: Cx, x: Tensor, a: Tensor, b: Tensor, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return addmm(cx, x, a, b, beta, alpha)


def embedding(cx: Cx, weight: Tensor, indices: Tensor, *rest: Any) -> Tensor:
    return F.embedding(indices, weight)


def layer_norm(cx: Cx, x: Tensor, shape: Sequence[int], weight: Any = None, bias: Any = None, eps: float = 1e-5, *_):
    return F.layer_norm(x, list(shape), weight, bias, eps)


def native_layer_norm(cx: Cx, x: Tensor, shape: Sequence[int], weight: Any, bias: Any, eps: float) -> tuple:
    return F.layer_norm(x, list(shape), weight, bias, eps), None, None


def rms_norm(cx: Cx, x: Tensor, shape: Sequence[int], weight: Any = None, eps: float | None = None) -> Tensor:
    return F.rms_norm(x, list(shape), weight, eps)


def batch_norm(
    cx: Cx, x: Tensor, weight: Any, bias: Any, mean: Any, var: Any, training: bool, momentum: float, eps: float, *_
) -> Tensor:
    return F.batch_norm(x, mean, var, weight, bias, training, momentum, eps)


def batch_norm_no_training(
    cx: Cx, x: Tensor, weight: Any, bias: Any, mean: Tensor, var: Tensor, momentum: float, eps: float
) -> tuple:
    return F.batch_norm(x, mean, var, weight, bias, False, momentum, eps), None, None


def batch_norm_batch_stats(cx: Cx, x: Tensor, weight: Any, bias: Any, training: bool, momentum: float, eps: float):
    """``_native_batch_norm_legit.no_stats``: batch norm without running statistics normalizes by the input's own
    mean and biased variance per channel (dim 1). Models call it on their weights (BiT's weight standardization),
    so it is a computation of the model, not training."""
    if not training:
        raise trace_error("batch_norm without running statistics needs training=True (it normalizes by the batch's)")
    if x.ndim < 2:
        raise trace_error(f"batch_norm needs an (N, C, ...) input, got rank {x.ndim}")
    over = (0, *range(2, x.ndim))
    mean = x.mean(over, keepdim=True)
    var = ((x - mean) * (x - mean)).mean(over, keepdim=True)
    y = (x - mean) * (var + eps).rsqrt()
    affine = [-1] + [1] * (x.ndim - 2)
    if weight is not None:
        y = y * layout.reshape(weight, (affine,))
    if bias is not None:
        y = y + layout.reshape(bias, (affine,))
    return y, None, None


def group_norm(cx: Cx, x: Tensor, groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5, *_) -> Tensor:
    shape = list(x.shape)
    g = layout.reshape(x, ([shape[0], groups, -1],))
    mean = g.mean(-1, keepdim=True)
    var = ((g - mean) * (g - mean)).mean(-1, keepdim=True)
    y = layout.reshape((g - mean) * (var + eps).rsqrt(), (shape,))
    affine = [1] * (x.ndim - 2)
    if weight is not None:
        y = y * layout.reshape(weight, ([-1, *affine],))
    if bias is not None:
        y = y + layout.reshape(bias, ([-1, *affine],))
    return y


# -- convolution and pooling ---------------------------------------------------------------------------------


def _ints(v: Sequence[Any], n: int, what: str) -> tuple[int, ...]:
    vals = tuple(v) if len(v) == n else tuple(v) * n if len(v) == 1 else None
    if vals is None or any(not isinstance(a, int) for a in vals):
        raise trace_error(f"convolution {what} must be {n} ints, got {list(v)}")
    return vals


def convolution(
    cx: Cx,
    x: Tensor,
    weight: Tensor,
    bias: Any,
    stride: Sequence[int],
    padding: Any,
    dilation: Sequence[int],
    transposed: bool = False,
    output_padding: Sequence[int] = (),
    groups: int = 1,
) -> Tensor:
    nsp = weight.ndim - 2
    if transposed:
        if nsp not in (1, 2):
            raise trace_error(f"{nsp}-D transposed convolution is not supported (1-D and 2-D are)")
        return conv_transpose_nd(x, weight, bias, stride, padding, output_padding, groups, dilation, nsp)
    if nsp == 2:
        pad = padding if isinstance(padding, str) else _ints(padding, 2, "padding")
        return F.conv2d(x, weight, bias, _ints(stride, 2, "stride"), pad, _ints(dilation, 2, "dilation"), groups)
    if nsp == 3:
        pad = padding if isinstance(padding, str) else _ints(padding, 3, "padding")
        return V.conv3d(x, weight, bias, _ints(stride, 3, "stride"), pad, _ints(dilation, 3, "dilation"), groups)
    if nsp != 1:
        raise trace_error(f"{nsp}-D convolution is not supported (1-D, 2-D and 3-D are)")
    # 1-D as 2-D over a height of one: (N, C, L) -> (N, C, 1, L)
    batched = x.ndim == 3
    x4 = layout.unsqueeze(x if batched else layout.unsqueeze(x, 0), 2)
    w4 = layout.unsqueeze(weight, 2)
    pad = padding if isinstance(padding, str) else (0, _ints(padding, 1, "padding")[0])
    y = F.conv2d(x4, w4, bias, (1, _ints(stride, 1, "stride")[0]), pad, (1, _ints(dilation, 1, "dilation")[0]), groups)
    y = layout.squeeze(y, 2)
    return y if batched else layout.squeeze(y, 0)


def conv(n: int) -> Any:
    def fn(cx: Cx, x: Tensor, weight: Tensor, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1) -> Tensor:  # fmt: skip
        return convolution(cx, x, weight, bias, stride, padding, dilation, False, (), groups)

    return fn


def conv_transpose(n: int) -> Any:
    def fn(cx: Cx, x: Tensor, weight: Tensor, bias: Any = None, stride: Any = 1, padding: Any = 0,
           output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:  # fmt: skip
        return convolution(cx, x, weight, bias, stride, padding, dilation, True, output_padding, groups)

    return fn


def max_pool2d(
    cx: Cx, x: Tensor, kernel: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False
) -> Tensor:
    return F.max_pool2d(x, list(kernel), list(stride) or None, _pair(padding), _pair(dilation), ceil_mode)


def max_pool2d_with_indices(cx: Cx, *args: Any) -> tuple[Tensor, None]:
    return max_pool2d(cx, *args), None


def _pair(v: Any) -> Any:
    return list(v) if isinstance(v, (list, tuple)) and len(v) == 2 else v[0] if isinstance(v, (list, tuple)) else v


def avg_pool2d(
    cx: Cx,
    x: Tensor,
    kernel: Any,
    stride: Any = (),
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Any = None,
) -> Tensor:
    return F.avg_pool2d(
        x, list(kernel), list(stride) or None, _pair(padding), ceil_mode, count_include_pad, divisor_override
    )


def adaptive_avg_pool2d(cx: Cx, x: Tensor, output_size: Sequence[Any]) -> Tensor:
    """Global pooling (output 1x1) as a mean; other sizes as avg_pool2d when the input divides evenly, else (static
    sizes) as two matmuls with torch's bins as averaging matrices (VGG and AlexNet pool a 64x64 image's 2x2 or 1x1
    features to 7x7 or 6x6: overlapping or repeated bins no strided window gives)."""
    oh, ow = tuple(output_size)
    if oh == 1 and ow == 1:
        return x.mean((-2, -1), keepdim=True)
    h, w = x.shape[-2], x.shape[-1]
    if not all(isinstance(d, int) for d in (h, w, oh, ow)):
        raise trace_error(f"adaptive_avg_pool2d to {oh}x{ow} needs static input sizes, got {h}x{w}")
    if h % oh == 0 and w % ow == 0:
        return F.avg_pool2d(x, [h // oh, w // ow], [h // oh, w // ow], 0)
    dtype = x.dtype.np
    rows = (x @ V.adaptive_bins(w, ow).T.astype(dtype)).transpose(-1, -2)  # (..., ow, h)
    return (rows @ V.adaptive_bins(h, oh).T.astype(dtype)).transpose(-1, -2)


def max_pool3d(
    cx: Cx, x: Tensor, kernel: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False
) -> Tensor:
    return V.max_pool3d(x, kernel, list(stride) or None, padding, dilation, ceil_mode)


def max_pool3d_with_indices(cx: Cx, *args: Any) -> tuple[Tensor, None]:
    return max_pool3d(cx, *args), None


def avg_pool3d(
    cx: Cx,
    x: Tensor,
    kernel: Any,
    stride: Any = (),
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Any = None,
) -> Tensor:
    return V.avg_pool3d(x, kernel, list(stride) or None, padding, ceil_mode, count_include_pad, divisor_override)


def adaptive_avg_pool3d(cx: Cx, x: Tensor, output_size: Sequence[Any]) -> Tensor:
    return V.adaptive_avg_pool3d(x, list(output_size))


# -- upsampling ------------------------------------------------------------------------------------------------


def upsample(mode: str, linear: bool, vec: bool) -> Any:
    """``aten.upsample_<mode>.vec`` (input, output_size?, [align_corners], scale_factors?) or ``.default``
    (input, output_size, [align_corners], scales per spatial dim...)."""
    what = f"upsample_{mode}"

    def fn(cx: Cx, x: Tensor, output_size: Any, *rest: Any) -> Tensor:
        align = bool(rest[0]) if linear else False
        rest = rest[1:] if linear else rest
        if vec:
            scales = None if rest[0] is None else list(rest[0])
            sizes = None if output_size is None else list(output_size)
            return resample(x, sizes, None if sizes is not None else scales, _MODES[mode], align, what)
        scales = list(rest) if any(r is not None for r in rest) else None
        return resample(x, list(output_size), scales, _MODES[mode], align, what)

    return fn


_MODES = {
    "nearest1d": "nearest",
    "nearest2d": "nearest",
    "linear1d": "linear",
    "bilinear2d": "bilinear",
    "bicubic2d": "bicubic",
}


def grid_sampler_2d(
    cx: Cx, x: Tensor, grid: Tensor, interpolation_mode: int = 0, padding_mode: int = 0, align_corners: bool = False
) -> Tensor:
    """``aten.grid_sampler_2d`` (F.grid_sample on 4-D inputs): the modes and paddings come as aten's ints."""
    for what, v, names in (("interpolation_mode", interpolation_mode, GRID_MODES),
                           ("padding_mode", padding_mode, GRID_PADDINGS)):  # fmt: skip
        if not isinstance(v, int) or not 0 <= v < len(names):
            want = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
            raise trace_error(f"grid_sampler_2d {what} must be one of {want}, got {v!r}")
    return grid_sample(x, grid, GRID_MODES[interpolation_mode], GRID_PADDINGS[padding_mode], bool(align_corners))


# -- attention ------------------------------------------------------------------------------------------------


def sdpa(
    cx: Cx,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    if dropout_p:
        raise trace_error("scaled_dot_product_attention with dropout_p > 0 trains; pass dropout_p=0 for inference")
    if scale is None and not isinstance(q.shape[-1], int):
        raise trace_error("scaled_dot_product_attention with a dynamic head dim needs an explicit scale")
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    return F.scaled_dot_product_attention(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa)


def sdpa_flash_cpu(cx: Cx, q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0, is_causal: bool = False,
                   attn_mask: Any = None, scale: float | None = None) -> tuple:  # fmt: skip
    return sdpa(cx, q, k, v, attn_mask, dropout_p, is_causal, scale), None
