"""Per-call GPU resources: a ``Slot`` (a stream, one memory block, parameter buffers) taken from a pool so
concurrent calls never share one, and ``GraphEntry``: a slot with a CUDA graph captured for one shape."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from aotc.runtime.backends.cuda.arrays import DeviceMemory
from aotc.runtime.backends.cuda.driver import Device
from aotc.runtime.backends.cuda.launch import Params
from aotc.runtime.backends.cuda.streams import StreamPlan


def release_all(steps: Iterable[Callable[[], object]]) -> None:
    """Run every release step even when an earlier one failed, then raise the first error: one failed free
    must not leak the rest, and the first error is the cause (the later ones are usually its echoes)."""
    first: Exception | None = None
    for step in steps:
        try:
            step()
        except Exception as e:
            if first is None:
                first = e
    if first is not None:
        raise first


class Slot:
    def __init__(self, device: Device, counts: list[int], what: str) -> None:
        self.device = device
        self.what = what
        self.stream = device.stream()
        self.memory: DeviceMemory | None = None
        self.params = [Params(n) for n in counts]
        self.aux: list[Any] = []  # streams for independent branches, created on first need
        self.events: dict[int, Any] = {}  # by launch index; -1 is the fork after the call's first work

    @property
    def base(self) -> int:
        return self.memory.ptr if self.memory is not None else 0

    def reserve(self, nbytes: int) -> None:
        """Grow the block to ``nbytes`` (never shrinks; an out-of-memory raises with the bytes asked for)."""
        if self.memory is not None and self.memory.nbytes >= nbytes:
            return
        if self.memory is not None:
            self.memory.free()
            self.memory = None
        if nbytes:
            self.memory = DeviceMemory(self.device, nbytes, self.what)

    def prepare_streams(self, plan: StreamPlan) -> None:
        """Create (outside any capture) the streams and events ``plan`` needs."""
        while len(self.aux) < plan.count - 1:
            self.aux.append(self.device.stream())
        for key in (-1, *plan.records):
            if key not in self.events:
                self.events[key] = self.device.event()

    def destroy(self) -> None:
        """Free the memory, events and streams (each tried; the first error is raised). Idempotent."""
        dev = self.device
        steps: list[Callable[[], object]] = [self.memory.free] if self.memory is not None else []
        steps += [partial(dev.destroy_event, e) for e in self.events.values()]
        steps += [partial(dev.destroy_stream, s) for s in (self.stream, *self.aux) if s is not None]
        self.memory, self.events, self.aux, self.stream = None, {}, [], None
        release_all(steps)


class SlotPool:
    """Idle slots of one program. A slot given back after ``close()`` is destroyed instead of kept."""

    def __init__(self, device: Device, counts: list[int], what: str) -> None:
        self._device, self._counts, self._what = device, counts, what
        self._idle: list[Slot] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> Slot:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return Slot(self._device, self._counts, self._what)

    def give(self, slot: Slot) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(slot)
                return
        slot.destroy()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        release_all(slot.destroy for slot in idle)


class GraphEntry:
    """A CUDA graph of one shape's launches over its own slot (the addresses it baked in stay valid).

    ``lock`` is held by the call replaying it; a second call for the same shape runs eagerly meanwhile."""

    def __init__(self, slot: Slot) -> None:
        self.slot = slot
        self.graph: Any = None
        self.exec: Any = None
        self.lock = threading.Lock()

    def destroy(self) -> None:
        """Free the graph, its executable and the slot (each tried; the first error is raised). Waits for a call
        replaying it, so whoever holds ``lock`` must release it on every path, or this waits forever."""
        with self.lock:
            dev = self.slot.device
            steps: list[Callable[[], object]] = []
            if self.exec is not None:
                steps.append(partial(dev.destroy_graph_exec, self.exec))
            if self.graph is not None:
                steps.append(partial(dev.destroy_graph, self.graph))
            self.exec = self.graph = None
            release_all([*steps, self.slot.destroy])
