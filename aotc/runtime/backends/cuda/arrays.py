"""Tensors on the GPU in and out of a call: ``DeviceArray`` (an output kept on the device, exposing
``__cuda_array_interface__`` and ``__dlpack__``) and ``DeviceInput`` (a caller's GPU tensor read in place)."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.errors import GuardError
from aotc.runtime.backends.cuda import dlpack
from aotc.runtime.backends.cuda.driver import Device


class DeviceMemory:
    """One block of GPU memory, freed once (explicitly or when garbage collected): from cuMemAlloc, or with
    ``stream``, from the device's stream-ordered pool (outputs handed to the caller, made on every call)."""

    def __init__(self, device: Device, nbytes: int, what: str, stream: Any = None) -> None:
        if stream is None:
            self.ptr, self._pooled = device.alloc(nbytes, what), False
        else:
            self.ptr, self._pooled = device.alloc_async(nbytes, stream, what)
        self.nbytes = nbytes
        self._device = device.hold()
        self._lock = threading.Lock()

    def free(self) -> None:
        with self._lock:
            device, self._device = self._device, None
        if device is not None:
            try:
                if self._pooled:
                    device.free_async(self.ptr)
                else:
                    device.free(self.ptr)
            finally:
                device.release()

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # a finalizer must not raise; the driver may already be torn down at exit
            pass


class DeviceArray:
    """A C-contiguous array in GPU memory that the caller owns (an output with ``outputs="device"``).

    Torch, CuPy and JAX take it without a copy: ``torch.from_dlpack(a)``, ``cupy.asarray(a)``. ``numpy()``
    copies it to the host; ``free()`` returns its memory now instead of when it is garbage collected."""

    def __init__(self, device: Device, memory: DeviceMemory, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self._device = device
        self._memory = memory
        self.shape = shape
        self.dtype = dtype

    @property
    def ptr(self) -> int:
        return self._memory.ptr

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        # The data is complete when the call returns (it synchronizes), so no stream is named.
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
        }

    def __dlpack__(self, stream: Any = None, **_kwargs: Any) -> Any:
        return dlpack.export(self, self.ptr, self.shape, self.dtype, self._device.info.ordinal)

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.KDL_CUDA, self._device.info.ordinal

    def numpy(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self._device.make_current()
            self._device.download(out.ctypes.data, self.ptr, self.nbytes, 0)
            self._device.sync(0)
        return out

    def free(self) -> None:
        self._memory.free()

    def __repr__(self) -> str:
        return f"<DeviceArray {self.dtype.name}{list(self.shape)} on {self._device.info.name}>"


@dataclass(slots=True)
class DeviceInput:
    """A caller's GPU tensor: its address, layout and the object keeping it alive during the call."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...] | None  # in bytes; None when C-contiguous
    device_id: int | None  # as the producer states it (None: ask the driver)
    stream: int | None  # a stream the producer's pending work is on, to wait for (None: nothing to wait for)
    owner: Any

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def standin(self) -> np.ndarray:
        """A zero-stride numpy stand-in of the same dtype and shape, for the shape guards (reads nothing)."""
        return np.broadcast_to(np.zeros((), self.dtype), self.shape)

    def contiguous(self) -> bool:
        if self.strides is None:
            return True
        expect = self.dtype.itemsize
        for dim, stride in zip(reversed(self.shape), reversed(self.strides)):
            if dim != 1 and stride != expect:
                return False
            expect *= dim
        return True


def adopt(value: Any) -> DeviceInput | None:
    """A ``DeviceInput`` for a GPU tensor (``__cuda_array_interface__`` or a CUDA ``__dlpack__``), else None.

    Host arrays (numpy, torch CPU tensors) give None: they take the ordinary numpy path."""
    if isinstance(value, (np.ndarray, DeviceInput)):
        return value if isinstance(value, DeviceInput) else None
    # DLPack first: it names every dtype (torch exports bfloat16 through __cuda_array_interface__ as '<V2',
    # raw bytes), and it is what torch, CuPy and JAX all speak.
    dev = getattr(value, "__dlpack_device__", None)
    kind = device_id = None
    if dev is not None and hasattr(value, "__dlpack__"):
        try:
            kind, device_id = dev()
        except Exception:  # a producer whose device query fails: try its array interface instead
            kind = None
    if kind is None or int(kind) not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED):
        cai = _cuda_array_interface(value)
        return _from_cai(value, cai) if cai is not None else None
    try:
        capsule = value.__dlpack__(stream=1)  # pending work is ordered before the legacy default stream
    except Exception as e:
        raise GuardError(f"a GPU input ({type(value).__name__}) refused to export itself through DLPack: {e}") from None
    t = dlpack.read(capsule)
    dtype = dlpack.np_dtype(t.code, t.bits)
    if dtype is None or t.lanes != 1:
        raise GuardError(
            f"a GPU input ({type(value).__name__}) has DLPack dtype code {t.code}/{t.bits} bits, "
            "which aotc does not take"
        )
    strides = tuple(s * dtype.itemsize for s in t.strides) if t.strides is not None else None
    return DeviceInput(t.ptr, t.shape, dtype, strides, int(device_id), 1, (value, capsule))


def _cuda_array_interface(value: Any) -> dict[str, Any] | None:
    try:
        cai = getattr(value, "__cuda_array_interface__", None)
    except Exception:  # torch raises for tensors that cannot export it (e.g. bfloat16): DLPack may still work
        return None
    return cai if isinstance(cai, dict) else None


def _from_cai(value: Any, cai: dict[str, Any]) -> DeviceInput:
    name = type(value).__name__
    try:
        shape = tuple(int(d) for d in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        ptr = int(cai["data"][0] or 0)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise GuardError(f"a GPU input ({name}) has a malformed __cuda_array_interface__: {e}") from None
    if dtype.kind == "V":
        raise GuardError(
            f"a GPU input ({name}) gives its dtype as {cai['typestr']!r} (raw bytes) in __cuda_array_interface__, "
            "which does not say what the elements are; hand it over through DLPack (__dlpack__) instead"
        )
    strides = cai.get("strides")
    # Version 3 names the stream to wait for (absent: nothing to wait for). Older producers (torch exports
    # version 2) name none but queue on the legacy default stream: wait for that one.
    stream = cai.get("stream") if int(cai.get("version", 0)) >= 3 else 1
    if cai.get("mask") is not None:
        raise GuardError(f"a GPU input ({name}) has a mask in its __cuda_array_interface__, which aotc does not take")
    return DeviceInput(
        ptr,
        shape,
        dtype,
        tuple(int(s) for s in strides) if strides is not None else None,
        None,
        int(stream) if stream else None,
        value,
    )
