"""A fake ``cuda.bindings.driver`` for tests on machines without a GPU.

Same function names, ``(CUresult, value...)`` tuple returns and enums as the subset the cuda backend calls.
Device memory is host memory (a numpy block per allocation; a device pointer is the block's real address),
copies are ``memmove``s (one to the host is done when the call returns, as into pageable memory), and a kernel
launch runs the kernel's Triton SOURCE under the interpreter launcher
(``aotc.runtime.backends.triton_interp.launch``) with the parameters unpacked from the packed buffer. Stream
capture records launches (with their parameter values read at capture, as CUDA does) and graph launches
replay them. The fake checks what a real driver would reject: launch geometry against the binary's
metadata, large shared memory without the opt-in attribute, cluster kernels launched without a cluster,
scratch pointers, memcpys while capturing, cubins for another arch, PTX newer than the driver. A kernel that
touches memory it does not own faults as on a GPU: every later call fails (``fail`` injects such failures). The
interpreter's address fence (triton_interp) checks every access a kernel makes against the argument its pointer
came from: a launch of a plan (with ``Extents``) to the offsets those claim, which the reader proved inside the
argument's value, so a read past one arena buffer into the next faults; a hand-written kernel from its pointer to
its allocation's end. A refused access is such a fault, and is kept in ``faults``.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from fake_cuda_memory import MemoryMixin, Pool
from fake_cuda_streams import StreamsMixin
from fake_cuda_types import (
    CUDA_KERNEL_NODE_PARAMS,
    CUdevice_attribute,
    CUevent_flags,
    CUfunction_attribute,
    CUlaunchAttribute,
    CUlaunchAttributeID,
    CUlaunchConfig,
    CUmemAllocationType,
    CUmemLocationType,
    CUmemPool_attribute,
    CUmemPoolProps,
    CUpointer_attribute,
    CUresult,
    CUstream_flags,
    CUstreamCaptureMode,
    DLPackTensor,
    FakeTensor,
    cuuint64_t,
    fake_binaries,
)

from aotc.ir.launch import Cubin, KernelBinary, LaunchMeta
from aotc.ir.schedule import Kernel, Schedule

__all__ = ["FakeDriver", "fake_binaries"]


OK = CUresult.CUDA_SUCCESS
_SMALL_SHARED = 48 * 1024
_NP = {"fp32": "float32", "fp16": "float16", "i32": "int32", "i64": "int64", "i8": "int8", "u8": "uint8", "i1": "bool"}
_SCALAR = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "fp32": ctypes.c_float}
_HOST_SIDE = ("cuGetErrorName", "cuCtxSetCurrent")  # calls that still work after a kernel fault


@dataclass
class _Module:
    arch: str  # a cubin's arch, or "ptx"
    loaded: bool = True


@dataclass
class _Function:
    name: str
    module: _Module
    meta: LaunchMeta
    max_dynamic_shared: int = _SMALL_SHARED


class FakeDriver(StreamsMixin, MemoryMixin):
    """One fake GPU. ``register(schedule, binaries)`` tells it each kernel's source (what the cubin would hold)."""

    CUresult = CUresult
    CUDA_KERNEL_NODE_PARAMS = CUDA_KERNEL_NODE_PARAMS
    CUdevice_attribute = CUdevice_attribute
    CUfunction_attribute = CUfunction_attribute
    CUpointer_attribute = CUpointer_attribute
    CUstream_flags = CUstream_flags
    CUevent_flags = CUevent_flags
    CUstreamCaptureMode = CUstreamCaptureMode
    CUlaunchAttributeID = CUlaunchAttributeID
    CUlaunchAttribute = CUlaunchAttribute
    CUlaunchConfig = CUlaunchConfig
    CUmemPoolProps = CUmemPoolProps
    CUmemAllocationType = CUmemAllocationType
    CUmemLocationType = CUmemLocationType
    CUmemPool_attribute = CUmemPool_attribute
    cuuint64_t = cuuint64_t

    def __init__(
        self,
        capability: tuple[int, int] = (9, 0),
        name: str = "NVIDIA H100 80GB HBM3 (fake)",
        driver_version: int = 13000,
        memory: int = 1 << 30,
        devices: int = 1,
        reject_cubins: bool = False,
    ) -> None:
        self.capability, self.name, self.driver_version = capability, name, driver_version
        self.memory, self.devices, self.reject_cubins = memory, devices, reject_cubins
        self.kernels: dict[str, tuple[Kernel, KernelBinary]] = {}
        self.allocs: dict[int, np.ndarray] = {}
        self.pinned: dict[int, np.ndarray] = {}  # page-locked host memory (cuMemHostAlloc)
        self.ctx_refs = 0
        self.modules: list[_Module] = []
        self.launches: list[tuple[str, tuple[int, int, int], int, int, int]] = []  # name, grid, block, shared, cluster
        self.memsets = 0
        self.pools: dict[int, Pool] = {}
        self.fault: CUresult | None = None  # set by a kernel fault: every later call fails with it
        self.faults: list[str] = []  # what each fault was
        self._objects: dict[int, Any] = {}
        self._images: dict[int, Cubin] = {}
        self._lock = threading.RLock()
        self._init_streams()

    # -- test helpers -------------------------------------------------------------------------------
    def register(self, schedule: Schedule, binaries: Mapping[str, KernelBinary]) -> None:
        fresh: dict[str, tuple[Kernel, KernelBinary]] = {}
        for k in schedule.codes():  # arch launches included
            binary = binaries[k.name]
            fresh.setdefault(k.name, (k, binary))  # kernels sharing a name share their source
            self._image(binary)
        self.kernels.update(fresh)  # a later model's kernel of the same name replaces the earlier one

    def register_kernel(self, kernel: Kernel, binary: KernelBinary) -> None:
        """One kernel and its binary outside any schedule (a tuning bundle's candidate)."""
        self._image(binary)
        self.kernels[kernel.name] = (kernel, binary)

    def _image(self, binary: KernelBinary) -> None:
        for c in binary.cubins:  # the backend hands an image over by the address of its bytes
            self._images[np.frombuffer(c.data, np.uint8).ctypes.data] = c

    def live(self) -> dict[str, int]:
        return {
            "allocations": len(self.allocs),
            "pinned": len(self.pinned),
            "modules": sum(m.loaded for m in self.modules),
            "streams": len(self.streams),
            "events": len(self.events),
            "graphs": len(self.graphs),
            "graph_execs": len(self.execs),
            "contexts": self.ctx_refs,
        }

    def device_array(self, host: np.ndarray, dlpack: bool = False) -> Any:
        """A GPU-resident copy of ``host`` exposing ``__cuda_array_interface__`` (like a torch CUDA tensor), or with
        ``dlpack`` only ``__dlpack__`` (what benchmarks hand over for torch's tensors)."""
        host = np.ascontiguousarray(host)
        ptr = self.cuMemAlloc(max(host.nbytes, 1))[1]
        ctypes.memmove(ptr, host.ctypes.data, host.nbytes)
        return (DLPackTensor if dlpack else FakeTensor)(ptr, host.shape, host.dtype)

    def fail(self, error: CUresult, *calls: str) -> None:
        """From now on the named driver calls return ``error`` and do nothing. With no names every call does: the
        state of a GPU after a kernel fault (a "sticky" error), but for naming an error and binding the context
        to a thread, which are documented to fail only for host-side reasons."""
        names = calls or [n for n in dir(type(self)) if n.startswith("cu") and n not in _HOST_SIDE]
        for name in names:
            setattr(self, name, partial(_failed, error))  # shadows the method on this instance

    def settle(self) -> None:
        """Run all queued work, as time passing does on a GPU (no synchronize call is made or counted)."""
        with self._lock:
            self._drain(None)

    def read(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self._view(ptr, n).view(dtype).reshape(shape).copy()

    # -- pools: the release threshold, as CUDA applies it ------------------------------------------------------
    def cuMemPoolGetAttribute(self, pool: Any, attr: Any) -> tuple[CUresult, Any]:
        if id(pool) not in self.pools or attr != CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
            return CUresult.CUDA_ERROR_INVALID_VALUE, None
        return OK, cuuint64_t(pool.threshold)

    def cuStreamSynchronize(self, handle: Any) -> tuple[CUresult]:
        result = super().cuStreamSynchronize(handle)
        with self._lock:  # a pool keeps no more unused memory than its release threshold past a synchronize
            for pool in self.pools.values():
                while pool.threshold < sum(pool.sizes[p] for ptrs in pool.free.values() for p in ptrs):
                    ptrs = next(v for v in pool.free.values() if v)
                    ptr = ptrs.pop()
                    del pool.sizes[ptr]
                    self.allocs.pop(ptr, None)
        return result

    # -- bookkeeping --------------------------------------------------------------------------------
    def _handle(self, obj: Any) -> Any:
        self._objects[id(obj)] = obj
        return obj

    def _find(self, ptr: int, nbytes: int) -> tuple[np.ndarray, int] | None:
        for base, arr in self.allocs.items():
            if base <= ptr and ptr + nbytes <= base + arr.size:
                return arr, ptr - base
        return None

    def _view(self, ptr: int, nbytes: int) -> np.ndarray:
        hit = self._find(ptr, nbytes)
        if hit is None:
            raise _Fault(f"{nbytes} bytes at {ptr:#x} are not inside one allocation")
        arr, off = hit
        return arr[off : off + nbytes]

    # -- init, device, context ----------------------------------------------------------------------
    def cuInit(self, flags: int) -> tuple[CUresult]:
        return (OK,) if self.devices else (CUresult.CUDA_ERROR_NO_DEVICE,)

    def cuDeviceGetCount(self) -> tuple[CUresult, int]:
        return OK, self.devices

    def cuDeviceGet(self, ordinal: int) -> tuple[CUresult, int]:
        return (OK, ordinal) if 0 <= ordinal < self.devices else (CUresult.CUDA_ERROR_INVALID_DEVICE, 0)

    def cuDeviceGetName(self, length: int, dev: int) -> tuple[CUresult, bytes]:
        return OK, self.name.encode().ljust(length, b"\0")[:length]

    def cuDeviceGetAttribute(self, attr: Any, dev: int) -> tuple[CUresult, int]:
        a = CUdevice_attribute
        values = {
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.capability[0],
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.capability[1],
            a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 227 * 1024,
            a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132,
        }
        return (OK, values[attr]) if attr in values else (CUresult.CUDA_ERROR_INVALID_VALUE, 0)

    def cuDriverGetVersion(self) -> tuple[CUresult, int]:
        return OK, self.driver_version

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple[CUresult, Any]:
        with self._lock:
            self.ctx_refs += 1
        return OK, "fake-context"

    def cuDevicePrimaryCtxRelease(self, dev: int) -> tuple[CUresult]:
        with self._lock:
            if self.ctx_refs <= 0:
                return (CUresult.CUDA_ERROR_INVALID_CONTEXT,)
            self.ctx_refs -= 1
        return (OK,)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[CUresult]:
        return (OK,) if ctx == "fake-context" else (CUresult.CUDA_ERROR_INVALID_CONTEXT,)

    def cuGetErrorName(self, err: Any) -> tuple[CUresult, bytes]:
        return OK, CUresult(err).name.encode()

    # -- modules ------------------------------------------------------------------------------------
    def cuModuleLoadData(self, image: int) -> tuple[CUresult, Any]:
        with self._lock:
            cubin = self._images.get(image)  # a registered cubin (a real ELF one too), handed over in place
            text = "" if cubin is not None else ctypes.string_at(image).decode(errors="replace")
            if cubin is not None or text.startswith("FAKE-CUBIN "):
                arch = cubin.arch if cubin is not None else text.split()[1]
                code = cubin.meta.arch if cubin is not None else arch  # e.g. filed as sm_90, code for sm_90a
                body = code.removeprefix("sm_")
                major, minor, specific = int(body.rstrip("a")[:-1]), int(body.rstrip("a")[-1]), body.endswith("a")
                fits = (
                    (major, minor) == self.capability
                    if specific
                    else (major == self.capability[0] and minor <= self.capability[1])
                )
                if not fits:
                    return CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, None
                if self.reject_cubins:
                    return CUresult.CUDA_ERROR_UNSUPPORTED_PTX_VERSION, None
                m = _Module(arch)
            elif ".entry" in text:
                version = re.search(r"\.version (\d+)\.(\d+)", text)
                need = (int(version[1]), int(version[2])) if version else (0, 0)
                supports = (9, self.driver_version // 10 % 100) if self.driver_version >= 13000 else (8, 8)
                if need > supports:
                    return CUresult.CUDA_ERROR_UNSUPPORTED_PTX_VERSION, None
                m = _Module("ptx")
            else:
                return CUresult.CUDA_ERROR_INVALID_IMAGE, None
            self.modules.append(m)
            return OK, self._handle(m)

    def cuModuleUnload(self, module: Any) -> tuple[CUresult]:
        if not isinstance(module, _Module) or not module.loaded:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        module.loaded = False
        return (OK,)

    def cuModuleGetFunction(self, module: Any, name: bytes) -> tuple[CUresult, Any]:
        entry = self.kernels.get(name.decode())
        if entry is None or not module.loaded:
            return CUresult.CUDA_ERROR_NOT_FOUND, None
        binary = entry[1]
        meta = binary.ptx_meta if module.arch == "ptx" else binary.cubin(module.arch).meta
        return OK, self._handle(_Function(name.decode(), module, meta))

    def cuFuncGetAttribute(self, attr: Any, function: Any) -> tuple[CUresult, int]:
        return OK, 0

    def cuFuncSetAttribute(self, function: Any, attr: Any, value: int) -> tuple[CUresult]:
        if attr == CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            function.max_dynamic_shared = value
        return (OK,)

    # -- launches -----------------------------------------------------------------------------------
    def cuLaunchKernel(
        self,
        f: Any,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared: int,
        stream: Any,
        params: int,
        extra: Any,
    ) -> tuple[CUresult]:
        if f.meta.num_ctas != 1:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)  # a cluster kernel launched without its cluster
        return self._launch(f, (gx, gy, gz), (bx, by, bz), shared, stream, params, 1)

    def cuLaunchKernelEx(self, cfg: CUlaunchConfig, f: Any, params: int, extra: Any) -> tuple[CUresult]:
        cluster = 1
        for a in cfg.attrs[: cfg.numAttrs]:
            if a.id == CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
                cluster = a.value.clusterDim.x
        grid = (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ)
        block = (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ)
        return self._launch(f, grid, block, cfg.sharedMemBytes, cfg.hStream, params, cluster)

    def _launch(self, f: _Function, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int,
                stream: Any, params: int, cluster: int) -> tuple[CUresult]:  # fmt: skip
        m = f.meta
        bad = (
            not f.module.loaded
            or block != (m.threads, 1, 1)
            or shared != m.shared
            or shared > f.max_dynamic_shared
            or cluster != m.num_ctas
            or grid[0] % cluster
        )
        if bad:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        values = self._read_params(f, params)
        with self._lock:
            return self._enqueue(stream, ("launch", f, grid, cluster, values))

    def _read_params(self, f: _Function, params: int) -> tuple[Any, ...]:
        """The parameter values behind a ``void**`` kernelParams address, by the function's parameter types."""
        m = f.meta
        slots = (ctypes.c_void_p * len(m.params)).from_address(params)
        values = []
        for p, t in zip(slots, m.params):
            values.append(
                ctypes.c_uint64.from_address(p).value if t.startswith("*") else _SCALAR[t].from_address(p).value
            )
        return tuple(values)

    def _execute(self, op: tuple[Any, ...]) -> tuple[CUresult]:
        """Run one queued item (see fake_cuda_streams for when). After a fault, nothing runs any more."""
        if self.fault is not None:
            return (self.fault,)
        kind = op[0]
        try:
            if kind == "memcpy":
                dst, src, n = op[1:4]
                ctypes.memmove(dst, src, n)
            elif kind == "memset":
                _, ptr, value, count = op
                self._view(ptr, 4 * count).view(np.uint32)[:] = value
                self.memsets += 1
            else:
                _, f, grid, cluster, values = op
                self._run_kernel(f, grid, cluster, values)
        except _Fault as e:
            self.faults.append(str(e))
            self.fault = CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
            self.fail(self.fault)
            return (self.fault,)
        return (OK,)

    def _run_kernel(self, f: _Function, grid: tuple[int, int, int], cluster: int, values: tuple[Any, ...]) -> None:
        from aotc.ir.dtypes import DType
        from aotc.runtime.backends.address_fence import AddressFenceError
        from aotc.runtime.backends.triton_interp import launch

        kernel, _ = self.kernels[f.name]
        m = f.meta
        ctas = grid[0] * grid[1] * grid[2]
        *kernel_values, global_scratch, profile_scratch = values
        for ptr, size in ((global_scratch, m.global_scratch_size), (profile_scratch, m.profile_scratch_size)):
            if size and (not ptr or self._find(ptr, ctas * size) is None):
                raise _Fault(f"{f.name}: scratch of {ctas} x {size} bytes is not passed")
            if not size and ptr:
                raise _Fault(f"{f.name}: a scratch pointer is passed for a size of 0")
        args: list[Any] = []
        for a, v in zip(kernel.args, kernel_values):
            if not a.type.startswith("*"):
                args.append(int(v) if a.type != "fp32" else float(v))
                continue
            dt = DType.bfloat16.np if a.type == "*bf16" else np.dtype(_NP[a.type[1:]])
            hit = self._find(v, 1) if v else None
            if hit is None:
                if v:
                    raise _Fault(f"{f.name}: argument {a.name} points outside every allocation")
                args.append(np.empty(0, dt))
                continue
            arr, off = hit
            n = (arr.size - off) // dt.itemsize
            args.append(arr[off : off + n * dt.itemsize].view(dt))
        self.launches.append((f.name, grid, m.threads, m.shared, cluster))
        try:
            with np.errstate(all="ignore"):
                launch(kernel, (grid[0] // cluster, grid[1], grid[2]), args, extents=True)
        except AddressFenceError as e:  # an illegal address, as the GPU would fault on
            raise _Fault(str(e)) from None


def _failed(error: CUresult, *_args: Any) -> tuple[CUresult, None]:
    """A failed call: its error, and None where a value would be (so callers unpacking two values still can)."""
    return error, None


class _Fault(Exception):
    """A kernel touched memory it does not own (a real GPU: CUDA_ERROR_ILLEGAL_ADDRESS)."""
