"""A session's states on the GPU: ``DeviceStates`` holds one device buffer per state (one block, each state at a
256-aligned offset), allocated at the session's first call and kept until ``close()``, outside every call's own
memory. Each shape the session calls at has its own preparation (prepared.py) whose parameters, and CUDA graph,
point at these buffers (``fixed``), so a call's state writes go straight into them: per call nothing of a state is
copied in either direction. ``reset()`` writes the initial values on the device; ``read(i)`` copies one state back.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from aotc.runtime.backends.cuda.arrays import DeviceMemory
from aotc.runtime.backends.cuda.driver import Device
from aotc.runtime.backends.cuda.plan import align
from aotc.runtime.backends.cuda.slots import release_all
from aotc.runtime.state import StateMemory, StateSpec

# Preparations one session keeps (each holds a call's work memory and maybe a CUDA graph): a prefill length and the
# one-token decode are two; a session that sees many prompt lengths drops the least recently used.
SESSION_SHAPES = 8


class DeviceStates(StateMemory):
    """One session's state buffers on ``device``. Not thread-safe: its Session serializes its calls."""

    def __init__(
        self, device: Device, specs: Sequence[StateSpec], env: Mapping[str, int], dims: tuple[int, ...]
    ) -> None:
        self.device = device
        self.specs = tuple(specs)
        self.dims = dims
        self.arrays = []  # nothing of the state lives on the host
        self.spare, self.binding = None, None
        self.shapes = [s.shape(env) for s in self.specs]
        self.sizes = [
            int(np.prod(shape, dtype=np.int64)) * s.type.dtype.itemsize for s, shape in zip(self.specs, self.shapes)
        ]
        offsets, total = [], 0
        for n in self.sizes:
            offsets.append(total)
            total = align(total + n)
        self._calls: OrderedDict[Any, Any] = OrderedDict()  # (program, shape key) -> Prepared
        self._memory = DeviceMemory(device, max(total, 1), "a session's states")
        self.ptrs = [self._memory.ptr + off for off in offsets]
        self._stream = device.stream()
        try:
            self.reset()
        except BaseException:
            self.close()
            raise

    def reset(self) -> None:
        """Every state back to its initial value, on the device (one upload per state, then a synchronize; a
        session resets between sequences, never per call)."""
        dev = self.device
        dev.make_current()
        for ptr, s, shape, n in zip(self.ptrs, self.specs, self.shapes, self.sizes):
            if n:
                init = np.ascontiguousarray(np.broadcast_to(np.asarray(s.init, s.type.dtype.np), shape))
                dev.upload(ptr, init.ctypes.data, n, self._stream)
                dev.sync(self._stream)  # the host array goes when this returns

    def read(self, index: int) -> np.ndarray:
        """A host copy of state ``index``'s current value (every call of the session was synchronized)."""
        s = self.specs[index]
        out = np.empty(self.shapes[index], s.type.dtype.np)
        if out.nbytes:
            self.device.make_current()
            self.device.download(out.ctypes.data, self.ptrs[index], out.nbytes, self._stream)
            self.device.sync(self._stream)
        return out

    @property
    def nbytes(self) -> int:
        return sum(self.sizes) if self._memory is not None else 0

    def prepared(self, key: Any, make: Callable[[], Any]) -> Any:
        """The session's preparation for ``key``, made by ``make`` the first time (the least recently used one
        beyond SESSION_SHAPES is closed)."""
        call = self._calls.get(key)
        if call is not None:
            self._calls.move_to_end(key)
            return call
        call = self._calls[key] = make()
        while len(self._calls) > SESSION_SHAPES:
            _close(self._calls.popitem(last=False)[1])
        return call

    def drop(self, key: Any, call: Any) -> None:
        """Forget a preparation its program retired (closed or evicted)."""
        if self._calls.get(key) is call:
            del self._calls[key]

    def close(self) -> None:
        """Free the preparations (each waits for its last call), then the buffers and the stream; idempotent."""
        calls, self._calls = list(self._calls.values()), OrderedDict()
        steps: list[Callable[[], object]] = [lambda c=c: _close(c) for c in calls]
        if self._memory is not None:
            steps.append(self._memory.free)
        if self._stream is not None:
            steps.append(lambda s=self._stream: self.device.destroy_stream(s))
        self._memory, self._stream, self.arrays = None, None, []
        release_all(steps)


def _close(call: Any) -> None:
    call.program.forget(call)
    call.close()
