"""A thin, checked layer over NVIDIA's ``cuda.bindings.driver``: one ``Device`` per GPU ordinal.

The bindings are imported on first cuda use only (``import aotc.runtime`` never pulls them in). Tests pass
their own driver module (``Device(driver=fake)``); nothing here patches ``sys.modules``. Every call's
``CUresult`` is checked: a failure is an ``ExecError`` carrying the CUDA error name, an out-of-memory one
also the bytes asked for. After a kernel fault (a sticky error) the device remembers it, and the follow-on
errors of calls that only release resources are dropped (see ``Device.check``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from aotc.errors import ExecError, UnsupportedError

INSTALL_HINT = "pip install aotc[cuda]"
_SMALL_SHARED = 48 * 1024  # dynamic shared memory above this needs an opt-in attribute per function

# Errors that leave the context unusable: every later call fails with the same error until the process exits
# (the driver API documentation of each says so).
STICKY = frozenset(
    {
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_LAUNCH_TIMEOUT",
        "CUDA_ERROR_ASSERT",
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "CUDA_ERROR_INVALID_PC",
        "CUDA_ERROR_LAUNCH_FAILED",
    }
)
# Calls that only give something back. After a sticky error they fail too, and there is nothing to free.
RELEASES = frozenset(
    {
        "cuMemFree",
        "cuStreamDestroy",
        "cuEventDestroy",
        "cuGraphDestroy",
        "cuGraphExecDestroy",
        "cuModuleUnload",
        "cuDevicePrimaryCtxRelease",
        "cuMemFreeAsync",
        "cuMemFreeHost",
        "cuMemPoolDestroy",
    }
)
_UNSET = object()


def import_driver(label: str = "cuda") -> Any:
    """``cuda.bindings.driver``, or UnsupportedError saying how to install it."""
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise UnsupportedError(
            f"device {label!r} is not available: NVIDIA's cuda-bindings is not installed ({e}); {INSTALL_HINT}"
        ) from None
    return driver


class CudaError(ExecError):
    """A CUDA driver call failed; ``name`` is the CUresult's name (e.g. CUDA_ERROR_OUT_OF_MEMORY)."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    ordinal: int
    name: str
    capability: tuple[int, int]
    driver_version: int  # 1000 * major + 10 * minor, as cuDriverGetVersion gives it
    shared_optin: int  # the most dynamic + static shared memory one block may opt in to

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    @property
    def driver_cuda(self) -> str:
        return f"{self.driver_version // 1000}.{self.driver_version % 1000 // 10}"

    def __str__(self) -> str:
        return f"{self.name} ({self.arch}, CUDA driver {self.driver_cuda})"


