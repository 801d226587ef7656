"""Counting the CUDA driver calls a call makes, and a driver whose per-call work returns at once.

``Counted(driver)`` wraps any driver module (the fake, or the real ``cuda.bindings.driver``) and records the name
of every ``cu*`` function called through it, in order, so a test can assert what one call of aotc costs in
driver calls (the counts are deterministic; times are never asserted). ``InstantDriver`` is the fake driver with
the work a call queues (launches, copies, memsets, waits, graph launches) dropped instead of run: what is left
of a call's time is aotc's own Python, which benchmarks/bench_host.py measures.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fake_cuda import FakeDriver
from fake_cuda_types import CUresult

OK = CUresult.CUDA_SUCCESS

# What a call may cost: the kinds of driver call a test counts separately.
ALLOCATIONS = frozenset({"cuMemAlloc", "cuMemAllocFromPoolAsync", "cuMemHostAlloc", "cuMemAllocHost"})
FREES = frozenset({"cuMemFree", "cuMemFreeAsync", "cuMemFreeHost"})
SYNCS = frozenset({"cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize"})
COPIES = frozenset({"cuMemcpyDtoDAsync", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync"})
LAUNCHES = frozenset({"cuLaunchKernel", "cuLaunchKernelEx"})


class Counted:
    """A driver module seen through a recorder: ``calls`` lists every ``cu*`` call's name since ``reset()``."""

    def __init__(self, driver: Any) -> None:
        object.__setattr__(self, "_driver", driver)
        object.__setattr__(self, "calls", [])

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._driver, name)
        if not name.startswith("cu") or not callable(value):
            return value
        calls = self.calls

        def counted(*args: Any) -> Any:
            calls.append(name)
            return value(*args)

        return counted

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._driver, name, value)

    def reset(self) -> None:
        self.calls.clear()

    def counts(self) -> Counter[str]:
        return Counter(self.calls)

    def of(self, kinds: frozenset[str]) -> list[str]:
        return [c for c in self.calls if c in kinds]


class InstantDriver(FakeDriver):
    """The fake driver with queued work dropped: launches, copies, memsets, event records and waits, graph launches
    and synchronizes return success at once without running anything (their arguments are not even read). Memory,
    streams, events, graphs and modules are still made and checked, so aotc runs as it would, computing nothing."""

    def _enqueue(self, handle: Any, op: tuple[Any, ...]) -> tuple[CUresult]:
        s = self._stream(handle)
        if s is not None and s.capturing is not None:
            return super()._enqueue(handle, op)
        return (OK,)

    def _drain(self, target: Any) -> tuple[CUresult]:
        return (OK,)

    def cuLaunchKernel(self, *args: Any) -> tuple[CUresult]:
        stream = args[8]
        if self._capturing(stream):
            return super().cuLaunchKernel(*args)
        return (OK,)

    def cuGraphLaunch(self, exec_: Any, handle: Any) -> tuple[CUresult]:
        return (OK,)

    def cuMemcpyHtoDAsync(self, dst: int, src: int, n: int, stream: Any) -> tuple[CUresult]:
        return (OK,)

    def cuMemcpyDtoHAsync(self, dst: int, src: int, n: int, stream: Any) -> tuple[CUresult]:
        if self._capturing(stream):
            return super().cuMemcpyDtoHAsync(dst, src, n, stream)
        return (OK,)

    def cuMemcpyDtoDAsync(self, dst: int, src: int, n: int, stream: Any) -> tuple[CUresult]:
        return (OK,)

    def cuMemsetD32Async(self, ptr: int, value: int, count: int, stream: Any) -> tuple[CUresult]:
        return (OK,)

    def cuStreamSynchronize(self, handle: Any) -> tuple[CUresult]:
        return (OK,)
