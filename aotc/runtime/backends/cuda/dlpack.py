"""DLPack over ctypes, no compiled helper: export a device buffer as a ``dltensor`` capsule and read one back.

Legacy (unversioned) capsules only: every consumer aotc cares about (torch, cupy, jax) accepts them.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

KDL_CUDA, KDL_CUDA_MANAGED, KDL_CPU = 2, 13, 1
_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}
_BFLOAT = 4


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_NAME = b"dltensor"
# Private prototypes: setting argtypes on ctypes.pythonapi's shared attributes would change them for everyone.
_P = ctypes.PYFUNCTYPE
_capsule_new = _P(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_capsule_pointer = _P(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
_raw_valid = _P(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))
_raw_pointer = _P(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))

# Exported tensors alive on the consumer's side, by the address of their DLManagedTensor: the record keeps
# the owner (and so its device memory) and the ctypes arrays the struct points into.
_LIVE: dict[int, tuple[Any, ...]] = {}
# Reentrant: a capsule collected while this thread holds the lock runs the deleter, which takes it again.
_LIVE_LOCK = threading.RLock()


@_DELETER
def _delete(managed: Any) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(ctypes.addressof(managed.contents), None)


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CAPSULE_DESTRUCTOR
def _capsule_gone(capsule: int) -> None:
    # A capsule nobody consumed still carries its name: then the deleter is ours to call.
    if _raw_valid(capsule, _NAME):
        ptr = _raw_pointer(capsule, _NAME)
        if ptr:
            _delete(ctypes.cast(ptr, ctypes.POINTER(DLManagedTensor)))


def dl_dtype(dtype: np.dtype) -> tuple[int, int]:
    if dtype.name == "bfloat16":
        return _BFLOAT, 16
    return _CODES[dtype.kind], 8 * dtype.itemsize


def export(owner: Any, ptr: int, shape: tuple[int, ...], dtype: np.dtype, device_id: int) -> Any:
    """A ``dltensor`` capsule for a C-contiguous buffer on GPU ``device_id``; ``owner`` stays alive until
    the consumer (or the capsule's destructor) calls the deleter."""
    n = len(shape)
    shape_arr = (ctypes.c_int64 * max(n, 1))(*shape)
    managed = DLManagedTensor()
    code, bits = dl_dtype(dtype)
    managed.dl_tensor = DLTensor(
        ctypes.c_void_p(ptr or None),
        DLDevice(KDL_CUDA, device_id),
        n,
        DLDataType(code, bits, 1),
        ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)),
        None,
        0,
    )
    managed.deleter = _delete
    addr = ctypes.addressof(managed)
    with _LIVE_LOCK:
        _LIVE[addr] = (owner, managed, shape_arr)
    return _capsule_new(addr, _NAME, ctypes.cast(_capsule_gone, ctypes.c_void_p))


def live_exports() -> int:
    with _LIVE_LOCK:
        return len(_LIVE)


@dataclass(frozen=True, slots=True)
class Imported:
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None when C-contiguous
    code: int
    bits: int
    lanes: int
    device_type: int
    device_id: int


def read(capsule: Any) -> Imported:
    """What a ``dltensor`` capsule describes (the capsule must stay alive while its memory is used)."""
    addr = _capsule_pointer(capsule, _NAME)
    t = DLManagedTensor.from_address(addr).dl_tensor
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    strides = tuple(int(t.strides[i]) for i in range(t.ndim)) if t.strides else None
    return Imported(
        int(t.data or 0) + int(t.byte_offset),
        shape,
        strides,
        int(t.dtype.code),
        int(t.dtype.bits),
        int(t.dtype.lanes),
        int(t.device.device_type),
        int(t.device.device_id),
    )


def np_dtype(code: int, bits: int) -> np.dtype | None:
    if code == _BFLOAT and bits == 16:
        from aotc.ir.dtypes import DType

        return DType.bfloat16.np
    kind = {0: "i", 1: "u", 2: "f", 6: "b"}.get(code)
    if kind is None:
        return None
    try:
        return np.dtype(f"{kind}{bits // 8}") if kind != "b" else np.dtype(bool)
    except TypeError:
        return None
