"""Standard layers with torch.nn's constructor arguments, parameter names and default initialization."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aotc.frontend import functional as F
from aotc.frontend.context import trace_error
from aotc.frontend.module import Module, ModuleError, Parameter, init_normal, init_uniform
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import dtype_of


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModuleError(f"{what} must be a positive int, got {value!r}")
    return value


def _param(arr: np.ndarray, dtype: Any) -> Parameter:
    return Parameter(arr if dtype is None else arr.astype(dtype_of(dtype).np))


def _shape(normalized_shape: Any) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    for d in shape:
        _positive(d, "normalized_shape entries")
    return shape


class Linear(Module):
    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None
    ) -> None:
        super().__init__()
        self.in_features = _positive(in_features, "Linear in_features")
        self.out_features = _positive(out_features, "Linear out_features")
        bound = 1.0 / math.sqrt(in_features)  # what kaiming_uniform_(a=sqrt(5)) works out to
        self.weight = _param(init_uniform((out_features, in_features), bound), dtype)
        self.bias = _param(init_uniform((out_features,), bound), dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Any = None,
        _freeze: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.num_embeddings = _positive(num_embeddings, "Embedding num_embeddings")
        self.embedding_dim = _positive(embedding_dim, "Embedding embedding_dim")
        if max_norm is not None:
            raise ModuleError("Embedding max_norm is not supported")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ModuleError(f"Embedding padding_idx {padding_idx} is out of range")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        w = init_normal((num_embeddings, embedding_dim)) if _weight is None else _weight
        self.weight = _param(np.asarray(w), dtype)
        if padding_idx is not None and _weight is None:
            self.weight.data[padding_idx] = 0

    def forward(self, idx: Tensor) -> Tensor:
        return F.embedding(idx, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    def __init__(
        self,
        normalized_shape: Any,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.weight = _param(np.ones(self.normalized_shape, np.float32), dtype) if elementwise_affine else None
        self.bias = _param(np.zeros(self.normalized_shape, np.float32), dtype) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class RMSNorm(Module):
    """``eps=None`` means 1e-6 (see ``aotc.functional.rms_norm``)."""

    def __init__(
        self,
        normalized_shape: Any,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.weight = _param(np.ones(self.normalized_shape, np.float32), dtype) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class Dropout(Module):
    """The identity: compiled models run inference."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ModuleError(f"Dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return x


class Identity(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


class ReLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ModuleError(f"GELU approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, approximate=self.approximate)


class SiLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)


class Softmax(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.dim)


class LogSoftmax(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, self.dim)


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)


def _pair(v: Any, what: str) -> tuple[int, int]:
    vals = (v, v) if isinstance(v, int) and not isinstance(v, bool) else tuple(v)
    if len(vals) != 2 or any(isinstance(a, bool) or not isinstance(a, int) for a in vals):
        raise ModuleError(f"{what} must be an int or a pair of ints, got {v!r}")
    return vals  # type: ignore[return-value]


class Conv2d(Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.in_channels = _positive(in_channels, "Conv2d in_channels")
        self.out_channels = _positive(out_channels, "Conv2d out_channels")
        self.groups = _positive(groups, "Conv2d groups")
        if in_channels % groups or out_channels % groups:
            raise ModuleError(f"Conv2d channels ({in_channels}, {out_channels}) must be divisible by groups {groups}")
        if padding_mode != "zeros":
            raise ModuleError(f"Conv2d padding_mode {padding_mode!r} is not supported (only 'zeros')")
        self.kernel_size = _pair(kernel_size, "Conv2d kernel_size")
        self.stride, self.dilation = _pair(stride, "Conv2d stride"), _pair(dilation, "Conv2d dilation")
        self.padding = padding if isinstance(padding, str) else _pair(padding, "Conv2d padding")
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ModuleError(f"Conv2d padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
        fan_in = in_channels // groups * self.kernel_size[0] * self.kernel_size[1]
        bound = 1.0 / math.sqrt(fan_in)
        self.weight = _param(init_uniform((out_channels, in_channels // groups, *self.kernel_size), bound), dtype)
        self.bias = _param(init_uniform((out_channels,), bound), dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"


class _BatchNorm(Module):
    _ranks: tuple[int, ...] = ()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.num_features = _positive(num_features, f"{type(self).__name__} num_features")
        if not track_running_stats:
            raise ModuleError(
                f"{type(self).__name__}(track_running_stats=False) normalizes with batch statistics; not supported"
            )
        self.eps, self.momentum = eps, momentum
        self.weight = _param(np.ones(num_features, np.float32), dtype) if affine else None
        self.bias = _param(np.zeros(num_features, np.float32), dtype) if affine else None
        self.register_buffer("running_mean", np.zeros(num_features, np.float32))
        self.register_buffer("running_var", np.ones(num_features, np.float32))
        self.register_buffer("num_batches_tracked", np.zeros((), np.int64))

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._ranks:
            raise trace_error(
                f"{type(self).__name__} expects input of rank {' or '.join(map(str, self._ranks))}, got {x.ndim}"
            )
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"


class BatchNorm1d(_BatchNorm):
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ranks = (4,)


class MaxPool2d(Module):
    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(
            x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices
        )


class AvgPool2d(Module):
    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )
