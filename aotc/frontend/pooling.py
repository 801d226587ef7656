"""What convolutions and pools of any rank share: an unbatched input given a batch dim (``batched``), and a
ceil-mode pool whose one window is larger than the input (``whole_window``): torch allows a kernel past the input's size where
ceil mode still leaves one window (HF EfficientNet pools a 1x1 or 7x7 feature map with a 2560-wide
``AvgPool2d(ceil_mode=True)``), and that window holds the whole input. It is a mean or max over the spatial dims;
the pooling ops' window decomposition would instead pad the input to the kernel and slice it once per tap."""

from __future__ import annotations

from collections.abc import Sequence

from aotc.frontend import layout
from aotc.frontend.context import trace_error
from aotc.frontend.tensor import Tensor

_DIMS = {2: "H, W", 3: "D, H, W"}


def batched(x: Tensor, spatial: int, what: str) -> tuple[Tensor, bool]:
    """``x`` as (N, C, *spatial), and whether it came without its batch dim (the caller squeezes it off again)."""
    if x.ndim == spatial + 1:
        return layout.unsqueeze(x, 0), True
    if x.ndim != spatial + 2:
        dims = _DIMS[spatial]
        raise trace_error(f"{what} needs a (N, C, {dims}) or (C, {dims}) input, got rank {x.ndim}")
    return x, False


def whole_window(t: Tensor, kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int], ceil: bool) -> bool:
    """True where ``t``'s pool (no padding, ceil mode) has one window per dim and it holds the whole input:
    every spatial size static with ``d <= k < d + stride`` (torch's ceil count is then 1), and some ``k > d``."""
    sizes = t.shape[-len(kernel) :]
    if not ceil or any(pads) or not all(isinstance(d, int) for d in sizes):
        return False
    return all(d <= k < d + s for d, k, s in zip(sizes, kernel, strides)) and any(k > d for d, k in zip(sizes, kernel))
