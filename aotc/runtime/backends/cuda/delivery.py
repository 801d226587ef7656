"""What a prepared call (prepared.py) hands back, and when: numpy outputs through page-locked staging, its error
flags checked and raised (then zeroed so the next good call succeeds), and the ordering of its device outputs
on a consumer's stream (``__dlpack__``) or the host (``synchronize``)."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from aotc.errors import ExecError
from aotc.runtime.backends.cuda.plan import align

if TYPE_CHECKING:
    from aotc.runtime.backends.cuda.driver import Device
    from aotc.runtime.backends.cuda.plan import ShapePlan

# Numpy outputs up to this many bytes (per shape) download through page-locked staging (asynchronous copies, then
# one synchronize); larger ones straight into their arrays, where a host copy out of staging would cost more.
PINNED_OUTPUTS = 1 << 20


class Delivery:
    """The results half of ``Prepared`` (which sets every attribute named here)."""

    program: Any  # the CudaProgram it belongs to (not imported: program.py imports this module)
    device: Device
    shape: ShapePlan
    env: dict[str, int]
    lock: threading.Lock
    closed: bool
    stream: int
    last_stream: int | None
    pending: bool
    flags: int
    flag_count: int
    flags_host: Any
    staged_host: int
    bound_in: list[int]
    bound_out: list[int]
    events: dict[int, Any]
    _host: Callable[[int, str], int]  # page-locked memory kept until the preparation is closed

    def _download(self, run: int) -> list[np.ndarray]:
        dev, shape, g = self.device, self.shape, self.program.graph
        ptrs = self.bound_out
        total = sum(align(n) for n in shape.out_nbytes)
        if total <= PINNED_OUTPUTS and not self.staged_host and total:
            self.staged_host = self._host(total, f"the numpy outputs of {g.name!r}")
        results, views = [], []
        off = 0
        for i, o in enumerate(self.program.results):
            n, dtype = shape.out_nbytes[i], o.type.dtype.np
            if self.staged_host and total <= PINNED_OUTPUTS:
                dev.download(self.staged_host + off, ptrs[i], n, run)
                views.append((i, off, n))
                results.append(None)
                off += align(n)
            else:
                arr = np.empty(shape.out_shapes[i], dtype)
                dev.download(arr.ctypes.data, ptrs[i], n, run)
                results.append(arr)
        dev.sync(run)
        self.pending = False
        self._check_flags()
        for i, at, n in views:
            o = self.program.results[i]
            raw = (ctypes.c_uint8 * max(n, 1)).from_address(self.staged_host + at) if n else b""
            results[i] = np.frombuffer(raw, np.uint8, count=n).view(o.type.dtype.np).reshape(shape.out_shapes[i])
            results[i] = results[i].copy()
        return results  # type: ignore[return-value]

    def _check_flags(self) -> None:
        if self.flag_count and self.flags_host.any():
            self._raise_flags(earlier=False)

    def _raise_flags(self, earlier: bool) -> None:
        """Raise the ExecError the flags name, after waiting for the work still queued and zeroing them (on the
        device and here) so that the next good call succeeds."""
        dev = self.device
        if self.last_stream is not None:
            dev.sync(self.last_stream)
        flags = self.flags_host.copy()
        dev.check("cuMemsetD32Async", dev.drv.cuMemsetD32Async(self.flags, 0, self.flag_count, self.stream))
        dev.sync(self.stream)
        self.flags_host[:] = 0
        self.pending = False
        raise ExecError(self.program.flag_message(flags, self.env, earlier))

    def pending_stream(self) -> int | None:
        return self.last_stream if self.last_stream is not None else None

    def order_before(self, consumer: int) -> None:
        """Make ``consumer`` (a stream handle) wait for the work the last call queued."""
        with self.lock:
            if self.closed or self.last_stream is None or consumer == self.last_stream:
                return
            ev = self.events[-2]
            self.device.record(ev, self.last_stream)
            self.device.wait_event(consumer, ev)

    def synchronize(self) -> None:
        """Wait for the last call's work and raise its pending ExecError, if any."""
        with self.lock:
            if self.closed or self.last_stream is None:
                return
            self.device.make_current()
            self.device.sync(self.last_stream)
            self.pending = False
            self._check_flags()