class Device:
    """The primary context of one GPU, made current on each thread that uses it, with checked calls.

    ``close()`` releases the primary context once every holder (the backend, live device arrays) let go.
    """

    def __init__(self, driver: Any = None, ordinal: int = 0, label: str | None = None) -> None:
        label = label or ("cuda" if ordinal == 0 else f"cuda:{ordinal}")
        self.label = label  # the device as the caller named it, for messages
        self.drv = import_driver(label) if driver is None else driver
        self._success = self.drv.CUresult.CUDA_SUCCESS
        self.fault: str | None = None  # the first sticky error a call reported: the context is lost
        self._local = threading.local()
        # Reentrant: garbage collection can free a DeviceMemory (and so release) inside hold().
        self._lock = threading.RLock()
        try:
            err = self.drv.cuInit(0)[0]
        except Exception as e:  # a missing libcuda surfaces as a RuntimeError from the bindings
            raise UnsupportedError(f"device {label!r} is not available: no CUDA driver ({e})") from None
        if err != self._success:
            raise UnsupportedError(
                f"device {label!r} is not available: no usable CUDA driver or GPU (cuInit: {self.error_name(err)})"
            )
        count = self.get("cuDeviceGetCount", self.drv.cuDeviceGetCount())
        if not 0 <= ordinal < count:
            raise UnsupportedError(f"device {label!r} is not available: the driver sees {count} GPU(s)")
        self.dev = self.get("cuDeviceGet", self.drv.cuDeviceGet(ordinal))
        self.info = self._query(ordinal)
        self.ctx = self.get("cuDevicePrimaryCtxRetain", self.drv.cuDevicePrimaryCtxRetain(self.dev))
        self._holders = 1
        self._pool: Any = _UNSET
        self.pool_note = ""  # why there is no pool, when there is none
        self.make_current()

    def _query(self, ordinal: int) -> DeviceInfo:
        d = self.drv
        attr = d.CUdevice_attribute
        raw = self.get("cuDeviceGetName", d.cuDeviceGetName(256, self.dev))
        name = raw.split(b"\0", 1)[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        major = self.get(
            "cuDeviceGetAttribute", d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev)
        )
        minor = self.get(
            "cuDeviceGetAttribute", d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev)
        )
        optin = self.get(
            "cuDeviceGetAttribute",
            d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self.dev),
        )
        version = self.get("cuDriverGetVersion", d.cuDriverGetVersion())
        return DeviceInfo(ordinal, name, (int(major), int(minor)), int(version), int(optin))

    # -- checked calls -------------------------------------------------------------------------------
    def error_name(self, err: Any) -> str:
        try:
            res, name = self.drv.cuGetErrorName(err)
            if res == self._success and name:
                return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # the name is for a message: never let it hide the error itself
            pass
        return str(getattr(err, "name", err))

    def check(self, what: str, result: Any) -> None:
        """Raise CudaError unless ``result`` (a driver call's return tuple, or its CUresult) is success.

        Once a sticky error was raised, a failing release call (``RELEASES``) returns quietly instead: the fault
        reached the caller at the call that saw it, as PyTorch reports it, and PyTorch's teardown (freeing a
        tensor, resetting a CUDA graph) never raises. So closing after a fault frees what it can and shows the
        fault, not an echo of it that would replace the fault in a ``with`` block's traceback."""
        err = result[0] if isinstance(result, tuple) else result
        if err != self._success:
            name = self.error_name(err)
            if self.fault is not None and what in RELEASES:
                return
            self._note(name)
            raise CudaError(f"CUDA call {what} failed on {self.info_text()}: {name}", name)

    def _note(self, name: str) -> None:
        if name in STICKY and self.fault is None:
            self.fault = name

    def get(self, what: str, result: tuple[Any, ...]) -> Any:
        """The value a driver call returned (its second element), after checking its CUresult."""
        self.check(what, result)
        return result[1]

    def info_text(self) -> str:
        info = getattr(self, "info", None)
        return str(info) if info is not None else "the GPU"

    def make_current(self) -> None:
        """Bind the primary context to the calling thread (once per thread)."""
        if getattr(self._local, "ctx", None) is not self.ctx:
            self.check("cuCtxSetCurrent", self.drv.cuCtxSetCurrent(self.ctx))
            self._local.ctx = self.ctx

    # -- memory --------------------------------------------------------------------------------------
    def alloc(self, nbytes: int, what: str) -> int:
        """``nbytes`` of device memory (256-aligned); 0 for an empty request. OOM -> ExecError with the size."""
        if nbytes <= 0:
            return 0
        self.make_current()
        err, ptr = self.drv.cuMemAlloc(nbytes)
        if err != self._success:
            name = self.error_name(err)
            self._note(name)
            raise CudaError(
                f"cannot allocate {nbytes} bytes of GPU memory for {what} on {self.info_text()}: {name}", name
            )
        return int(ptr)

    def free(self, ptr: int) -> None:
        if ptr:
            self.make_current()
            self.check("cuMemFree", self.drv.cuMemFree(ptr))

    def pool(self) -> Any | None:
        """aotc's stream-ordered memory pool on this GPU, made on first use; None where the driver cannot make one.

        Outputs handed to the caller come from it: an allocation there costs microseconds, where cuMemAlloc and
        cuMemFree (which synchronizes the device) cost a call's whole budget. Its release threshold is unlimited,
        so memory a freed output held stays in the pool for the next call instead of going back to the driver.
        A pool of aotc's own, so that other libraries' use of the device's default pool is unchanged."""
        with self._lock:
            if self._pool is _UNSET:
                self._pool = self._create_pool()
            return self._pool

    def _create_pool(self) -> Any | None:
        d = self.drv
        try:
            props = d.CUmemPoolProps()
            props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
            props.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            props.location.id = self.info.ordinal
            err, pool = d.cuMemPoolCreate(props)
        except Exception:  # bindings without pools: outputs fall back to cuMemAlloc, which is only slower
            return None
        if err != self._success:
            return None
        # Without its release threshold raised, a pool hands every freed block back to the driver at each
        # synchronize, and the next allocation maps fresh memory (~0.3 ms for a few MB on an H200: what an eager
        # call with device outputs paid before outputs stopped being allocated per call). A pool whose threshold
        # does not take is no better than cuMemAlloc, so it is not used: ``pool_note`` says why.
        attr = d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
        want = 2**64 - 1
        try:
            err = d.cuMemPoolSetAttribute(pool, attr, d.cuuint64_t(want))[0]
            got = d.cuMemPoolGetAttribute(pool, attr) if err == self._success else (err, None)
            kept = got[0] == self._success and int(got[1]) == want
            reason = self.error_name(err) if err != self._success else f"reads back as {got[1]}"
        except Exception as e:  # bindings whose attribute helpers differ: treated as the attribute not taking
            kept, reason = False, f"{type(e).__name__}: {e}"
        if not kept:
            self.pool_note = f"the pool's release threshold could not be set ({reason})"
            d.cuMemPoolDestroy(pool)
            return None
        return pool

    def alloc_async(self, nbytes: int, stream: Any, what: str) -> tuple[int, bool]:
        """``nbytes`` from the pool, ordered on ``stream``: (address, pooled). Falls back to ``alloc`` (pooled
        False) where there is no pool."""
        if nbytes <= 0:
            return 0, False
        pool = self.pool()
        if pool is None:
            return self.alloc(nbytes, what), False
        self.make_current()
        err, ptr = self.drv.cuMemAllocFromPoolAsync(nbytes, pool, stream)
        if err != self._success:
            name = self.error_name(err)
            self._note(name)
            raise CudaError(
                f"cannot allocate {nbytes} bytes of GPU memory for {what} on {self.info_text()}: {name}", name
            )
        return int(ptr), True

    def free_async(self, ptr: int) -> None:
        """Give pooled memory back, ordered after the work queued on the legacy default stream (where a caller's
        framework queues by default); the pool reuses it only once that is done."""
        if ptr:
            self.make_current()
            self.check("cuMemFreeAsync", self.drv.cuMemFreeAsync(ptr, 0))

    def host_alloc(self, nbytes: int, what: str) -> int:
        """``nbytes`` of page-locked host memory (copies to and from it are asynchronous and may be captured in a
        CUDA graph); 0 for an empty request."""
        if nbytes <= 0:
            return 0
        self.make_current()
        err, ptr = self.drv.cuMemHostAlloc(nbytes, 0)
        if err != self._success:
            name = self.error_name(err)
            raise CudaError(f"cannot allocate {nbytes} bytes of pinned host memory for {what}: {name}", name)
        return int(ptr)

    def host_free(self, ptr: int) -> None:
        if ptr:
            self.make_current()
            self.check("cuMemFreeHost", self.drv.cuMemFreeHost(ptr))

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory, as the driver reports them."""
        self.make_current()
        res = self.drv.cuMemGetInfo()
        self.check("cuMemGetInfo", res)
        return int(res[1]), int(res[2])

    def upload(self, dst: int, host_ptr: int, nbytes: int, stream: Any) -> None:
        if nbytes:
            self.check("cuMemcpyHtoDAsync", self.drv.cuMemcpyHtoDAsync(dst, host_ptr, nbytes, stream))

    def download(self, host_ptr: int, src: int, nbytes: int, stream: Any) -> None:
        if nbytes:
            self.check("cuMemcpyDtoHAsync", self.drv.cuMemcpyDtoHAsync(host_ptr, src, nbytes, stream))

    def copy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        if nbytes:
            self.check("cuMemcpyDtoDAsync", self.drv.cuMemcpyDtoDAsync(dst, src, nbytes, stream))

    def pointer_ordinal(self, ptr: int) -> int | None:
        """The ordinal of the GPU holding ``ptr``, or None when the driver does not know the pointer."""
        attr = self.drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        res = self.drv.cuPointerGetAttribute(attr, ptr)
        return int(res[1]) if res[0] == self._success else None

    # -- streams and graphs --------------------------------------------------------------------------
    def stream(self) -> Any:
        self.make_current()
        # Flags are plain unsigned ints in the bindings' signatures; enums are passed where they are typed so.
        flags = int(self.drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        return self.get("cuStreamCreate", self.drv.cuStreamCreate(flags))

    def destroy_stream(self, stream: Any) -> None:
        self.check("cuStreamDestroy", self.drv.cuStreamDestroy(stream))

    def sync(self, stream: Any) -> None:
        self.check("cuStreamSynchronize", self.drv.cuStreamSynchronize(stream))

    def event(self) -> Any:
        flags = int(self.drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        return self.get("cuEventCreate", self.drv.cuEventCreate(flags))

    def destroy_event(self, event: Any) -> None:
        self.check("cuEventDestroy", self.drv.cuEventDestroy(event))

    def destroy_graph(self, graph: Any) -> None:
        self.check("cuGraphDestroy", self.drv.cuGraphDestroy(graph))

    def destroy_graph_exec(self, graph_exec: Any) -> None:
        self.check("cuGraphExecDestroy", self.drv.cuGraphExecDestroy(graph_exec))

    def record(self, event: Any, stream: Any) -> None:
        self.check("cuEventRecord", self.drv.cuEventRecord(event, stream))

    def wait_event(self, stream: Any, event: Any) -> None:
        self.check("cuStreamWaitEvent", self.drv.cuStreamWaitEvent(stream, event, 0))

    def wait_for(self, stream: Any, other: Any) -> None:
        """Make ``stream`` wait for the work queued so far on ``other`` (a caller's stream handle)."""
        event = self.event()
        try:
            self.record(event, other)
            self.wait_event(stream, event)
        finally:
            self.destroy_event(event)

    # -- lifetime ------------------------------------------------------------------------------------
    def hold(self) -> Device:
        with self._lock:
            if self._holders <= 0:
                raise ExecError(f"{self.info_text()}: the CUDA context was already released")
            self._holders += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            last = self._holders == 0
        if last:
            pool, self._pool = self._pool, None
            try:
                if pool is not None and pool is not _UNSET:
                    self.check("cuMemPoolDestroy", self.drv.cuMemPoolDestroy(pool))
            finally:
                self.check("cuDevicePrimaryCtxRelease", self.drv.cuDevicePrimaryCtxRelease(self.dev))


def needs_shared_optin(shared: int) -> bool:
    return shared > _SMALL_SHARED
