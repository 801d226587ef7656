"""Per-call GPU resources: a ``Slot`` (a stream, one memory block, parameter buffers) taken from a pool so
concurrent calls never share one, and ``GraphEntry``: a slot with a CUDA graph captured for one shape."""

from __future__ import annotations

import threading
from typing import Any

from aotc.runtime.backends.cuda.arrays import DeviceMemory
from aotc.runtime.backends.cuda.driver import Device
from aotc.runtime.backends.cuda.launch import Params
from aotc.runtime.backends.cuda.streams import StreamPlan


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
        try:
            if self.memory is not None:
                self.memory.free()
                self.memory = None
        finally:
            events, self.events = self.events, {}
            for event in events.values():
                self.device.destroy_event(event)
            streams, self.aux = [self.stream, *self.aux], []
            self.stream = None
            for stream in streams:
                if stream is not None:
                    self.device.destroy_stream(stream)


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
        for slot in idle:
            slot.destroy()


class GraphEntry:
    """A CUDA graph of one shape's launches over its own slot (the addresses it baked in stay valid).

    ``lock`` is held by the call replaying it; a second call for the same shape runs eagerly meanwhile."""

    def __init__(self, slot: Slot) -> None:
        self.slot = slot
        self.graph: Any = None
        self.exec: Any = None
        self.lock = threading.Lock()

    def destroy(self) -> None:
        with self.lock:
            drv, dev = self.slot.device.drv, self.slot.device
            try:
                if self.exec is not None:
                    dev.check("cuGraphExecDestroy", drv.cuGraphExecDestroy(self.exec))
                if self.graph is not None:
                    dev.check("cuGraphDestroy", drv.cuGraphDestroy(self.graph))
            finally:
                self.exec = self.graph = None
                self.slot.destroy()
