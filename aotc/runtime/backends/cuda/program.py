"""One variant's (graph, Schedule) run on the GPU: its kernels loaded once, each concrete shape prepared once
(``Prepared``: memory, packed parameters, a CUDA graph from its second call when replaying pays) per calling
thread, from a bounded LRU, with at most ``graph_cache`` CUDA graphs alive."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aotc.errors import ExecError, GuardError, VerifyError
from aotc.ir.gather_ids import index_error_message
from aotc.ir.graph import Graph
from aotc.ir.launch import KernelBinary
from aotc.ir.schedule import Schedule
from aotc.ir.symbolic_values import evaluate
from aotc.runtime.backends.cuda.arrays import DeviceInput, adopt
from aotc.runtime.backends.cuda.launch import Launch
from aotc.runtime.backends.cuda.model import DeviceModel
from aotc.runtime.backends.cuda.modules import check_signature
from aotc.runtime.backends.cuda.plan import ShapePlan, Storage, plan_shape, recipe
from aotc.runtime.backends.cuda.prepared import Prepared, Retired
from aotc.runtime.backends.cuda.slots import release_all
from aotc.runtime.backends.cuda.states import DeviceStates
from aotc.runtime.backends.interpret import InterpretProgram

OUTPUTS = ("numpy", "device")
# Device pointers whose GPU the driver confirmed (the array interface names none), remembered up to this many.
KNOWN_POINTERS = 4096


class CudaProgram:
    """Raises VerifyError when the schedule or binaries do not fit the graph. Many threads may call ``run``.

    ``prepared``: how many (shape, thread) preparations to keep (each holds its memory); ``graph_cache``: how
    many of them may hold a CUDA graph at once (0: never replay)."""

    def __init__(
        self,
        model: DeviceModel,
        graph: Graph,
        schedule: Schedule,
        binaries: Mapping[str, KernelBinary],
        graph_cache: int = 16,
        streams: int = 4,
        prepared: int = 64,
    ) -> None:
        self.graph, self.schedule, self.model = graph, schedule, model
        self.device = model.device
        checked = InterpretProgram(graph, schedule)  # the same verification and storage plan as interpret
        self.storage = _storage(graph, checked)
        self._values = checked._values  # value id -> Value
        self.results = graph.outputs[: graph.num_results]  # what a call hands back (a state's new value is not)
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
        self._shapes: OrderedDict[tuple[int, ...], ShapePlan] = OrderedDict()
        self.graph_cache = max(int(graph_cache), 0)
        self._max_prepared = max(int(prepared), 1)
        self._max_streams = max(int(streams), 1)
        self._prepared: OrderedDict[tuple[Any, int], Prepared] = OrderedDict()  # (shape key, thread) -> call
        self._explicit: list[Prepared] = []  # prepared by the caller (exe.prepare): never evicted
        self._graphed: OrderedDict[int, Prepared] = OrderedDict()  # preparations holding a graph, oldest first
        self._known: set[int] = set()
        self._lock = threading.Lock()
        self._symbols = tuple(sorted(s.name for s in graph.symbols))
        self._checks = [(c, k) for k in schedule.kernels for c in k.checks]
        self._ordinal = self.device.info.ordinal
        self._closed = False
        # Whether the driver says which node a captured launch made and updates one (else a replay copies what
        # moved into the graph's own buffers instead).
        drv = self.device.drv
        self.node_updates = all(callable(getattr(drv, n, None)) for n in ("cuStreamGetCaptureInfo",
                                                                          "cuGraphExecKernelNodeSetParams"))  # fmt: skip
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
            while len(self._shapes) > max(4 * self.graph_cache, 64):
                self._shapes.popitem(last=False)
        return plan

    def env_key(self, env: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(env.get(s, 0) for s in self._symbols)

    def prepare(self, env: Mapping[str, int], fixed: Mapping[int, int] | None = None) -> Prepared:
        """A preparation of this shape owned by the caller (``exe.prepare``): freed by its close() or this
        program's; ``fixed`` binds storage roots to addresses that never change (a session's state)."""
        if self._closed:
            raise ExecError(f"variant {self.graph.name!r}: the executable was closed")
        missing = [r for r in self.storage.states if r not in (fixed or {})]
        if missing:
            raise self._stateful()
        self.device.make_current()
        call = Prepared(self, self._shape(self.env_key(env), env), env, fixed)
        with self._lock:
            self._explicit.append(call)
        return call

    def forget(self, call: Prepared) -> None:
        with self._lock:
            if call in self._explicit:
                self._explicit.remove(call)
            self._graphed.pop(id(call), None)

    # -- running --------------------------------------------------------------------------------------
    def run(
        self,
        feeds: Sequence[Any],
        env: Mapping[str, int],
        outputs: str = "numpy",
        *,
        key: Any = None,
        out: Sequence[Any] | None = None,
        stream: int | None = None,
        sync: bool | None = None,
    ) -> list[Any]:
        """Outputs of one call (see Prepared for what each path costs). ``key``: any hashable that determines
        ``env`` (the Executable passes the input shapes it already looked up); ``out``: the caller's tensors to
        write the outputs into; ``stream``: a stream handle to run on; ``sync``: wait for the call and raise its
        error (default: for numpy outputs only)."""
        if self._closed:
            raise ExecError(f"variant {self.graph.name!r}: the executable was closed")
        if outputs not in OUTPUTS:
            raise ExecError(f"outputs must be 'numpy' or 'device', got {outputs!r}")
        if self.storage.states:
            raise self._stateful()
        if len(feeds) != len(self.graph.inputs):
            raise ExecError(f"graph {self.graph.name} takes {len(self.graph.inputs)} inputs, got {len(feeds)}")
        if out is not None and outputs == "numpy":
            raise GuardError("out= writes the outputs on the GPU: it takes outputs='device' (or leave outputs unset)")
        self.device.make_current()
        slot = (self.env_key(env) if key is None else key, threading.get_ident())
        while True:
            call = self._prepared.get(slot)
            if call is None:
                call = self._new(slot, env)
            try:
                return call.run(feeds, outputs, out, stream, sync)
            except Retired:
                with self._lock:
                    if self._prepared.get(slot) is call:
                        del self._prepared[slot]

    def _stateful(self) -> ExecError:
        return ExecError(f"variant {self.graph.name!r} keeps state across calls: run it in a session (exe.session())")

    def run_session(self, feeds: Sequence[Any], env: Mapping[str, int], memory: DeviceStates) -> list[Any]:
        """A call of a session (the Session serializes them): its preparation at this shape binds the session's
        state buffers in place, so the state writes land there and nothing of the state is copied (session.py).
        Numpy outputs: the call is synchronized before it returns, so the next call (on another shape's stream)
        sees its writes."""
        if self._closed:
            raise ExecError(f"variant {self.graph.name!r}: the executable was closed")
        if len(feeds) != self.graph.num_feeds:
            raise ExecError(f"graph {self.graph.name} takes {self.graph.num_feeds} inputs, got {len(feeds)}")
        self.device.make_current()
        key = (id(self), self.env_key(env))
        while True:
            call = memory.prepared(key, lambda: self.prepare(env, dict(zip(self.storage.states, memory.ptrs))))
            try:
                return call.run(feeds, "numpy", None, None, None)
            except Retired:
                memory.drop(key, call)

    def _new(self, slot: tuple[Any, int], env: Mapping[str, int]) -> Prepared:
        call = Prepared(self, self._shape(self.env_key(env), env), env)
        evicted: list[Prepared] = []
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                self._prepared[slot] = call
                while len(self._prepared) > self._max_prepared:
                    evicted.append(self._prepared.popitem(last=False)[1])
        if closed:
            call.close()
            raise ExecError(f"variant {self.graph.name!r}: the executable was closed")
        for old in evicted:  # waits for a call running on it; the evicted shape is prepared again when next used
            self.forget(old)
            old.close()
        return call

    def device_input(self, index: int, x: Any) -> DeviceInput | np.ndarray:
        """A feed as a checked DeviceInput (a GPU tensor on this GPU, C-contiguous) or a C-contiguous array."""
        d = x if type(x) is DeviceInput else adopt(x)
        if d is None:
            return np.ascontiguousarray(x)
        what = f"input {self.graph.input_names[index]!r}"
        self.check_device(what, d)
        if d.strides is not None and not d.contiguous():
            raise GuardError(
                f"{what} on the GPU has strides {d.strides} (bytes) for shape {d.shape}, expected a "
                "C-contiguous tensor; pass x.contiguous()"
            )
        return d

    def adopt_out(self, value: Any) -> DeviceInput | None:
        return adopt(value)

    def check_device(self, what: str, d: DeviceInput) -> None:
        if d.device_id is not None:
            if d.device_id == self._ordinal:
                return
            where: int | None = d.device_id
        elif not d.ptr or d.ptr in self._known:
            return
        else:
            where = self.device.pointer_ordinal(d.ptr)
            if where == self._ordinal:
                if len(self._known) >= KNOWN_POINTERS:
                    self._known.clear()
                self._known.add(d.ptr)
                return
        found = "memory the CUDA driver does not know" if where is None else f"cuda:{where}"
        raise GuardError(f"{what} lives on {found}, expected a tensor on cuda:{self._ordinal} or a host array")

    def flag_message(self, flags: np.ndarray, env: Mapping[str, int], earlier: bool) -> str:
        when = "an earlier call at these shapes (not synchronized) failed: " if earlier else ""
        for c, _ in self._checks:
            if flags[c.slot]:
                return when + index_error_message(c.op, evaluate(c.low, env), evaluate(c.high, env), c.input or None)
        return f"{when}graph {self.graph.name}: a kernel set error flag(s) {np.flatnonzero(flags).tolist()} that no check names"

    def synchronize(self) -> None:
        """Wait for every call's queued work; raise the first pending ExecError (the rest are cleared too)."""
        with self._lock:
            calls = [*self._prepared.values(), *self._explicit]
        first: ExecError | None = None
        for call in calls:
            try:
                call.synchronize()
            except ExecError as e:
                first = first or e
        if first is not None:
            raise first

    # -- CUDA graphs ----------------------------------------------------------------------------------
    def note_call(self, call: Prepared) -> None:
        if call.exec is not None:
            with self._lock:
                if id(call) in self._graphed:
                    self._graphed.move_to_end(id(call))

    def capture(self, call: Prepared) -> None:
        """Capture ``call``'s graph (the caller holds its lock) if the cache has room, making room by dropping the
        least recently used graph of a preparation no other call is using; its place is taken under the lock, so
        that racing captures never hold more than ``graph_cache`` graphs."""
        while True:
            with self._lock:
                if self._closed or self.graph_cache == 0:
                    return
                if len(self._graphed) < self.graph_cache:
                    self._graphed[id(call)] = call  # the place is ours while we capture
                    break
                victims = [c for c in self._graphed.values() if c is not call and c.exec is not None]
            for old in victims:
                if not old.lock.acquire(blocking=False):
                    continue  # in use: try the next oldest
                try:
                    with self._lock:
                        mine = self._graphed.pop(id(old), None) is not None
                    if mine:
                        old.drop_graph()
                finally:
                    old.lock.release()
                if mine:
                    break
            else:
                return  # every graph is in use: this call runs eagerly
        try:
            call.capture()
        except BaseException:
            with self._lock:
                self._graphed.pop(id(call), None)
            raise

    def captured_node(self, stream: int) -> Any:
        """The graph node the launch just captured on ``stream`` (None where the driver does not say)."""
        if not self.node_updates:
            return None
        try:
            res = self.device.drv.cuStreamGetCaptureInfo(stream)
        except Exception:  # bindings without it: replays copy what moved instead of updating nodes
            self.node_updates = False
            return None
        deps = res[4] if res[0] == self.device._success and len(res) > 4 else None
        return deps[0] if deps is not None and len(deps) == 1 else None

    def node_params(self, index: int, args: tuple[Any, ...]) -> Any:
        """The kernel node parameters a replay updates launch ``index``'s node with: its function and geometry,
        and its packed parameter buffer, which the driver reads at each update."""
        launch, drv = self.launches[index], self.device.drv
        p = drv.CUDA_KERNEL_NODE_PARAMS()
        p.func = launch.function
        p.gridDimX, p.gridDimY, p.gridDimZ = args[1], args[2], args[3]
        p.blockDimX, p.blockDimY, p.blockDimZ = launch.block, 1, 1
        p.sharedMemBytes = launch.shared
        p.kernelParams = args[5]
        return p

    # -- lifetime -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Free every preparation (its graph, memory and streams), each even when an earlier one fails, then
        raise the first error. After a kernel fault the follow-on errors of the frees are dropped by
        ``Device.check``, as PyTorch's teardown never raises. No lock is left held that close() would wait for."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            calls = [*self._prepared.values(), *self._explicit]
            self._prepared.clear()
            self._explicit.clear()
            self._graphed.clear()
        release_all(call.close for call in calls)


def _storage(graph: Graph, checked: InterpretProgram) -> Storage:
    homes, group = checked._homes, checked._group
    by_input = {int(h.key): root for root, h in homes.items() if h.kind == "input"}
    by_state = {int(h.key): root for root, h in homes.items() if h.kind == "state"}
    return Storage(
        inputs=tuple(by_input[i] for i in range(graph.num_feeds)),
        states=tuple(by_state[i] for i in range(len(graph.states))),
        constants={root: str(h.key) for root, h in homes.items() if h.kind == "constant"},
        buffers={root: int(h.key) for root, h in homes.items() if h.kind == "buffer"},
        outputs={root: int(h.key) for root, h in homes.items() if h.kind == "output"},
        group=dict(group),
    )
