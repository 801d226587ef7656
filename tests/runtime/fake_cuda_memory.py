"""Device memory of the fake driver (tests/runtime/fake_cuda.py): allocations, stream-ordered pools, copies and
memsets. Device memory is host memory, a numpy block per allocation, 256-byte aligned and filled with garbage as
fresh device memory is; a device pointer is the block's real address, and a copy is a ``memmove`` queued on its
stream."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fake_cuda_types import CUmemLocationType, CUmemPool_attribute, CUmemPoolProps, CUresult, cuuint64_t

OK = CUresult.CUDA_SUCCESS


@dataclass
class Pool:
    threshold: int = 0
    used: set[int] = field(default_factory=set)
    free: dict[int, list[int]] = field(default_factory=dict)  # by size
    sizes: dict[int, int] = field(default_factory=dict)


class MemoryMixin:
    """Needs ``self._lock`` (an RLock), ``self.allocs`` (base address -> block), ``self.memory`` (bytes),
    ``self.pools``, ``self._handle(obj)``, ``self._find(ptr, nbytes)`` and the streams' ``_stream``, ``_capturing``,
    ``_enqueue`` and ``_drain``; ``self.pinned`` (base address -> page-locked host block)."""

    _lock: Any
    allocs: dict[int, np.ndarray]
    memory: int
    pools: dict[int, Pool]

    # -- memory -------------------------------------------------------------------------------------
    def cuMemAlloc(self, nbytes: int) -> tuple[CUresult, int]:
        with self._lock:
            used = sum(a.size for a in self.allocs.values())
            if nbytes <= 0:
                return CUresult.CUDA_ERROR_INVALID_VALUE, 0
            if used + nbytes > self.memory:
                return CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0
            raw = np.empty(nbytes + 256, np.uint8)
            start = -raw.ctypes.data % 256
            arr = raw[start : start + nbytes]
            arr[:] = 0xCD  # fresh device memory holds garbage, not zeros
            self.allocs[arr.ctypes.data] = arr
            return OK, arr.ctypes.data

    def cuMemFree(self, ptr: int) -> tuple[CUresult]:
        with self._lock:
            self._drain(None)  # freeing synchronizes the device, as cuMemFree does
            return (OK,) if self.allocs.pop(int(ptr), None) is not None else (CUresult.CUDA_ERROR_INVALID_VALUE,)

    # -- stream-ordered pools: freed blocks stay in their pool (counted as used) and are reused by size --------
    def cuMemPoolCreate(self, props: CUmemPoolProps) -> tuple[CUresult, Any]:
        if props.location.type != CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE or props.location.id != 0:
            return CUresult.CUDA_ERROR_INVALID_VALUE, None
        pool = Pool()
        self.pools[id(pool)] = pool
        return OK, self._handle(pool)

    def cuMemPoolSetAttribute(self, pool: Any, attr: CUmemPool_attribute, value: cuuint64_t) -> tuple[CUresult]:
        if id(pool) not in self.pools or not isinstance(value, cuuint64_t):
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        pool.threshold = value.value
        return (OK,)

    def cuMemAllocFromPoolAsync(self, nbytes: int, pool: Any, stream: Any) -> tuple[CUresult, int]:
        with self._lock:
            if id(pool) not in self.pools or self._stream(stream) is None:
                return CUresult.CUDA_ERROR_INVALID_VALUE, 0
            free = pool.free.get(nbytes)
            if free:
                ptr = free.pop()
                pool.used.add(ptr)
                return OK, ptr
        err, ptr = self.cuMemAlloc(nbytes)
        if err == OK:
            pool.used.add(ptr)
            pool.sizes[ptr] = nbytes
        return err, ptr

    def cuMemFreeAsync(self, ptr: int, stream: Any) -> tuple[CUresult]:
        with self._lock:
            pool = next((p for p in self.pools.values() if ptr in p.used), None)
            if pool is None or self._stream(stream) is None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            # Reuse only after the work queued so far is done (the legacy stream orders after every stream).
            self._drain(None)
            pool.used.discard(ptr)
            pool.free.setdefault(pool.sizes[ptr], []).append(ptr)
            return (OK,)

    def cuMemPoolDestroy(self, pool: Any) -> tuple[CUresult]:
        with self._lock:
            if self.pools.pop(id(pool), None) is None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            for ptrs in pool.free.values():  # blocks still handed out are released when freed (here: never)
                for ptr in ptrs:
                    self.allocs.pop(ptr, None)
            return (OK,)

    def cuMemGetInfo(self) -> tuple[CUresult, int, int]:
        used = sum(a.size for a in self.allocs.values())
        return OK, self.memory - used, self.memory

    def _copy(self, dst: int, src: int, n: int, stream: Any, dst_dev: bool, src_dev: bool) -> tuple[CUresult]:
        with self._lock:
            host = src if dst_dev and not src_dev else dst if src_dev and not dst_dev else None
            pinned = host is not None and self._pinned_at(host, n)
            if self._capturing(stream) and not pinned:  # a graph may copy to and from page-locked memory only
                return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
            if (dst_dev and self._find(dst, n) is None) or (src_dev and self._find(src, n) is None):
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            if dst_dev and not src_dev and not pinned:
                # From pageable memory the driver stages the bytes before it returns: the caller may reuse them.
                staged = np.frombuffer(ctypes.string_at(src, n), np.uint8).copy()
                return self._enqueue(stream, ("memcpy", dst, staged.ctypes.data, n, staged))  # the op keeps it
            return self._enqueue(stream, ("memcpy", dst, src, n))

    # -- page-locked host memory: copies to and from it are truly asynchronous, and may be captured --------------
    def cuMemHostAlloc(self, nbytes: int, flags: int) -> tuple[CUresult, int]:
        with self._lock:
            if nbytes <= 0:
                return CUresult.CUDA_ERROR_INVALID_VALUE, 0
            block = np.zeros(nbytes, np.uint8)
            self.pinned[block.ctypes.data] = block
            return OK, block.ctypes.data

    def cuMemFreeHost(self, ptr: int) -> tuple[CUresult]:
        with self._lock:
            self._drain(None)  # a copy still queued into it must not write freed memory
            return (OK,) if self.pinned.pop(int(ptr), None) is not None else (CUresult.CUDA_ERROR_INVALID_VALUE,)

    def _pinned_at(self, ptr: int, nbytes: int) -> bool:
        return any(base <= ptr and ptr + nbytes <= base + b.size for base, b in self.pinned.items())

    def cuMemcpyHtoDAsync(self, dst: int, src: int, n: int, stream: Any) -> tuple[CUresult]:
        return self._copy(dst, src, n, stream, True, False)

    def cuMemcpyDtoHAsync(self, dst: int, src: int, n: int, stream: Any) -> tuple[CUresult]:
        # Into pageable host memory (all the fake has) the real copy is synchronous with the host: it returns
        # after the stream's earlier work and the copy itself ran, never writing the buffer once the caller
        # may have freed it. So run the stream's queue now, the copy last.
        with self._lock:
            queued = self._copy(dst, src, n, stream, False, True)
            if queued[0] != OK or self._pinned_at(dst, n):  # into page-locked memory: queued like any other copy
                return queued
            return self._drain(self._stream(stream))

    def cuMemcpyDtoDAsync(self, dst: int, src: int, n: int, stream: Any) -> tuple[CUresult]:
        return self._copy(dst, src, n, stream, True, True)

    def cuMemsetD32Async(self, ptr: int, value: int, count: int, stream: Any) -> tuple[CUresult]:
        with self._lock:
            if self._find(ptr, 4 * count) is None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            return self._enqueue(stream, ("memset", ptr, value, count))

    def cuPointerGetAttribute(self, attr: Any, ptr: int) -> tuple[CUresult, Any]:
        with self._lock:
            return (OK, 0) if self._find(int(ptr), 1) is not None else (CUresult.CUDA_ERROR_INVALID_VALUE, None)
