"""``aotc.functional`` (import as ``F``): torch.nn.functional's inference subset, emitting high-level ops.

Differences from torch, all because aotc compiles inference graphs:
- ``dropout`` (any ``training``) and ``dropout_p`` of attention are the identity.
- ``rms_norm``'s ``eps=None`` means 1e-6 (torch uses the dtype's machine epsilon).
- ``batch_norm`` uses the running statistics; ``training=True`` is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aotc.frontend import layout
from aotc.frontend.context import Tracer, trace_error
from aotc.frontend.conv_transpose import conv_transpose1d, conv_transpose2d
from aotc.frontend.elementwise import as_tensor, tracer_of, unary, value_of, where, wrap
from aotc.frontend.functions import repeat_interleave
from aotc.frontend.grid_sample import grid_sample
from aotc.frontend.pooling import batched, whole_window
from aotc.frontend.resample import interpolate
from aotc.frontend.symint import as_dim
from aotc.frontend.tensor import Tensor
from aotc.frontend.volume import adaptive_avg_pool3d, avg_pool3d, conv3d, max_pool3d
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.types import Value

__all__ = [
    "adaptive_avg_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "batch_norm",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "dropout",
    "elu",
    "embedding",
    "gelu",
    "grid_sample",
    "hardtanh",
    "interpolate",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_softmax",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "normalize",
    "pad",
    "relu",
    "relu6",
    "rms_norm",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "tanh",
]

RMS_NORM_EPS = 1e-6


def _t(x: Any, tr: Tracer | None = None) -> Tensor:
    return as_tensor(x, tr or tracer_of(x))


def _param(p: Any, x: Tensor, tr: Tracer) -> Value:
    """A weight or bias in x's dtype (constants fold the cast away)."""
    return value_of(_t(p, tr), x.dtype, tr)


# -- activations ---------------------------------------------------------------------------------


def relu(x: Any, inplace: bool = False) -> Tensor:
    return unary(Op.RELU, x)


