"""torch.nn.functional's 3-D (video) convolution and pooling: ``conv3d``, ``max_pool3d``, ``avg_pool3d``,
``adaptive_avg_pool3d``, over (N, C, D, H, W) or unbatched (C, D, H, W) inputs.

No new op or kernel template: the CONV primitive, and the pooling ops' shape rules, numpy references and
decompositions (strided window slices reduced by maximum or sum), are written for any number of spatial dims, as
the ONNX importer's 3-D Conv already uses them. ``max_pool2d``/``avg_pool2d`` keep their names for the 3-D form
(their ONNX export, MaxPool/AveragePool, is n-D too), so a video model's graph holds the ops the image models'
graphs hold, and the conv kernels are the implicit-GEMM template over one more spatial dim."""

from __future__ import annotations

from typing import Any

import numpy as np

from aotc.frontend import layout
from aotc.frontend.context import trace_error
from aotc.frontend.elementwise import as_tensor, tracer_of, value_of, wrap
from aotc.frontend.pooling import batched, whole_window
from aotc.frontend.tensor import Tensor
from aotc.ir.ops import Op

__all__ = ["adaptive_avg_pool3d", "avg_pool3d", "conv3d", "max_pool3d"]


def _triple(v: Any, what: str) -> tuple[int, int, int]:
    vals = (v,) * 3 if isinstance(v, int) and not isinstance(v, bool) else tuple(v) * 3 if len(v) == 1 else tuple(v)
    if len(vals) != 3 or any(isinstance(a, bool) or not isinstance(a, int) for a in vals):
        raise trace_error(f"{what} must be an int or 3 ints, got {v!r}")
    return vals  # type: ignore[return-value]


