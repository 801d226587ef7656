"""torch tensors that say they live on the fake GPU (tests/runtime/fake_cuda.py), for the cuda backend's torch
input path on a machine whose torch has no CUDA: a ``torch.Tensor`` subclass whose ``data_ptr()`` is a fake-driver
address and whose ``is_cuda`` / ``get_device()`` / ``device`` say cuda:0. Its host storage is a stand-in of the
same dtype, shape and strides; aotc reads only those attributes, never the storage."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_TORCH = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16, np.dtype(np.int64): torch.int64,
          np.dtype(np.int32): torch.int32, np.dtype(bool): torch.bool}  # fmt: skip


class FakeCudaTensor(torch.Tensor):
    _ptr: int

    @staticmethod
    def __new__(cls, ptr: int, stand_in: torch.Tensor) -> FakeCudaTensor:
        t = torch.Tensor._make_subclass(cls, stand_in)
        t._ptr = ptr
        t._contiguous = stand_in.is_contiguous()
        t._shape, t._dtype = stand_in.shape, stand_in.dtype
        return t

    # Read once: a plain torch tensor answers these without __torch_function__, and so does this one.
    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        return self._shape

    @property
    def dtype(self) -> torch.dtype:  # type: ignore[override]
        return self._dtype

    def is_contiguous(self) -> bool:  # type: ignore[override]
        return self._contiguous

    def data_ptr(self) -> int:  # type: ignore[override]
        return self._ptr

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    def get_device(self) -> int:  # type: ignore[override]
        return 0

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        # Plain tensors out of every torch op: the subclass stands for device memory only where aotc reads it.
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    if dtype.name == "bfloat16":
        return torch.bfloat16
    return _TORCH[np.dtype(dtype)]


def cuda_tensor(fake: Any, host: np.ndarray) -> FakeCudaTensor:
    """A copy of ``host`` on the fake GPU, as a torch tensor on cuda:0."""
    on_gpu = fake.device_array(host)
    return FakeCudaTensor(on_gpu.ptr, torch.empty(host.shape, dtype=torch_dtype(host.dtype)))


def transposed(t: FakeCudaTensor) -> FakeCudaTensor:
    """A non-contiguous view of a 2-D fake tensor at the same address."""
    return FakeCudaTensor(t._ptr, torch.empty(t.shape[::-1], dtype=t.dtype).t())