def gelu(x: Any, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise trace_error(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return unary(Op.GELU, x, approximate=approximate)


def silu(x: Any, inplace: bool = False) -> Tensor:
    return unary(Op.SILU, x)


def sigmoid(x: Any) -> Tensor:
    return unary(Op.SIGMOID, x)


def tanh(x: Any) -> Tensor:
    return unary(Op.TANH, x)


def softmax(x: Any, dim: int | None = None, dtype: Any = None) -> Tensor:
    if dim is None:
        raise trace_error("softmax needs an explicit dim")
    return _t(x).softmax(dim, dtype)


def log_softmax(x: Any, dim: int | None = None, dtype: Any = None) -> Tensor:
    if dim is None:
        raise trace_error("log_softmax needs an explicit dim")
    return _t(x).log_softmax(dim, dtype)


def leaky_relu(x: Any, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    t = _t(x)
    return where(t >= 0, t, t * negative_slope)


def elu(x: Any, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    t = _t(x)
    return where(t > 0, t, ((t.clamp(max=0.0)).exp() - 1.0) * alpha)


def softplus(x: Any, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    t = _t(x)
    bx = t * beta
    # log1p(exp(bx)) written stably: max(bx, 0) + log(1 + exp(-|bx|))
    soft = (bx.clamp(min=0.0) + ((-bx.abs()).exp() + 1.0).log()) / beta
    return where(bx > threshold, t, soft)


def hardtanh(x: Any, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    return _t(x).clamp(min_val, max_val)


def relu6(x: Any, inplace: bool = False) -> Tensor:
    return _t(x).clamp(0.0, 6.0)


def dropout(x: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    if not 0.0 <= p <= 1.0:
        raise trace_error(f"dropout probability must be in [0, 1], got {p}")
    return _t(x)


# -- linear, embedding, normalization ------------------------------------------------------------


def linear(x: Any, weight: Any, bias: Any = None) -> Tensor:
    tr = tracer_of(x, weight, bias)
    ins = [_t(x, tr)._v(), _t(weight, tr)._v()] + ([_t(bias, tr)._v()] if bias is not None else [])
    return wrap(tr.op(Op.LINEAR, *ins), tr)


def embedding(
    input: Any,
    weight: Any,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    if max_norm is not None:
        raise trace_error("embedding max_norm renormalizes the weight in place; it is not supported")
    tr = tracer_of(input, weight)
    idx = _t(input, tr)
    if not idx.dtype.is_int:
        raise trace_error(f"embedding indices must be int32 or int64, got {idx.dtype.value}")
    return wrap(tr.op(Op.EMBEDDING, _t(weight, tr)._v(), idx._v()), tr)


def _normalized(x: Tensor, normalized_shape: Any, what: str) -> tuple[int, ...]:
    shape = (normalized_shape,) if as_dim(normalized_shape) is not None else tuple(normalized_shape)
    n = len(shape)
    if not 1 <= n <= x.ndim:
        raise trace_error(f"{what}: normalized_shape {shape} does not fit an input of rank {x.ndim}")
    tr = x._t()
    for want, have in zip(shape, x._v().type.shape[-n:]):
        d = as_dim(want)
        if d is None:
            raise trace_error(f"{what}: normalized_shape entries must be ints, got {want!r}")
        tr.require(have, "==", d, f"{what}: input's last dims must be {shape}")
    return shape


def _norm(op: Op, x: Any, normalized_shape: Any, weight: Any, bias: Any, eps: float) -> Tensor:
    tr = tracer_of(x, weight, bias)
    t = _t(x, tr)
    shape = _normalized(t, normalized_shape, op.value)
    if bias is not None and weight is None:
        weight = _full_like_shape(tr, shape, t.dtype)
    ins = [t._v()] + [_param(p, t, tr) for p in (weight, bias) if p is not None]
    return wrap(tr.op(op, *ins, ndim=len(shape), eps=float(eps)), tr)


def _full_like_shape(tr: Tracer, shape: Sequence[Any], dtype: DType) -> Tensor:
    return wrap(tr.full(1.0, dtype, tuple(as_dim(d) for d in shape)), tr)


def layer_norm(x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    return _norm(Op.LAYER_NORM, x, normalized_shape, weight, bias, eps)


def rms_norm(x: Any, normalized_shape: Any, weight: Any = None, eps: float | None = None) -> Tensor:
    return _norm(Op.RMS_NORM, x, normalized_shape, weight, None, RMS_NORM_EPS if eps is None else eps)


def normalize(x: Any, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    t = _t(x)
    if p == 2:
        norm = (t * t).sum(dim, keepdim=True).sqrt()
    elif p == 1:
        norm = t.abs().sum(dim, keepdim=True)
    else:
        raise trace_error(f"normalize supports p=1 and p=2, got {p}")
    return t / norm.clamp(min=eps)


def batch_norm(
    x: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    if training:
        raise trace_error(
            "batch_norm with training=True uses batch statistics; aotc compiles inference (running stats)"
        )
    if running_mean is None or running_var is None:
        raise trace_error("batch_norm needs running_mean and running_var (track_running_stats=True)")
    tr = tracer_of(x, running_mean, running_var, weight, bias)
    t = _t(x, tr)
    if bias is not None and weight is None:
        c = t._v().type.shape[1] if t.ndim > 1 else 1
        weight = wrap(tr.full(1.0, t.dtype, (c,)), tr)
    params = [running_mean, running_var] + [p for p in (weight, bias) if p is not None]
    return wrap(tr.op(Op.BATCH_NORM, t._v(), *[_param(p, t, tr) for p in params], eps=float(eps)), tr)


# -- attention --------------------------------------------------------------------------------------


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(q k^T * scale + mask) v; a bool mask is True where attention is allowed."""
    if is_causal and attn_mask is not None:
        raise trace_error("scaled_dot_product_attention: pass attn_mask or is_causal, not both")
    tr = tracer_of(query, key, value, attn_mask)
    q, k, v = _t(query, tr), _t(key, tr), _t(value, tr)
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        groups = _gqa_groups(q, k)
        k = _repeat_heads(k, groups)
        v = _repeat_heads(v, groups)
    ins = [q._v(), k._v(), v._v()]
    if attn_mask is not None:
        m = _t(attn_mask, tr)
        ins.append(m._v() if m.dtype is DType.bool else value_of(m, q.dtype, tr))
    attrs: dict[str, Any] = {"is_causal": bool(is_causal)}
    if scale is not None:
        attrs["scale"] = float(scale)
    elif not isinstance(q._v().type.shape[-1], int):
        raise trace_error("scaled_dot_product_attention with a dynamic head dim needs an explicit scale")
    return wrap(tr.op(Op.SDPA, *ins, **attrs), tr)


def _gqa_groups(q: Tensor, k: Tensor) -> int:
    hq, hk = q._v().type.shape[-3], k._v().type.shape[-3]
    if not isinstance(hq, int) or not isinstance(hk, int) or hq % hk:
        raise trace_error(f"grouped-query attention needs query heads ({hq}) to be a multiple of key heads ({hk})")
    return hq // hk


def _repeat_heads(x: Tensor, groups: int) -> Tensor:
    return repeat_interleave(x, groups, -3)


# -- convolution and pooling ---------------------------------------------------------------------------


def _pair(v: Any, what: str) -> tuple[int, int]:
    vals = (v, v) if isinstance(v, int) and not isinstance(v, bool) else tuple(v)
    if len(vals) != 2 or any(isinstance(a, bool) or not isinstance(a, int) for a in vals):
        raise trace_error(f"{what} must be an int or a pair of ints, got {v!r}")
    return vals  # type: ignore[return-value]


def conv2d(
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    tr = tracer_of(x, weight, bias)
    t, unbatched = batched(_t(x, tr), 2, "conv2d")
    w = _t(weight, tr)
    if w.ndim != 4:
        raise trace_error(f"conv2d weight must be (out, in/groups, kh, kw), got rank {w.ndim}")
    strides, dil = _pair(stride, "conv2d stride"), _pair(dilation, "conv2d dilation")
    kernel = w._v().type.shape[2:]
    if isinstance(padding, str):
        if padding == "valid":
            pads = (0, 0, 0, 0)
        elif padding == "same":
            if strides != (1, 1):
                raise trace_error("conv2d padding='same' needs stride 1")
            pads = ()
            for k, d in zip(kernel, dil):
                total = d * (k - 1)
                pads += (total // 2, total - total // 2)  # the odd pixel goes last, as in torch
        else:
            raise trace_error(f"conv2d padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
    else:
        ph, pw = _pair(padding, "conv2d padding")
        pads = (ph, ph, pw, pw)
    if any(p < 0 for p in pads):
        raise trace_error(f"conv2d padding must be >= 0, got {padding!r}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise trace_error(f"conv2d groups must be a positive int, got {groups!r}")
    ins = [t._v(), w._v()] + ([_t(bias, tr)._v()] if bias is not None else [])
    y = wrap(tr.op(Op.CONV2D, *ins, strides=strides, pads=pads, dilations=dil, groups=groups), tr)
    return layout.squeeze(y, 0) if unbatched else y


def _pool_args(kernel_size: Any, stride: Any, padding: Any, what: str) -> tuple[tuple, tuple, tuple]:
    kernel = _pair(kernel_size, f"{what} kernel_size")
    strides = (
        kernel
        if stride is None or (isinstance(stride, (list, tuple)) and not stride)
        else _pair(stride, f"{what} stride")
    )
    ph, pw = _pair(padding, f"{what} padding")
    if ph < 0 or pw < 0 or ph > kernel[0] // 2 or pw > kernel[1] // 2:
        raise trace_error(f"{what} padding must be >= 0 and at most half the kernel size, got {padding!r}")
    return kernel, strides, (ph, ph, pw, pw)


def _ceil(ceil_mode: Any) -> dict[str, bool]:
    """The attr only when set, so graphs without ceil mode (and their kernel cache keys) stay as they were."""
    if ceil_mode not in (True, False) or isinstance(ceil_mode, float):
        raise trace_error(f"pooling ceil_mode must be a bool, got {ceil_mode!r}")
    return {"ceil_mode": True} if ceil_mode else {}


def _as_2d(fn: Any, x: Any, kernel_size: Any, stride: Any, padding: Any, what: str, *rest: Any) -> Tensor:
    """A 1-D pool as the 2-D one over a height of one: (N, C, L) -> (N, C, 1, L)."""
    t = _t(x)
    if t.ndim not in (2, 3):
        raise trace_error(f"{what} needs a (N, C, L) or (C, L) input, got rank {t.ndim}")

    def one(v: Any, height: int) -> tuple[int, int] | None:
        if v is None or (isinstance(v, (list, tuple)) and not v):
            return None  # stride: the kernel's
        vals = (v,) if isinstance(v, int) else tuple(v)
        if len(vals) != 1 or isinstance(vals[0], bool) or not isinstance(vals[0], int):
            raise trace_error(f"{what} kernel_size, stride and padding must each be an int or one int, got {v!r}")
        return (height, vals[0])

    y = fn(layout.unsqueeze(t, -2), one(kernel_size, 1), one(stride, 1), one(padding, 0), *rest)
    return layout.squeeze(y, -2)


def max_pool1d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor:
    if dilation not in (1, (1,), [1]):
        raise trace_error("max_pool1d with dilation != 1 is not supported")
    return _as_2d(max_pool2d, x, kernel_size, stride, padding, "max_pool1d", 1, ceil_mode, return_indices)


def avg_pool1d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    return _as_2d(avg_pool2d, x, kernel_size, stride, padding, "avg_pool1d", ceil_mode, count_include_pad)


def max_pool2d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor:
    if _pair(dilation, "max_pool2d dilation") != (1, 1):
        raise trace_error("max_pool2d with dilation != 1 is not supported")
    if return_indices:
        raise trace_error("max_pool2d with return_indices=True is not supported")
    t, unbatched = batched(_t(x), 2, "max_pool2d")
    kernel, strides, pads = _pool_args(kernel_size, stride, padding, "max_pool2d")
    if whole_window(t, kernel, strides, pads, bool(ceil_mode)):
        y = t.amax((-2, -1), keepdim=True)
        return layout.squeeze(y, 0) if unbatched else y
    tr = t._t()
    y = wrap(tr.op(Op.MAX_POOL2D, t._v(), kernel=kernel, strides=strides, pads=pads, **_ceil(ceil_mode)), tr)
    return layout.squeeze(y, 0) if unbatched else y


def avg_pool2d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    if divisor_override is not None:
        raise trace_error("avg_pool2d with divisor_override is not supported")
    t, unbatched = batched(_t(x), 2, "avg_pool2d")
    kernel, strides, pads = _pool_args(kernel_size, stride, padding, "avg_pool2d")
    if whole_window(t, kernel, strides, pads, bool(ceil_mode)):
        y = t.mean((-2, -1), keepdim=True)
        return layout.squeeze(y, 0) if unbatched else y
    tr = t._t()
    y = wrap(
        tr.op(
            Op.AVG_POOL2D,
            t._v(),
            kernel=kernel,
            strides=strides,
            pads=pads,
            count_include_pad=bool(count_include_pad),
            **_ceil(ceil_mode),
        ),
        tr,
    )
    return layout.squeeze(y, 0) if unbatched else y


def pad(x: Any, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Constant padding; ``pad`` lists (before, after) pairs starting from the last dim, as in torch."""
    if mode != "constant":
        raise trace_error(f"pad mode {mode!r} is not supported (only 'constant')")
    t = _t(x)
    amounts = [as_dim(p) for p in pad]
    if len(amounts) % 2 or len(amounts) > 2 * t.ndim or any(a is None for a in amounts):
        raise trace_error(f"pad needs (before, after) int pairs for at most {t.ndim} dims, got {tuple(pad)}")
    if any(isinstance(a, int) and a < 0 for a in amounts):
        raise trace_error("negative padding (cropping) is not supported; slice instead")
    pads = [0] * (2 * t.ndim)
    for i in range(len(amounts) // 2):
        ax = t.ndim - 1 - i
        pads[2 * ax], pads[2 * ax + 1] = amounts[2 * i], amounts[2 * i + 1]
    tr = t._t()
    fill = 0.0 if value is None else value
    if not t.dtype.is_float:
        fill = int(fill) if t.dtype.is_int else bool(fill)
    return wrap(tr.op(Op.PAD, t._v(), pads=tuple(pads), value=fill), tr)
