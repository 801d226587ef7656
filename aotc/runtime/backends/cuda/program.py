"""One variant's (graph, Schedule) run on the GPU: its kernels loaded once, a slot per in-flight call, and a
CUDA graph per concrete shape replayed from a bounded LRU cache (a shape's first call runs eagerly)."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aotc.errors import ExecError, GuardError, VerifyError
from aotc.ir.gather_ids import index_error_message
from aotc.ir.graph import Graph
from aotc.ir.launch import KernelBinary
from aotc.ir.schedule import ALIGN, Schedule
from aotc.ir.symbolic_values import evaluate
from aotc.runtime.backends.cuda.arrays import DeviceArray, DeviceInput, DeviceMemory, adopt
from aotc.runtime.backends.cuda.launch import Launch
from aotc.runtime.backends.cuda.model import DeviceModel
from aotc.runtime.backends.cuda.modules import check_signature
from aotc.runtime.backends.cuda.plan import BUFFER, SIZE, ShapePlan, Storage, plan_shape, recipe
from aotc.runtime.backends.cuda.slots import GraphEntry, Slot, SlotPool, release_all
from aotc.runtime.backends.interpret import InterpretProgram

OUTPUTS = ("numpy", "device")


# What the replay-or-eager choice weighs: a launch from Python through cuda-bindings costs a few microseconds of
# host time (KERNELS.md); a device-to-device copy moves ~3 TB/s on an H100, counting bytes read and written.
LAUNCH_SECONDS = 4e-6
INPUT_EVENT = -2  # the slot's event for waiting on the streams a call's GPU inputs were produced on
COPY_SECONDS_PER_BYTE = 1 / 3e12


class CudaProgram:
    """Raises VerifyError when the schedule or binaries do not fit the graph. Many threads may call ``run``."""

    def __init__(
        self,
        model: DeviceModel,
        graph: Graph,
        schedule: Schedule,
        binaries: Mapping[str, KernelBinary],
        graph_cache: int = 16,
        streams: int = 4,
    ) -> None:
        self.graph, self.schedule, self.model = graph, schedule, model
        self.device = model.device
        checked = InterpretProgram(graph, schedule)  # the same verification and storage plan as interpret
        self.storage = _storage(graph, checked)
        self._values = checked._values  # value id -> Value
        self.launches: list[Launch] = []
        for k in schedule.kernels:
            binary = binaries.get(k.name)
            if binary is None:
                raise VerifyError(f"kernel {k.name} of variant {graph.name!r} has no compiled binary")
            loaded = model.kernel(binary)
            check_signature(k, loaded.image.meta)
            self.launches.append(Launch(k, loaded))
        self.recipes = [recipe(launch, self.storage) for launch in self.launches]
        self.weights = {
            root: model.weight(name, graph.constants[name]) for root, name in self.storage.constants.items()
        }
        counts = [launch.count for launch in self.launches]
        self._counts = counts
        self._pool = SlotPool(self.device, counts, f"a call of {graph.name!r}")
        self._shapes: OrderedDict[tuple[int, ...], ShapePlan] = OrderedDict()
        self._graph_cache = max(int(graph_cache), 0)
        self._max_streams = max(int(streams), 1)
        self._graphs: OrderedDict[tuple[int, ...], GraphEntry] = OrderedDict()
        self._seen: OrderedDict[tuple[int, ...], None] = OrderedDict()
        self._capturing: set[tuple[int, ...]] = set()
        self._lock = threading.Lock()
        self._symbols = tuple(sorted(s.name for s in graph.symbols))
        self._checks = [(c, k) for k in schedule.kernels for c in k.checks]
        self._closed = False
        self.stats = {"eager": 0, "replay": 0, "captures": 0}

    # -- per shape ------------------------------------------------------------------------------------
    def _shape(self, key: tuple[int, ...], env: Mapping[str, int]) -> ShapePlan:
        with self._lock:
            plan = self._shapes.get(key)
            if plan is not None:
                self._shapes.move_to_end(key)
                return plan
        plan = plan_shape(self.graph, self.schedule, self.storage, self.launches, env, self._max_streams)
        with self._lock:
            self._shapes[key] = plan
            while len(self._shapes) > max(4 * self._graph_cache, 64):
                self._shapes.popitem(last=False)
        return plan

    # -- running --------------------------------------------------------------------------------------
    def run(self, feeds: Sequence[Any], env: Mapping[str, int], outputs: str = "numpy") -> list[Any]:
        if self._closed:
            raise ExecError(f"variant {self.graph.name!r}: the executable was closed")
        if outputs not in OUTPUTS:
            raise ExecError(f"outputs must be 'numpy' or 'device', got {outputs!r}")
        g = self.graph
        if len(feeds) != len(g.inputs):
            raise ExecError(f"graph {g.name} takes {len(g.inputs)} inputs, got {len(feeds)}")
        self.device.make_current()
        key = tuple(env.get(s, 0) for s in self._symbols)
        shape = self._shape(key, env)
        feeds = [self._feed(i, x) for i, x in enumerate(feeds)]
        replay = self._graph_cache and self._replay_pays(shape, feeds, outputs)
        entry = self._graph_entry(key, shape, env) if replay else None
        if entry is not None:
            try:
                return self._replay(entry, shape, feeds, env, outputs)
            finally:
                entry.lock.release()
        slot = self._pool.take()
        ok = False
        try:
            result = self._eager(slot, shape, feeds, env, outputs)
            ok = True
            return result
        finally:
            self._give(slot, ok)

    def _replay_pays(self, shape: ShapePlan, feeds: Sequence[Any], outputs: str) -> bool:
        """Whether replaying a CUDA graph beats launching eagerly for this call. A graph's buffers are fixed, so
        replay copies GPU inputs into them and device outputs out of them, where an eager call reads the inputs
        in place and writes the outputs straight into the caller's memory; a graph saves the host cost of each
        launch. Big tensors and few launches (one attention, one large matmul, GPT-2's logits at 8x1024) go
        eager; small calls with many launches replay."""
        copied = sum(x.nbytes for x in feeds if isinstance(x, DeviceInput))
        if outputs == "device":
            copied += sum(shape.out_nbytes)
        return 2 * copied * COPY_SECONDS_PER_BYTE <= len(self.launches) * LAUNCH_SECONDS

    def _give(self, slot: Slot, ok: bool) -> None:
        if not ok:
            try:  # a slot whose work failed is kept only if its stream still works
                self.device.sync(slot.stream)
            except ExecError:
                # The call is already failing with the error that broke the slot: report that one, not an echo.
                with contextlib.suppress(ExecError):
                    slot.destroy()
                return
        self._pool.give(slot)

    def _feed(self, index: int, x: Any) -> np.ndarray | DeviceInput:
        name = self.graph.input_names[index]
        d = x if isinstance(x, DeviceInput) else adopt(x)
        if d is None:
            return np.ascontiguousarray(x)  # staged into the slot (aligned) by _stage
        ordinal = self.device.info.ordinal
        where = d.device_id if d.device_id is not None else self.device.pointer_ordinal(d.ptr)
        if where != ordinal and d.ptr:
            found = "memory the CUDA driver does not know" if where is None else f"cuda:{where}"
            raise GuardError(f"input {name!r} lives on {found}, expected a tensor on cuda:{ordinal} or a host array")
        if not d.contiguous():
            raise GuardError(
                f"input {name!r} on the GPU has strides {d.strides} (bytes) for shape {d.shape}, expected a "
                "C-contiguous tensor; pass x.contiguous()"
            )
        return d

    def _addresses(self, base: int, shape: ShapePlan, ins: Sequence[int], outs: Mapping[int, int]) -> dict[int, int]:
        addr = dict(self.weights)
        for root, off in shape.buffers:
            addr[root] = base + off
        for root, ptr in zip(self.storage.inputs, ins):
            addr[root] = ptr
        for root, off in shape.outputs:
            addr[root] = outs.get(root, base + off)
        return addr

    def _enqueue(self, slot: Slot, shape: ShapePlan, addr: Mapping[int, int]) -> None:
        """Zero the flags and queue every launch: on the slot's stream, or forked over the stream plan's
        streams (each waiting for the launches it depends on) and joined back into the slot's stream."""
        dev, base, sp = self.device, slot.base, shape.streams
        if self.schedule.flags:  # a schedule without index checks has no flags to clear or read back
            dev.check("cuMemsetD32Async", dev.drv.cuMemsetD32Async(base, 0, self.schedule.flags, slot.stream))
        streams = [slot.stream, *slot.aux[: sp.count - 1]]
        if sp.count > 1:
            dev.record(slot.events[-1], slot.stream)
            for aux in streams[1:]:
                dev.wait_event(aux, slot.events[-1])
        for i, launch in enumerate(self.launches):
            sizes = shape.sizes[i]
            values = [addr[x] if kind == BUFFER else sizes[x] if kind == SIZE else base for kind, x in self.recipes[i]]
            gs, ps = shape.scratch[i]
            values.append(base + gs if gs >= 0 else 0)
            values.append(base + ps if ps >= 0 else 0)
            if sp.count == 1:
                launch.launch(dev, slot.stream, shape.grids[i], slot.params[i], values)
                continue
            stream = streams[sp.stream_of[i]]
            for j in sp.waits[i]:
                dev.wait_event(stream, slot.events[j])
            launch.launch(dev, stream, shape.grids[i], slot.params[i], values)
            if i in sp.records:
                dev.record(slot.events[i], stream)
        for j in sp.tails:
            dev.wait_event(slot.stream, slot.events[j])

    def _stage(self, slot: Slot, shape: ShapePlan, feeds: Sequence[Any], in_place: bool) -> list[int]:
        """Each input's device address: a GPU input in place (when allowed), else copied to the slot's staging."""
        dev, ptrs, waited = self.device, [], set()
        for i, (x, (off, n)) in enumerate(zip(feeds, shape.inputs)):
            have = x.nbytes
            if have != n:  # the guards checked this for Executable callers; never read past a buffer
                raise GuardError(f"input {self.graph.input_names[i]!r} holds {have} bytes, the bound shapes need {n}")
            if isinstance(x, DeviceInput):
                if x.stream is not None and x.stream not in waited:
                    # One reused event per slot, and one wait per producer stream (usually all inputs share one).
                    event = slot.events.get(INPUT_EVENT)
                    if event is None:
                        event = slot.events[INPUT_EVENT] = dev.event()
                    dev.record(event, x.stream)
                    dev.wait_event(slot.stream, event)
                    waited.add(x.stream)
                if in_place and x.ptr % ALIGN == 0:
                    ptrs.append(x.ptr)
                    continue
                dev.copy(slot.base + off, x.ptr, n, slot.stream)
            else:
                dev.upload(slot.base + off, x.ctypes.data, n, slot.stream)
            ptrs.append(slot.base + off)
        return ptrs

    def _eager(
        self, slot: Slot, shape: ShapePlan, feeds: Sequence[Any], env: Mapping[str, int], outputs: str
    ) -> list[Any]:
        self.stats["eager"] += 1
        slot.reserve(shape.total)
        slot.prepare_streams(shape.streams)
        ins = self._stage(slot, shape, feeds, in_place=True)
        owned: dict[int, DeviceMemory] = {}
        if outputs == "device":
            for root, index in self.storage.outputs.items():
                owned[root] = DeviceMemory(
                    self.device, shape.out_nbytes[index], f"output {index} of {self.graph.name!r}", slot.stream
                )
        addr = self._addresses(slot.base, shape, ins, {r: m.ptr for r, m in owned.items()})
        self._enqueue(slot, shape, addr)
        return self._finish(slot, shape, addr, owned, env, outputs)

    def _replay(
        self, entry: GraphEntry, shape: ShapePlan, feeds: Sequence[Any], env: Mapping[str, int], outputs: str
    ) -> list[Any]:
        self.stats["replay"] += 1
        slot = entry.slot
        ins = self._stage(slot, shape, feeds, in_place=False)
        self.device.check("cuGraphLaunch", self.device.drv.cuGraphLaunch(entry.exec, slot.stream))
        return self._finish(slot, shape, self._addresses(slot.base, shape, ins, {}), {}, env, outputs)

    def _finish(
        self,
        slot: Slot,
        shape: ShapePlan,
        addr: Mapping[int, int],
        owned: dict[int, DeviceMemory],
        env: Mapping[str, int],
        outputs: str,
    ) -> list[Any]:
        dev, g = self.device, self.graph
        flags = np.zeros(self.schedule.flags, np.int32)
        dev.download(flags.ctypes.data, slot.base, flags.nbytes, slot.stream)  # nothing for no flags
        result: list[Any] = []
        for i, o in enumerate(g.outputs):
            root = self.storage.group[o.id]
            dtype, n = o.type.dtype.np, shape.out_nbytes[i]
            if outputs == "numpy":
                out = np.empty(shape.out_shapes[i], dtype)
                dev.download(out.ctypes.data, addr[root], n, slot.stream)
            else:
                mem = owned.pop(root, None)
                if mem is None:  # aliased or baked into a graph's slot: the caller gets its own copy
                    mem = DeviceMemory(dev, n, f"output {i} of {g.name!r}", slot.stream)
                    dev.copy(mem.ptr, addr[root], n, slot.stream)
                out = DeviceArray(dev, mem, shape.out_shapes[i], dtype)
            result.append(out)
        dev.sync(slot.stream)
        if flags.any():
            for c, _ in self._checks:
                if flags[c.slot]:
                    raise ExecError(
                        index_error_message(c.op, evaluate(c.low, env), evaluate(c.high, env), c.input or None)
                    )
            raise ExecError(
                f"graph {g.name}: a kernel set error flag(s) {np.flatnonzero(flags).tolist()} that no check names"
            )
        return result

    # -- CUDA graphs ----------------------------------------------------------------------------------
    def _graph_entry(self, key: tuple[int, ...], shape: ShapePlan, env: Mapping[str, int]) -> GraphEntry | None:
        """The locked graph for this shape; None to run eagerly (first call, or busy, or being captured)."""
        with self._lock:
            entry = self._graphs.get(key)
            if entry is not None:
                self._graphs.move_to_end(key)
            elif key not in self._seen:
                self._seen[key] = None
                while len(self._seen) > 4 * self._graph_cache:
                    self._seen.popitem(last=False)
                return None
            elif key in self._capturing:
                return None
            else:
                self._capturing.add(key)
        if entry is not None:
            return entry if entry.lock.acquire(blocking=False) else None
        try:
            entry = self._capture(shape)
        except BaseException:
            with self._lock:
                self._capturing.discard(key)
            raise
        with self._lock:
            self._capturing.discard(key)  # under the same lock as publishing: no second capture of this shape
            published = not self._closed
            evicted: list[GraphEntry] = []
            if published:
                self._graphs[key] = entry
                while len(self._graphs) > self._graph_cache:
                    evicted.append(self._graphs.popitem(last=False)[1])
        # The entry came back from _capture locked, for this call's replay. Every way out that does not hand it
        # to the caller must unlock it: close() and eviction destroy an entry under its lock, and would wait
        # forever on one left locked.
        if not published:  # closed meanwhile: nobody else will free it
            entry.lock.release()
            evicted.append(entry)
        try:
            release_all(old.destroy for old in evicted)
        except BaseException:
            if published:
                entry.lock.release()
            raise
        return entry if published else None

    def _capture(self, shape: ShapePlan) -> GraphEntry:
        dev, drv = self.device, self.device.drv
        entry = GraphEntry(Slot(dev, self._counts, f"a CUDA graph of {self.graph.name!r}"))
        entry.lock.acquire()
        slot = entry.slot
        try:
            slot.reserve(shape.total)
            slot.prepare_streams(shape.streams)
            addr = self._addresses(slot.base, shape, [slot.base + off for off, _ in shape.inputs], {})
            mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            dev.check("cuStreamBeginCapture", drv.cuStreamBeginCapture(slot.stream, mode))
            try:
                self._enqueue(slot, shape, addr)
            except BaseException:
                # End the broken capture without letting its error hide the one that broke it.
                res = drv.cuStreamEndCapture(slot.stream)
                if res[0] == dev._success and res[1] is not None:
                    drv.cuGraphDestroy(res[1])
                raise
            entry.graph = dev.get("cuStreamEndCapture", drv.cuStreamEndCapture(slot.stream))
            entry.exec = dev.get("cuGraphInstantiate", drv.cuGraphInstantiate(entry.graph, 0))
        except BaseException:
            entry.lock.release()
            with contextlib.suppress(ExecError):  # the error that broke the capture is the one to report
                entry.destroy()
            raise
        self.stats["captures"] += 1
        return entry

    # -- lifetime -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Free every graph and slot, each even when an earlier one fails, then raise the first error.

        On a working GPU a failed free is a bug worth seeing, so it is raised (an ExecError). After a kernel
        fault every later call fails; the call that met the fault raised it, and the follow-on errors of the
        frees here are dropped by ``Device.check``, as PyTorch's teardown never raises. Either way close()
        returns: no lock is left held that it would wait for."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            entries = list(self._graphs.values())
            self._graphs.clear()
        release_all([*(entry.destroy for entry in entries), self._pool.close])


def _storage(graph: Graph, checked: InterpretProgram) -> Storage:
    homes, group = checked._homes, checked._group
    by_input = {int(h.key): root for root, h in homes.items() if h.kind == "input"}
    return Storage(
        inputs=tuple(by_input[i] for i in range(len(graph.inputs))),
        constants={root: str(h.key) for root, h in homes.items() if h.kind == "constant"},
        buffers={root: int(h.key) for root, h in homes.items() if h.kind == "buffer"},
        outputs={root: int(h.key) for root, h in homes.items() if h.kind == "output"},
        group=dict(group),
    )
