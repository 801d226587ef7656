"""The enums, launch structs and fake compiled binaries of the fake CUDA driver (tests/runtime/fake_cuda.py)."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from aotc.ir.launch import SCRATCH_PARAMS, Cubin, KernelBinary, LaunchMeta
from aotc.ir.schedule import Kernel, Schedule


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_SUPPORTED = 801
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900


class CUdevice_attribute(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


class CUfunction_attribute(enum.IntEnum):
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CUpointer_attribute(enum.IntEnum):
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


class CUstream_flags(enum.IntEnum):
    CU_STREAM_DEFAULT = 0
    CU_STREAM_NON_BLOCKING = 1


class CUevent_flags(enum.IntEnum):
    CU_EVENT_DISABLE_TIMING = 2


class CUstreamCaptureMode(enum.IntEnum):
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


class CUlaunchAttributeID(enum.IntEnum):
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class CUmemAllocationType(enum.IntEnum):
    CU_MEM_ALLOCATION_TYPE_PINNED = 1


class CUmemLocationType(enum.IntEnum):
    CU_MEM_LOCATION_TYPE_DEVICE = 1


class CUmemPool_attribute(enum.IntEnum):
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4


class cuuint64_t:
    def __init__(self, value: int) -> None:
        if not 0 <= value < 2**64:
            raise OverflowError(value)
        self.value = value

    def __int__(self) -> int:
        return self.value


class _Location:
    def __init__(self) -> None:
        self.type = 0
        self.id = 0


class CUmemPoolProps:
    def __init__(self) -> None:
        self.allocType = 0
        self.location = _Location()


class _Dim3:
    x = y = z = 0


class _AttrValue:
    def __init__(self) -> None:
        self.clusterDim = _Dim3()


class CUlaunchAttribute:
    def __init__(self) -> None:
        self.id = 0
        self.value = _AttrValue()


class CUDA_KERNEL_NODE_PARAMS:
    def __init__(self) -> None:
        self.func: Any = None
        self.gridDimX = self.gridDimY = self.gridDimZ = 0
        self.blockDimX = self.blockDimY = self.blockDimZ = 0
        self.sharedMemBytes = 0
        self.kernelParams: Any = 0
        self.extra: Any = 0


class CUlaunchConfig:
    def __init__(self) -> None:
        self.gridDimX = self.gridDimY = self.gridDimZ = 0
        self.blockDimX = self.blockDimY = self.blockDimZ = 0
        self.sharedMemBytes = 0
        self.hStream: Any = None
        self.attrs: list[CUlaunchAttribute] = []
        self.numAttrs = 0


def fake_binaries(
    schedule: Schedule,
    archs: tuple[str, ...] = ("sm_80", "sm_90a"),
    *,
    ptx: bool = True,
    ptx_version: str = "8.7",
    shared: int = 0,
    num_ctas: int = 1,
    global_scratch: int = 0,
) -> dict[str, KernelBinary]:
    """KernelBinary objects as compile_kernels returns them, with fake images the fake driver understands."""
    out: dict[str, KernelBinary] = {}
    for k in schedule.codes():  # arch launches included
        if k.name in out:
            continue
        params = tuple(a.type for a in k.args) + SCRATCH_PARAMS

        def meta(arch: str, k: Kernel = k, params: tuple[str, ...] = params) -> LaunchMeta:
            return LaunchMeta(
                name=k.name, arch=arch, num_warps=k.num_warps, num_ctas=num_ctas, shared=shared,
                global_scratch_size=global_scratch, global_scratch_align=16 if global_scratch else 1,
                profile_scratch_size=0, profile_scratch_align=1, params=params, triton_version="3.9.0",
                ptx_version=ptx_version, enable_fp_fusion=True, constexprs=tuple(k.constexprs),
            )  # fmt: skip

        cubins = tuple(Cubin(a, f"FAKE-CUBIN {a}\0".encode(), meta(a)) for a in archs)
        text = f".version {ptx_version}\n.target sm_80\n.entry {k.name}\n" if ptx else ""
        out[k.name] = KernelBinary(k.name, cubins, text, meta("sm_80"))
    return out


class FakeTensor:
    """A tensor on the fake GPU, as torch/cupy expose one."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype,
                 strides: tuple[int, ...] | None = None) -> None:  # fmt: skip
        self.ptr, self.shape, self.dtype, self.strides = ptr, shape, dtype, strides

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": self.strides}  # fmt: skip

    def transposed(self) -> FakeTensor:
        """A non-contiguous view (2-D): swapped shape and strides."""
        s = self.dtype.itemsize
        return FakeTensor(self.ptr, self.shape[::-1], self.dtype, (s, s * self.shape[1]))


class DLPackTensor(FakeTensor):
    """A tensor on the fake GPU that hands itself over through DLPack alone, as benchmarks/benchlib.DLPackOnly
    passes torch's: the consumer names its stream, and the capsule is parsed on each call."""

    __cuda_array_interface__ = None  # type: ignore[assignment]

    def __dlpack__(self, stream: Any = None, **_kwargs: Any) -> Any:
        from aotc.runtime.backends.cuda import dlpack

        self.streams_asked = getattr(self, "streams_asked", [])
        self.streams_asked.append(stream)
        return dlpack.export(self, self.ptr, self.shape, self.dtype, 0)

    def __dlpack_device__(self) -> tuple[int, int]:
        return 2, 0
