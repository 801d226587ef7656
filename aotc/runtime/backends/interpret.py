"""The interpret backend: a variant's launch plan (``Schedule``) run by Triton's interpreter on the CPU.

It executes exactly what a GPU would: the same kernels, arguments, grids and arena layout, over
numpy memory. Triton is imported by ``triton_interp`` at the first launch, never by this module.

Storage: values joined by the schedule's ``View``s share one storage. Each such group lives in a
graph input, a weight (``graph.constants``), an arena buffer, or else a fresh output array; every
value is a typed, shaped view of its group's bytes for the call.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aotc.errors import ArtifactError, ExecError, UnsupportedError, VerifyError
from aotc.ir.gather_ids import index_error_message
from aotc.ir.graph import Graph
from aotc.ir.kernel_source import check_kernel_source
from aotc.ir.launch import KernelBinary
from aotc.ir.ops import Op
from aotc.ir.schedule import ALIGN, Arg, ArgKind, Kernel, Schedule
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import Value
from aotc.ir.variant import Variant
from aotc.runtime.backends.cpu import owned
from aotc.runtime.state import StateMemory


class InterpretBackend:
    """Runs the artifact's own Triton kernels under Triton's interpreter. Refused at construction (so at ``load``)
    when triton is not installed, naming the extra, rather than failing at the first call."""

    name = "interpret"

    def __init__(self) -> None:
        if importlib.util.find_spec("triton") is None:
            raise UnsupportedError(
                "device 'interpret' runs the artifact's Triton kernels and needs triton >= 3.6, which is not "
                "installed: pip install 'aotc[interpret]'"
            )
        self._checked: set[tuple[str, str]] = set()

    def prepare(self, variant: Variant, binaries: Mapping[str, KernelBinary]) -> InterpretProgram:
        """The variant's plan run from its kernels' source (the binaries are not read)."""
        graph, schedule = variant.graph, variant.plan
        if schedule is None:
            raise UnsupportedError(
                f"device 'interpret' is not available for this artifact: its variant {graph.name!r} has no kernels; "
                "recompile the model with this aotc (aotc compile) to include them, or use device='cpu'"
            )
        # This backend runs kernel source, so it holds every source to what codegen writes now, at load: the reader
        # leaves that to the backends that run source (triton_interp checks again before it compiles one).
        for k in schedule.kernels:
            if (k.name, k.source) not in self._checked:
                check_kernel_source(k.source, k.name)
                self._checked.add((k.name, k.source))
        return InterpretProgram(graph, schedule)


class PlanError(ArtifactError, VerifyError):
    """A launch plan that does not fit its graph. Plans reach a backend from files, where a plan that does not
    fit is the file's fault (an ArtifactError: the CLI exits 1), and in the compiler's tests and autotuning
    straight from the scheduler, whose callers check for the VerifyError the IR's checks raise. The CLI takes
    the ArtifactError side."""


@dataclass(frozen=True, slots=True)
class _Home:
    """Where a storage group lives: ``kind`` is "input" (index), "state" (the state's index: the session's buffer),
    "constant" (name), "buffer" (arena buffer index) or "output" (graph output index whose fresh array it is)."""

    kind: str
    key: int | str


class InterpretProgram:
    """Raises PlanError (an ArtifactError and a VerifyError) when the schedule does not fit the graph. Holds
    only what it derived from the schedule; each call allocates its own arena, outputs and flags, so many
    threads may call ``run`` at once (the launches themselves serialize)."""

    def __init__(self, graph: Graph, schedule: Schedule) -> None:
        self.graph = graph
        self.schedule = schedule
        self._values: dict[int, Value] = {v.id: v for v in graph.inputs}
        for node in graph.nodes:
            for o in node.outputs:
                self._values[o.id] = o
        self._homes = self._plan_storage()
        self._group = {vid: self._root(vid) for vid in self._values}
        for k in schedule.kernels:
            self._check_kernel(k)
        written = {self._root(v) for k in schedule.kernels for v in k.outputs}
        for root, home in self._homes.items():
            if home.kind in ("buffer", "output") and root not in written:
                raise self._plan_error(f"no kernel writes value %{root}, which lives in an {home.kind} of the schedule")

    # -- planning ------------------------------------------------------------------------------
    def _plan_error(self, msg: str) -> PlanError:
        return PlanError(f"variant {self.graph.name!r}: its launch plan does not fit its graph: {msg}")

    def _root(self, vid: int) -> int:
        seen = {vid}
        while vid in self._base:
            vid = self._base[vid]
            if vid in seen:
                raise self._plan_error(f"schedule views form a cycle through value %{vid}")
            seen.add(vid)
        return vid

    def _plan_storage(self) -> dict[int, _Home]:
        g, s = self.graph, self.schedule
        self._base = {v.value: v.base for v in s.views}
        for vid in (*self._base, *self._base.values()):
            self._value(vid, "a schedule view")
        homes: dict[int, _Home] = {}

        def claim(vid: int, home: _Home, rank: int) -> None:
            root = self._root(vid)
            have = homes.get(root)
            if have is not None and have.kind == home.kind == "buffer":
                raise self._plan_error(f"value %{vid} shares storage with another arena buffer through schedule views")
            if have is None or rank < _RANK[have.kind]:
                homes[root] = home

        for i, v in enumerate(g.inputs):
            n = i - g.num_feeds
            claim(v.id, _Home("input", i) if n < 0 else _Home("state", n), 0)
        for node in g.nodes:
            if node.op is Op.CONSTANT:
                name = node.attrs["name"]
                if name not in g.constants:
                    raise self._plan_error(
                        f"constant node %{node.outputs[0].id} names weight {name!r}, which the graph lacks"
                    )
                claim(node.outputs[0].id, _Home("constant", name), 0)
        for i, b in enumerate(s.buffers):
            self._value(b.value, "an arena buffer")
            claim(b.value, _Home("buffer", i), 1)
        for i, o in enumerate(g.outputs):
            claim(o.id, _Home("output", i), 2)
        return homes

    def _value(self, vid: int, what: str) -> Value:
        v = self._values.get(vid)
        if v is None:
            raise self._plan_error(f"{what} names value %{vid}, which graph {self.graph.name!r} does not define")
        return v

    def _check_kernel(self, k: Kernel) -> None:
        written = set(k.outputs)
        for a in k.args:
            if a.kind is ArgKind.BUFFER:
                self._value(a.value, f"kernel {k.name} argument {a.name}")
                home = self._homes.get(self._root(a.value))
                if home is None:
                    raise self._plan_error(
                        f"kernel {k.name} argument {a.name}: value %{a.value} has no storage "
                        "(not an input, weight, arena buffer or output)"
                    )
                if a.value in written and home.kind in ("input", "constant"):
                    raise self._plan_error(
                        f"kernel {k.name} writes value %{a.value}, which lives in a graph {home.kind}"
                    )
            elif a.kind is ArgKind.FLAG and not k.checks:
                raise self._plan_error(f"kernel {k.name} takes the error flags but declares no index check")
        for c in k.checks:
            if not 0 <= c.slot < self.schedule.flags:
                raise self._plan_error(
                    f"kernel {k.name}: check slot {c.slot} is outside the {self.schedule.flags} flags"
                )

    # -- running -------------------------------------------------------------------------------
    def run(self, feeds: Sequence[np.ndarray], env: Mapping[str, int]) -> list[np.ndarray]:
        return self._call(feeds, env, [])

    def run_session(self, feeds: Sequence[np.ndarray], env: Mapping[str, int], memory: StateMemory) -> list[np.ndarray]:
        """A call of a session: the states' storage is the session's arrays, which the state writes update in place."""
        return self._call(feeds, env, memory.arrays)

    def _call(self, feeds: Sequence[np.ndarray], env: Mapping[str, int], states: list[np.ndarray]) -> list[np.ndarray]:
        from aotc.runtime.backends.triton_interp import launch
        from aotc.runtime.plan_bounds import check_shape

        g = self.graph
        if len(feeds) != g.num_feeds or len(states) != len(g.states):
            raise ExecError(f"graph {g.name} takes {g.num_feeds} inputs and {len(g.states)} states, got {len(feeds)}")
        feeds = [np.ascontiguousarray(x) for x in feeds]
        check_shape(g, self.schedule, env)  # what verification left to check per shape (runtime/plan_bounds.py)
        arena = self._arena(env)
        storage: dict[int, np.ndarray] = {}  # root value id -> its group's bytes
        for root, home in self._homes.items():
            storage[root] = (
                _as_bytes(states[int(home.key)]) if home.kind == "state" else self._bytes(home, feeds, arena, env)
            )
        flags = np.zeros(max(self.schedule.flags, 1), np.int32)
        for k in self.schedule.kernels:
            args = [self._arg(a, storage, flags, env) for a in k.args]
            launch(k, tuple(evaluate(d, env) for d in k.grid), args)
            if k.checks and flags.any():
                self._raise_flagged(k, flags, env)
        return owned([self._array(o.id, storage, env) for o in g.outputs[: g.num_results]], [*feeds, arena, *states])

    def _arena(self, env: Mapping[str, int]) -> np.ndarray:
        size = evaluate(self.schedule.arena_bytes, env)
        if size < 0:
            raise ExecError(f"graph {self.graph.name}: the arena size evaluates to {size} bytes")
        raw = np.empty(size + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        return raw[start : start + size]

    def _bytes(self, home: _Home, feeds: list[np.ndarray], arena: np.ndarray, env: Mapping[str, int]) -> np.ndarray:
        if home.kind == "input":
            return _as_bytes(feeds[int(home.key)])
        if home.kind == "constant":
            return _as_bytes(np.ascontiguousarray(self.graph.constants[str(home.key)]))
        if home.kind == "buffer":
            b = self.schedule.buffers[int(home.key)]
            offset, nbytes = evaluate(b.offset, env), evaluate(b.nbytes, env)
            if offset % ALIGN or offset < 0 or offset + nbytes > arena.size:
                raise ExecError(
                    f"graph {self.graph.name}: arena buffer of value %{b.value} at [{offset}, {offset + nbytes}) "
                    f"does not fit a {arena.size}-byte arena at {ALIGN}-byte alignment"
                )
            return arena[offset : offset + nbytes]
        out = self.graph.outputs[int(home.key)]
        return np.empty(_nbytes(out, env), np.uint8)

    def _array(self, vid: int, storage: dict[int, np.ndarray], env: Mapping[str, int]) -> np.ndarray:
        v = self._values[vid]
        shape = tuple(evaluate(d, env) for d in v.type.shape)
        n = _nbytes(v, env)
        raw = storage[self._group[vid]]
        if n > raw.size:
            raise ExecError(f"value %{vid} needs {n} bytes but its storage holds {raw.size}")
        return raw[:n].view(v.type.dtype.np).reshape(shape)

    def _arg(self, a: Arg, storage: dict[int, np.ndarray], flags: np.ndarray, env: Mapping[str, int]) -> object:
        if a.kind is ArgKind.BUFFER:
            return self._array(a.value, storage, env)
        if a.kind is ArgKind.SIZE:
            return evaluate(a.size, env)
        return flags

    def _raise_flagged(self, k: Kernel, flags: np.ndarray, env: Mapping[str, int]) -> None:
        for c in k.checks:
            if flags[c.slot]:
                low, high = evaluate(c.low, env), evaluate(c.high, env)
                raise ExecError(index_error_message(c.op, low, high, c.input or None))


_RANK = {"input": 0, "state": 0, "constant": 0, "buffer": 1, "output": 2}


def _nbytes(v: Value, env: Mapping[str, int]) -> int:
    n = v.type.dtype.itemsize
    for d in v.type.shape:
        n *= evaluate(d, env)
    return n


def _as_bytes(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1).view(np.uint8)
