"""A call prepared once per concrete shape: ``Prepared`` holds everything a call at that shape needs (its memory,
every launch's packed parameters, its CUDA graph, page-locked flags), so that a call only writes the pointers
that changed and issues its launches on the caller's stream.

Memory, all made when the shape is prepared and kept until it is dropped: a work block (error flags, the arena,
scratch, staging for host inputs), a block of static output buffers (a view of it is what a device output is;
it lives while any view does), page-locked host memory for the flags and numpy outputs. Per call, nothing is
allocated, freed or synchronized unless the caller asks for host data (numpy outputs, ``sync=True``).

The driver calls of a call with GPU inputs and device outputs: eagerly one launch per launch, plus one copy of
the flags to pinned memory when the schedule checks indices (plus the event waits of a plan forked over
streams); replayed, one ``cuGraphLaunch`` plus one ``cuGraphExecKernelNodeSetParams`` per graph node whose
pointers changed since its last replay (inputs read in place, ``out=`` tensors written in place). Numpy
outputs add their downloads and one synchronize; host inputs their uploads.

Error flags (an index out of range): kernels only ever set them; they are copied to pinned memory at the end of
each call and zeroed only after an error was seen. A synchronized call raises its own ExecError; an
unsynchronized one (device outputs, the default there) leaves its flags to be read by the next call of this
shape (without waiting: it raises once they have landed), ``synchronize()``, or a host copy of an output.

A session's state (issue 29) binds like an input whose pointer never changes: ``fixed`` maps a storage root to
its device address, written into the parameters (and so into the graph) once, when the shape is prepared.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aotc.errors import ExecError, GuardError
from aotc.runtime.backends.cuda.arrays import DeviceArray, DeviceInput, DeviceMemory, EmptyMemory
from aotc.runtime.backends.cuda.delivery import Delivery
from aotc.runtime.backends.cuda.launch import Params
from aotc.runtime.backends.cuda.outputs import OutputBinding, bind_out
from aotc.runtime.backends.cuda.plan import BUFFER, POINTER_ALIGN, SIZE, ShapePlan, align
from aotc.runtime.backends.cuda.slots import release_all

# What the replay-or-eager choice weighs (host seconds): a launch (or a graph node's update, a call of the same
# kind) through cuda-bindings, and a copy: a fixed cost per copy plus its bytes read and written at ~3 TB/s.
LAUNCH_SECONDS = 4e-6
COPY_SECONDS = 4e-6
COPY_SECONDS_PER_BYTE = 1 / 3e12


class Retired(Exception):
    """This prepared shape was dropped (evicted or closed) before the call got it: prepare it again."""


class Prepared(Delivery):
    """One shape of one program, ready to call. One call at a time (``lock``); see the module docstring."""

    def __init__(self, program: Any, shape: ShapePlan, env: Mapping[str, int],
                 fixed: Mapping[int, int] | None = None) -> None:  # fmt: skip
        self.program, self.shape, self.env = program, shape, dict(env)
        self.device = dev = program.device
        self.lock = threading.Lock()
        self.closed = False
        self.calls = 0
        g, storage = program.graph, program.storage
        self.out_start = min((off for _, off in shape.outputs), default=shape.total)
        self._memory: list[DeviceMemory] = []
        self._pinned: list[int] = []
        self.stream_handle: Any = None
        self.aux: list[Any] = []
        self.events: dict[int, Any] = {}
        self.graph: Any = None
        self.exec: Any = None
        self.staged_host = 0  # page-locked staging for numpy outputs, made on first use
        self.out_memory: DeviceMemory | None = None
        self.outputs: list[DeviceArray] = []
        try:
            work = self._alloc(self.out_start, f"a call of {g.name!r}")
            self.stream_handle = dev.stream()
            self.stream = int(self.stream_handle)
            # static output buffers: each output's own storage, then a region per output that is a view of
            # another value (copied there after the launches)
            self.derived: list[tuple[int, int, int]] = []  # (output index, source root, offset in the block)
            size = shape.total - self.out_start
            direct = {i: root for root, i in storage.outputs.items()}
            for i, o in enumerate(program.results):
                if direct.get(i) != storage.group[o.id]:
                    size = align(size)
                    self.derived.append((i, storage.group[o.id], size))
                    size += shape.out_nbytes[i]
            self.out_memory = DeviceMemory(dev, size, f"the outputs of {g.name!r}") if size else None
            outs = self.out_memory.ptr if self.out_memory is not None else 0
            addr = dict(program.weights)
            for root, off in shape.buffers:
                addr[root] = work + off
            self.staging = [work + off for off, _ in shape.inputs]
            addr.update(zip(storage.inputs, self.staging))
            for root, off in shape.outputs:
                addr[root] = outs + off - self.out_start
            addr.update(fixed or {})
            self.addr = addr
            self.static_out = [addr[direct[i]] if i in direct else 0 for i in range(len(program.results))]
            for i, _, off in self.derived:
                self.static_out[i] = outs + off
            self.flags = work if program.schedule.flags else 0
            self.flag_count = program.schedule.flags
            self._pack()
            self._prepare_streams()
            if self.flag_count:
                host = self._host(4 * self.flag_count, "the error flags")
                self.flags_host = np.ctypeslib.as_array((ctypes.c_int32 * self.flag_count).from_address(host))
                self.flags_host[:] = 0
                dev.check("cuMemsetD32Async", dev.drv.cuMemsetD32Async(work, 0, self.flag_count, self.stream))
                dev.sync(self.stream)
            self.outputs = [
                DeviceArray(dev, self.out_memory, shape.out_shapes[i], o.type.dtype.np, self.static_out[i], self)
                if self.out_memory is not None
                else DeviceArray(dev, EmptyMemory(), shape.out_shapes[i], o.type.dtype.np, 0, self)
                for i, o in enumerate(program.results)
            ]
        except BaseException:
            self._release()
            raise
        self.last_stream: int | None = None  # the stream the last call's work was queued on
        self.pending = False  # that work's flags were not checked yet
        self.bound_out = list(self.static_out)
        self.nodes: list[Any] = []  # per launch: its node in the graph (None: its pointers cannot be updated)
        self.node_stale = [False] * len(program.launches)
        self.moved = set()
        self.graphable = len(program.launches) > 1 and program.graph_cache > 0

    # -- preparing ------------------------------------------------------------------------------------------
    def _alloc(self, nbytes: int, what: str) -> int:
        if nbytes <= 0:
            return 0
        mem = DeviceMemory(self.device, nbytes, what)
        self._memory.append(mem)
        return mem.ptr

    def _host(self, nbytes: int, what: str) -> int:
        ptr = self.device.host_alloc(nbytes, what)
        self._pinned.append(ptr)
        return ptr

    def _pack(self) -> None:
        """Every launch's parameters packed once; per input and output, the (launch, slot) pairs its pointer fills."""
        p, shape, addr = self.program, self.shape, self.addr
        inputs = {root: i for i, root in enumerate(p.storage.inputs)}
        direct = {root: i for root, i in p.storage.outputs.items()}
        self.params: list[Params] = []
        self.slots: list[Any] = []  # per launch: its parameters as 64-bit words, written in place
        self.in_slots: list[list[tuple[int, int]]] = [[] for _ in p.storage.inputs]
        self.out_slots: list[list[tuple[int, int]]] = [[] for _ in p.results]
        self.launch_args: list[tuple[Any, ...]] = []
        for li, launch in enumerate(p.launches):
            sizes = shape.sizes[li]
            values: list[Any] = []
            for j, (kind, x) in enumerate(p.recipes[li]):
                if kind == BUFFER:
                    values.append(addr[x])
                    if x in inputs:
                        self.in_slots[inputs[x]].append((li, j))
                    elif x in direct:
                        self.out_slots[direct[x]].append((li, j))
                else:
                    values.append(sizes[x] if kind == SIZE else self.flags_ptr())
            gs, ps = shape.scratch[li]
            work = self._memory[0].ptr if self._memory else 0
            values.append(work + gs if gs >= 0 else 0)
            values.append(work + ps if ps >= 0 else 0)
            params = Params(len(values))
            launch.pack(params, values)
            self.params.append(params)
            self.slots.append((ctypes.c_uint64 * len(values)).from_buffer(params.raw))
            self.launch_args.append(launch.args(shape.grids[li], params))
        self.bound_in = list(self.staging)

    def flags_ptr(self) -> int:
        return self._memory[0].ptr if self._memory and self.program.schedule.flags else 0

    def _prepare_streams(self) -> None:
        plan, dev = self.shape.streams, self.device
        self.aux = [dev.stream() for _ in range(plan.count - 1)]
        for key in (-1, *plan.records):
            self.events[key] = dev.event()
        self.events[-2] = dev.event()  # ordering: after the previous call's stream, after an input's producer

    # -- calling --------------------------------------------------------------------------------------------
    def run(self, feeds: Sequence[Any], outputs: str, out: Sequence[Any] | None, stream: int | None,
            sync: bool | None) -> list[Any]:  # fmt: skip
        with self.lock:
            if self.closed:
                raise Retired
            if self.pending and self.flag_count and self.flags_host.any():
                self._raise_flags(earlier=True)  # an unsynchronized earlier call's bad index, now landed
            self.calls += 1
            dev = self.device
            run = stream
            if run is None:  # the first GPU input's producer stream, else this shape's own
                for x in feeds:
                    if type(x) is DeviceInput and x.stream is not None:
                        run = x.stream
                        break
                else:
                    run = self.stream
            if self.last_stream is not None and run != self.last_stream:
                ev = self.events[-2]  # this shape's memory is reused: wait for the previous call's work
                dev.record(ev, self.last_stream)
                dev.wait_event(run, ev)
            self.last_stream = run
            self.moved: set[int] = set()  # launches whose pointers this call changed
            self._bind_inputs(feeds, run)
            binding = bind_out(self, out) if out is not None else None
            if binding is not None:
                self._bind_outputs(binding.ptrs)
            elif self.bound_out != self.static_out:
                self._bind_outputs(self.static_out)
            if self.exec is not None:
                self.program.note_call(self)
            if not self.graphable:  # one launch, or no graphs: launched as it is
                self.program.stats["eager"] += 1
                if self.shape.streams.count == 1:
                    for launch, args in zip(self.program.launches, self.launch_args):
                        launch.launch_args(dev, run, args)
                else:
                    self._enqueue(run)
                if self.flag_count:
                    dev.download(self.flags_host.ctypes.data, self.flags, 4 * self.flag_count, run)
            else:
                copies = self._replay_copies(feeds, binding)
                if self.exec is None and self.calls >= 2 and self._worth_a_graph(copies):
                    self.program.capture(self)
                if self.exec is not None and self._replay_pays(copies):
                    self._replay(run, feeds, binding)
                else:
                    self._eager(run)
            for i, root, _ in self.derived:
                dst = binding.ptrs[i] if binding is not None else self.static_out[i]
                dev.copy(dst, self.addr_now(root), self.shape.out_nbytes[i], run)
            if outputs == "numpy":
                return self._download(run)
            if sync:
                dev.sync(run)
                self._check_flags()
            else:
                self.pending = bool(self.flag_count)
            return list(binding.results) if binding is not None else list(self.outputs)

    def _bind_inputs(self, feeds: Sequence[Any], run: int) -> None:
        dev, names, waited = self.device, self.program.graph.input_names, run
        ordinal = self.program._ordinal
        for i, x in enumerate(feeds):
            off_n = self.shape.inputs[i]
            kind = type(x)
            if kind is DeviceInput:
                if x.device_id != ordinal or x.strides is not None:  # else it is checked already: the common case
                    x = self.program.device_input(i, x)
            elif kind is not np.ndarray or not x.flags.c_contiguous:
                x = self.program.device_input(i, x)
            if type(x) is DeviceInput:
                if x.nbytes != off_n[1]:  # the guards checked this for Executable callers; never read past it
                    raise GuardError(f"input {names[i]!r} holds {x.nbytes} bytes, the bound shapes need {off_n[1]}")
                if x.stream is not None and x.stream != run and x.stream != waited:
                    ev = self.events[-2]  # produced on another stream: this call's work follows it
                    dev.record(ev, x.stream)
                    dev.wait_event(run, ev)
                    waited = x.stream
                if x.ptr % POINTER_ALIGN:
                    dev.copy(self.staging[i], x.ptr, off_n[1], run)
                    ptr = self.staging[i]
                else:
                    ptr = x.ptr
            else:
                if x.nbytes != off_n[1]:
                    raise GuardError(f"input {names[i]!r} holds {x.nbytes} bytes, the bound shapes need {off_n[1]}")
                dev.upload(self.staging[i], x.ctypes.data, off_n[1], run)
                ptr = self.staging[i]
            if ptr != self.bound_in[i]:
                self.bound_in[i] = ptr
                for li, j in self.in_slots[i]:
                    self.slots[li][j] = ptr
                    self.node_stale[li] = True
                    self.moved.add(li)

    def _bind_outputs(self, ptrs: Sequence[int]) -> None:
        for i, ptr in enumerate(ptrs):
            if ptr != self.bound_out[i]:
                self.bound_out[i] = ptr
                for li, j in self.out_slots[i]:
                    self.slots[li][j] = ptr
                    self.node_stale[li] = True
                    self.moved.add(li)

    def addr_now(self, root: int) -> int:
        """Where value group ``root`` lives in this call (an input read in place, an ``out=`` tensor, else its
        own place)."""
        for i, r in enumerate(self.program.storage.inputs):
            if r == root:
                return self.bound_in[i]
        for r, i in self.program.storage.outputs.items():
            if r == root:
                return self.bound_out[i]
        return self.addr[root]

    # -- eager and replayed launches ----------------------------------------------------------------------------
    def _eager(self, run: int) -> None:
        self.program.stats["eager"] += 1
        self._enqueue(run)
        if self.flag_count:
            self.device.download(self.flags_host.ctypes.data, self.flags, 4 * self.flag_count, run)

    def _enqueue(self, run: int, nodes: list[Any] | None = None) -> None:
        """Every launch in order: on ``run``, or forked over the stream plan's streams (each waiting for the
        launches it depends on) and joined back into ``run``. ``nodes``: capturing, collect each launch's node."""
        p, dev, sp = self.program, self.device, self.shape.streams
        if sp.count == 1:
            for li, launch in enumerate(p.launches):
                launched = launch.launch_args(dev, run, self.launch_args[li])
                if nodes is not None:
                    nodes.append(p.captured_node(run) if launched else None)
            return
        streams = [run, *(int(a) for a in self.aux)]
        ev = self.events
        dev.record(ev[-1], run)
        for aux in streams[1:]:
            dev.wait_event(aux, ev[-1])
        for li, launch in enumerate(p.launches):
            stream = streams[sp.stream_of[li]]
            for j in sp.waits[li]:
                dev.wait_event(stream, ev[j])
            launched = launch.launch_args(dev, stream, self.launch_args[li])
            if nodes is not None:
                nodes.append(p.captured_node(stream) if launched else None)
            if li in sp.records:
                dev.record(ev[li], stream)
        for j in sp.tails:
            dev.wait_event(run, ev[j])

    def _replay_copies(self, feeds: Sequence[Any], binding: OutputBinding | None) -> list[int]:
        """Bytes a replay would copy that an eager call does not: pointers the graph cannot take in place."""
        if self.exec is not None and all(n is not None for n in self.nodes):
            return []
        if self.exec is None and self.program.node_updates:  # to be captured: its nodes will take the pointers
            return []
        copies = [self.shape.inputs[i][1] for i, ptr in enumerate(self.bound_in) if ptr != self.staging[i]]
        if binding is not None:
            copies += [self.shape.out_nbytes[i] for i, ptr in enumerate(binding.ptrs) if ptr != self.static_out[i]]
        return copies

    def _updates(self) -> int:
        """Node updates a replay costs per call from now on: the nodes whose pointers this call moved (a node left
        stale by an earlier call is updated once, which a steady caller pays only at its first replay)."""
        return sum(1 for li in self.moved if self._node(li) is not None)

    def _node(self, li: int) -> Any:
        return self.nodes[li] if li < len(self.nodes) else None

    def _cost(self, updates: int, copies: Sequence[int]) -> tuple[float, float]:
        eager = len(self.program.launches) * LAUNCH_SECONDS
        replay = LAUNCH_SECONDS * (1 + updates) + sum(COPY_SECONDS + 2 * n * COPY_SECONDS_PER_BYTE for n in copies)
        return eager, replay

    def _worth_a_graph(self, copies: Sequence[int]) -> bool:
        """Capture when replaying this call would beat launching it: never for one launch; else when one graph
        launch, the node updates this call needs and its copies cost less than the launches."""
        if len(self.program.launches) < 2 or not self.program.graph_cache:
            return False
        updates = len(self.moved) if self.program.node_updates else 0
        eager, replay = self._cost(updates, copies if self.program.node_updates else self._all_copies())
        return replay < eager

    def _all_copies(self) -> list[int]:
        return [self.shape.inputs[i][1] for i, ptr in enumerate(self.bound_in) if ptr != self.staging[i]]

    def _replay_pays(self, copies: Sequence[int]) -> bool:
        eager, replay = self._cost(self._updates(), copies)
        return replay < eager

    def _replay(self, run: int, feeds: Sequence[Any], binding: OutputBinding | None) -> None:
        p, dev, drv = self.program, self.device, self.device.drv
        p.stats["replay"] += 1
        for i, ptr in enumerate(self.bound_in):  # inputs whose nodes cannot be updated: copied where it reads
            if ptr != self.staging[i] and any(self._node(li) is None for li, _ in self.in_slots[i]):
                dev.copy(self.staging[i], ptr, self.shape.inputs[i][1], run)
        for li, stale in enumerate(self.node_stale):
            if stale:
                node = self._node(li)
                if node is not None:
                    dev.check("cuGraphExecKernelNodeSetParams",
                              drv.cuGraphExecKernelNodeSetParams(self.exec, node, self.node_params[li]))  # fmt: skip
                    self.node_stale[li] = False
        dev.check("cuGraphLaunch", drv.cuGraphLaunch(self.exec, run))
        if binding is not None:
            for i, ptr in enumerate(binding.ptrs):
                if ptr != self.static_out[i] and any(self._node(li) is None for li, _ in self.out_slots[i]):
                    dev.copy(ptr, self.static_out[i], self.shape.out_nbytes[i], run)

    def capture(self) -> None:
        """Capture this shape's launches (and the flags' copy to pinned memory) as a CUDA graph on its own stream,
        reading inputs from its staging and writing its static outputs, so that inputs and ``out=`` tensors
        whose node cannot be updated are copied; every other pointer is updated in the graph before a replay."""
        dev, drv, p = self.device, self.device.drv, self.program
        current_in, current_out = list(self.bound_in), list(self.bound_out)
        for i, ptr in enumerate(self.staging):
            for li, j in self.in_slots[i]:
                self.slots[li][j] = ptr
        for i, ptr in enumerate(self.static_out):
            for li, j in self.out_slots[i]:
                self.slots[li][j] = ptr
        nodes: list[Any] = []
        mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        dev.check("cuStreamBeginCapture", drv.cuStreamBeginCapture(self.stream_handle, mode))
        try:
            self._enqueue(self.stream, nodes)
            if self.flag_count:
                dev.download(self.flags_host.ctypes.data, self.flags, 4 * self.flag_count, self.stream)
        except BaseException:
            res = drv.cuStreamEndCapture(self.stream_handle)  # end the broken capture; report what broke it
            if res[0] == dev._success and res[1] is not None:
                drv.cuGraphDestroy(res[1])
            self._restore(current_in, current_out)
            raise
        try:
            self.graph = dev.get("cuStreamEndCapture", drv.cuStreamEndCapture(self.stream_handle))
            self.exec = dev.get("cuGraphInstantiate", drv.cuGraphInstantiate(self.graph, 0))
        except BaseException:
            self.drop_graph()
            self._restore(current_in, current_out)
            raise
        self.nodes = [n if launch.num_ctas == 1 else None for n, launch in zip(nodes, p.launches)]
        self.node_params = [p.node_params(li, self.launch_args[li]) if n is not None else None
                            for li, n in enumerate(self.nodes)]  # fmt: skip
        self.node_stale = [False] * len(p.launches)
        self._restore(current_in, current_out)
        p.stats["captures"] += 1

    def _restore(self, ins: Sequence[int], outs: Sequence[int]) -> None:
        """Put the call's own pointers back after a capture, marking the nodes that baked in others stale."""
        self.bound_in, self.bound_out = list(self.staging), list(self.static_out)
        self._bind_outputs(outs)
        for i, ptr in enumerate(ins):
            if ptr != self.bound_in[i]:
                self.bound_in[i] = ptr
                for li, j in self.in_slots[i]:
                    self.slots[li][j] = ptr
                    self.node_stale[li] = True

    def drop_graph(self) -> None:
        """Destroy the graph (the caller holds ``lock``); later calls run eagerly until it is captured again. A
        replay still running on the GPU finishes first: the driver frees an executable graph when it is done."""
        dev = self.device
        steps = []
        if self.exec is not None:
            steps.append(lambda e=self.exec: dev.destroy_graph_exec(e))
        if self.graph is not None:
            steps.append(lambda g=self.graph: dev.destroy_graph(g))
        self.exec = self.graph = None
        self.nodes, self.node_stale = [], [False] * len(self.program.launches)
        release_all(steps)

    # -- lifetime ---------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for its queued work, then free its graph, streams, events and memory (each tried; the first error
        raised). The static outputs stay alive while the caller holds a view of them. Idempotent."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.device.make_current()
            steps = []
            if self.last_stream is not None and self.device.fault is None:  # after a fault nothing runs any more
                steps.append(lambda s=self.last_stream: self._settle(s))
            steps.append(self.drop_graph)
            steps.append(self._release)
            release_all(steps)

    def _settle(self, stream: int) -> None:
        """Wait for the last call's work before its memory goes. A caller's stream may be gone by now (destroying
        a stream lets its work finish): then waiting for our own stream is all that is left."""
        try:
            self.device.sync(stream)
        except ExecError:
            if stream == self.stream or self.device.fault is not None:
                raise
            self.device.sync(self.stream)

    def _release(self) -> None:
        dev = self.device
        steps: list[Any] = [lambda e=e: dev.destroy_event(e) for e in self.events.values()]
        steps += [lambda s=s: dev.destroy_stream(s) for s in (self.stream_handle, *self.aux) if s is not None]
        steps += [m.free for m in self._memory]
        steps += [lambda p=p: dev.host_free(p) for p in self._pinned]
        if self.staged_host:
            steps.append(lambda: dev.host_free(self.staged_host))
        self.events, self.aux, self.stream_handle, self._memory, self._pinned = {}, [], None, [], []
        self.staged_host = 0
        try:
            release_all(steps)
        finally:
            self.outputs = []
            self.out_memory = None  # freed once the last output view the caller holds is gone
