"""Tensors on the GPU in and out of a call: ``DeviceArray`` (an output kept on the device, exposing
``__cuda_array_interface__`` and ``__dlpack__``) and ``DeviceInput`` (a caller's GPU tensor read in place)."""

from __future__ import annotations

import math
import sys
import threading
import weakref
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
    """A C-contiguous array in GPU memory (an output with ``outputs="device"``).

    Torch, CuPy and JAX take it without a copy: ``torch.from_dlpack(a)``, ``cupy.asarray(a)``. ``numpy()``
    copies it to the host. An output of a call is a view of that shape's static output buffer (``call`` set):
    valid until the next call at the same shape on the same thread, ordered on the stream the call ran on (named
    by ``__cuda_array_interface__``, waited for by ``__dlpack__(stream=...)``), its memory kept alive while any
    view of it is. ``free()`` returns memory the array owns now instead of when it is garbage collected (a view
    of a static buffer owns none)."""

    def __init__(
        self,
        device: Device,
        memory: DeviceMemory,
        shape: tuple[int, ...],
        dtype: np.dtype,
        ptr: int | None = None,
        call: Any = None,
    ) -> None:
        self._device = device
        self._memory = memory
        self._ptr = memory.ptr if ptr is None else ptr
        self._call = None if call is None else weakref.ref(call)
        self.shape = shape
        self.dtype = dtype

    @property
    def ptr(self) -> int:
        return self._ptr

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _owner(self) -> Any:
        return self._call() if self._call is not None else None

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        # Version 3 names the stream the data is being written on (None: complete already); 1 for the legacy
        # default stream, whose handle 0 the interface reserves.
        call = self._owner()
        stream = call.pending_stream() if call is not None else None
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            "stream": (stream or 1) if stream is not None else None,
        }

    def __dlpack__(self, stream: Any = None, **_kwargs: Any) -> Any:
        call = self._owner()
        if call is not None and stream != -1:  # -1: the consumer asks for no synchronization
            call.order_before(1 if stream is None else int(stream))
        return dlpack.export(self, self.ptr, self.shape, self.dtype, self._device.info.ordinal)

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.KDL_CUDA, self._device.info.ordinal

    def numpy(self) -> np.ndarray:
        """A host copy; waits for the call that wrote it and raises its pending ExecError, if any."""
        call = self._owner()
        if call is not None:
            call.synchronize()
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self._device.make_current()
            self._device.download(out.ctypes.data, self.ptr, self.nbytes, 0)
            self._device.sync(0)
        return out

    def free(self) -> None:
        if self._call is None:
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


# Per Python type: whether it is a torch tensor (read through its attributes), else the protocols decide.
_TORCH_TYPES: dict[type, bool] = {}
_TORCH_DTYPES: dict[Any, np.dtype] = {}


def torch_stream(device: int) -> int:
    """torch's current stream on GPU ``device`` (its handle): what a torch caller's work is queued on."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object made: a fraction of a µs
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def _is_torch(kind: type) -> bool:
    torch = sys.modules.get("torch")
    found = torch is not None and isinstance(getattr(torch, "Tensor", None), type) and issubclass(kind, torch.Tensor)
    if torch is not None:  # once torch is imported the answer for this type is final
        _TORCH_TYPES[kind] = found
    return found


def _from_torch(value: Any) -> DeviceInput | None:
    """A torch CUDA tensor read through its attributes (one read each, no capsule); None for a CPU tensor, and
    for a dtype aotc maps only through DLPack (the caller then takes the protocol path)."""
    if not value.is_cuda:
        return None
    if not _TORCH_DTYPES:
        torch = sys.modules["torch"]  # the caller's tensor is torch's: read its dtypes, never import torch here
        from aotc.ir.dtypes import DType

        for name in ("float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"):
            _TORCH_DTYPES[getattr(torch, name)] = np.dtype(name)
        _TORCH_DTYPES[torch.bfloat16] = DType.bfloat16.np
    dtype = _TORCH_DTYPES.get(value.dtype)
    if dtype is None:
        return None
    device = value.get_device()
    strides = None if value.is_contiguous() else tuple(s * dtype.itemsize for s in value.stride())
    return DeviceInput(value.data_ptr(), tuple(value.shape), dtype, strides, device, torch_stream(device), value)


def adopt(value: Any) -> DeviceInput | None:
    """A ``DeviceInput`` for a GPU tensor (a torch CUDA tensor, ``__cuda_array_interface__`` or a CUDA
    ``__dlpack__``), else None.

    Host arrays (numpy, torch CPU tensors) give None: they take the ordinary numpy path. A torch tensor's
    producer stream is torch's current stream; DLPack producers order their work before the legacy default
    stream (the stream passed to them), and the array interface names its own (version 3)."""
    kind = type(value)
    if kind is np.ndarray:
        return None
    if kind is DeviceInput:
        return value
    torch_type = _TORCH_TYPES.get(kind)
    if torch_type is None:
        torch_type = _is_torch(kind)
    if torch_type:
        found = _from_torch(value)
        if found is not None or not value.is_cuda:
            return found
    if isinstance(value, np.ndarray):
        return None
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


class EmptyMemory:
    """The memory of an output of no bytes."""

    ptr = 0
    nbytes = 0

    def free(self) -> None:
        pass