def conv3d(
    x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1
) -> Tensor:
    """torch's ``conv3d``: weight (out, in / groups, kd, kh, kw); padding ints, ``'same'`` or ``'valid'``."""
    tr = tracer_of(x, weight, bias)
    t, unbatched = batched(as_tensor(x, tr), 3, "conv3d")
    w = as_tensor(weight, tr)
    if w.ndim != 5 or not all(isinstance(d, int) for d in w.shape):
        raise trace_error(f"conv3d weight must be a static (out, in/groups, kd, kh, kw), got shape {w.shape}")
    strides, dil = _triple(stride, "conv3d stride"), _triple(dilation, "conv3d dilation")
    if any(s < 1 for s in strides) or any(d < 1 for d in dil):
        raise trace_error(f"conv3d stride and dilation must be >= 1, got {strides} and {dil}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 or w.shape[0] % groups:
        raise trace_error(
            f"conv3d groups must be a positive int dividing the {w.shape[0]} out channels, got {groups!r}"
        )
    kernel = w.shape[2:]
    if padding == "valid":
        pads: tuple[int, ...] = (0,) * 6
    elif padding == "same":
        if strides != (1, 1, 1):
            raise trace_error(f"conv3d padding='same' needs stride 1, got {strides}")
        pads = ()
        for k, d in zip(kernel, dil):
            total = d * (k - 1)
            pads += (total // 2, total - total // 2)  # the odd element goes last, as in torch
    elif isinstance(padding, str):
        raise trace_error(f"conv3d padding must be an int, 3 ints, 'same' or 'valid', got {padding!r}")
    else:
        pads = tuple(p for p in _triple(padding, "conv3d padding") for _ in (0, 1))
        if any(p < 0 for p in pads):
            raise trace_error(f"conv3d padding must be >= 0, got {padding!r}")
    channels = t._v().type.shape[1]
    tr.require(
        channels, "==", w.shape[1] * groups, f"conv3d: input channels differ from weight's {w.shape[1]} x groups"
    )
    attrs = {"strides": strides, "pads": pads, "dilations": dil, "groups": groups}
    y = wrap(tr.op(Op.CONV, t._v(), value_of(w, t.dtype, tr), **attrs), tr)
    if bias is not None:
        y = y + layout.reshape(as_tensor(bias, tr, t.dtype), ([-1, 1, 1, 1],))
    return layout.squeeze(y, 0) if unbatched else y


def _pool_args(kernel_size: Any, stride: Any, padding: Any, what: str) -> tuple[tuple, tuple, tuple]:
    kernel = _triple(kernel_size, f"{what} kernel_size")
    empty = stride is None or (isinstance(stride, (list, tuple)) and not stride)
    strides = kernel if empty else _triple(stride, f"{what} stride")
    pad3 = _triple(padding, f"{what} padding")
    if any(k < 1 for k in kernel) or any(s < 1 for s in strides):
        raise trace_error(f"{what} kernel_size and stride must be >= 1, got {kernel} and {strides}")
    if any(p < 0 or p > k // 2 for p, k in zip(pad3, kernel)):
        raise trace_error(f"{what} padding must be >= 0 and at most half the kernel size, got {padding!r}")
    return kernel, strides, tuple(p for p in pad3 for _ in (0, 1))


def _ceil(ceil_mode: Any, what: str) -> dict[str, bool]:
    if ceil_mode not in (True, False) or isinstance(ceil_mode, float):
        raise trace_error(f"{what} ceil_mode must be a bool, got {ceil_mode!r}")
    return {"ceil_mode": True} if ceil_mode else {}


def max_pool3d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor:
    if _triple(dilation, "max_pool3d dilation") != (1, 1, 1):
        raise trace_error(f"max_pool3d with dilation {dilation!r} is not supported (only 1)")
    if return_indices:
        raise trace_error("max_pool3d with return_indices=True is not supported")
    t, unbatched = batched(as_tensor(x), 3, "max_pool3d")
    kernel, strides, pads = _pool_args(kernel_size, stride, padding, "max_pool3d")
    if whole_window(t, kernel, strides, pads, bool(ceil_mode)):
        y = t.amax((-3, -2, -1), keepdim=True)
        return layout.squeeze(y, 0) if unbatched else y
    tr = t._t()
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, **_ceil(ceil_mode, "max_pool3d")}
    y = wrap(tr.op(Op.MAX_POOL2D, t._v(), **attrs), tr)
    return layout.squeeze(y, 0) if unbatched else y


def avg_pool3d(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    if divisor_override is not None:
        raise trace_error(f"avg_pool3d with divisor_override={divisor_override!r} is not supported")
    t, unbatched = batched(as_tensor(x), 3, "avg_pool3d")
    kernel, strides, pads = _pool_args(kernel_size, stride, padding, "avg_pool3d")
    if whole_window(t, kernel, strides, pads, bool(ceil_mode)):
        y = t.mean((-3, -2, -1), keepdim=True)
        return layout.squeeze(y, 0) if unbatched else y
    tr = t._t()
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "count_include_pad": bool(count_include_pad)}
    y = wrap(tr.op(Op.AVG_POOL2D, t._v(), **attrs, **_ceil(ceil_mode, "avg_pool3d")), tr)
    return layout.squeeze(y, 0) if unbatched else y


def adaptive_avg_pool3d(x: Any, output_size: Any) -> Tensor:
    """Global pooling (output 1x1x1) as a mean over any sizes; other outputs over static sizes: an ``avg_pool3d``
    where each dim divides evenly, else one averaging matmul per dim with torch's (overlapping) bins."""
    t = as_tensor(x)
    if t.ndim not in (4, 5):
        raise trace_error(f"adaptive_avg_pool3d needs a (N, C, D, H, W) or (C, D, H, W) input, got rank {t.ndim}")
    sizes = tuple(t.shape[-3:])
    outs = (output_size,) * 3 if isinstance(output_size, int) else tuple(output_size)
    if len(outs) != 3:
        raise trace_error(f"adaptive_avg_pool3d output_size must be an int or 3 sizes, got {output_size!r}")
    outs = tuple(n if o is None else o for o, n in zip(outs, sizes))
    if any(isinstance(o, bool) or not isinstance(o, int) or o < 1 for o in outs):
        raise trace_error(f"adaptive_avg_pool3d output_size must be positive ints, got {output_size!r}")
    if outs == (1, 1, 1):
        return t.mean((-3, -2, -1), keepdim=True)
    if not all(isinstance(n, int) for n in sizes):
        raise trace_error(
            f"adaptive_avg_pool3d to {outs} needs static input sizes (only 1x1x1 is dynamic), got {sizes}"
        )
    if all(n % o == 0 for n, o in zip(sizes, outs)):
        kernel = tuple(n // o for n, o in zip(sizes, outs))
        return avg_pool3d(t, kernel, kernel)
    y = t
    for axis, (n, o) in enumerate(zip(sizes, outs), start=t.ndim - 3):
        if n == o:
            continue
        moved = layout.transpose(y, axis, -1)
        y = layout.transpose(moved @ adaptive_bins(n, o).T.astype(t.dtype.np), axis, -1)
    return y


def adaptive_bins(n: int, out: int) -> np.ndarray:
    """(out, n): row i averages torch's adaptive bin [floor(i n / out), ceil((i + 1) n / out))."""
    m = np.zeros((out, n), np.float32)
    for i in range(out):
        lo, hi = i * n // out, -(-(i + 1) * n // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m
