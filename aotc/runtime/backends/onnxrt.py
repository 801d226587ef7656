"""The cpu backend on onnxruntime: the artifact's verified graph written as ONNX here, at load, and run by
onnxruntime's CPU kernels, its weights read from the artifact's mapped, verified segments.

The model is built from a graph the reader verified, with aotc's one emission (aotc/ir/onnx_form/), so it cannot
compute anything the file's graphs do not. That graph is the source graph (the model's high-level ops: pools,
norms, GELU, attention, as onnxruntime's kernels and fusions know them; one session for every variant) when the
file binds it to its variants -- the writer stores its digest, the reader refuses a source graph that does not
match -- and else each variant's primitive graph (the graph the numpy references run and the kernels' digests
bind), a session each. The ONNX model a file may store (schema 7) is never read here: it is bytes the reader binds
to nothing. Building costs a few milliseconds and reads no weight (see README, "CPU servers").

The weights a MatMul, Gemm or Conv reads are given to the session as initializers of its own, so onnxruntime
prepacks them; once it holds them, the mapped pages they came from leave the resident set (aotc/runtime/pages.py).
Every other weight (an embedding table) is a graph input, bound once, at load, to the mapped array and passed with
every call (onnxruntime reads a contiguous array of the input's dtype in place: no copy). The model computes in
float32: half-precision weights are cast to float32 once, here, half inputs per call, and outputs back to the
graph's dtypes. onnxruntime is imported only when this backend is built.

Every input has passed aotc's guards before a program runs. A token id outside its gather's valid range that
comes straight from an input is found here, before onnxruntime sees it; ids the model computes, for a gather that
refuses negative ids (onnxruntime would wrap them), come back as two extra outputs, their min and max, checked
after the run. Either way the numpy reference program then runs the call and raises the same ExecError as every
other backend. Any error onnxruntime raises is handled the same way: the reference runs the call, so the user
sees aotc's error; should the reference compute the call instead (onnxruntime failed on valid inputs), a
FallbackWarning names onnxruntime's error, once per variant.

A session serves every thread: onnxruntime's ``run`` is thread-safe, a call keeps its state in locals, and the
one RunOptions every call passes is only read. ``threads`` sets onnxruntime's intra-op threads (None: its default,
one per physical core).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aotc.artifact.checks import interface_mismatch
from aotc.errors import FallbackWarning, UnsupportedError
from aotc.ir.gather_ids import GATHER_OPS, allows_negative, index_source
from aotc.ir.graph import Graph
from aotc.ir.launch import KernelBinary
from aotc.ir.onnx_form import IdBound, OnnxForm, build_model
from aotc.ir.ops import Op
from aotc.ir.state import state_chains
from aotc.ir.symbolic import SymExpr
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import ShapeDim
from aotc.ir.variant import Variant
from aotc.runtime.backends.cpu import CpuProgram
from aotc.runtime.pages import release_pages
from aotc.runtime.state import StateMemory, StateSpec

_HALF = ("float16", "bfloat16")
_MIN, _MAX = np.minimum.reduce, np.maximum.reduce  # ndarray.min and .max without their Python wrappers


class OrtBackend:
    """onnxruntime over an artifact's verified graphs: one session per variant, the weights bound by name."""

    name = "cpu"

    def __init__(
        self,
        constants: Mapping[str, np.ndarray],
        *,
        threads: int | None = None,
        spin: bool = True,
        variants: int = 1,
        source: Graph | None = None,
    ) -> None:
        import onnxruntime as ort

        self._ort = ort
        # Every call of every program passes this one RunOptions (onnxruntime only reads it); passing None would build
        # the default each call (about half a microsecond).
        self._run_options = ort.RunOptions()
        self._threads = threads
        self._spin = spin
        self._constants = constants
        # The source graph, when the file binds it to its variants (the reader checked its digest): the model's
        # high-level ops (pools, norms, GELU, attention) as onnxruntime's own kernels and fusions know them, one
        # session for every variant. Else each variant's primitive graph, a session each.
        self._source = source
        # The session holds the weights it can prepack (see _session_weights) when there is one session; with a
        # session per variant each would hold its own copy, so every weight stays bound in place.
        self._prepack = variants == 1 or source is not None
        self._weights: dict[str, np.ndarray] = {}  # constant name -> the array onnxruntime reads
        self._sessions: dict[int, tuple[Any, OnnxForm, list[Any]] | None] = {}  # id(graph) -> what _session built

    def _options(self) -> Any:
        options = self._ort.SessionOptions()
        if self._threads is not None:
            options.intra_op_num_threads = self._threads
        if not self._spin:
            # Threads that spin after a call hold their cores for a while; in a server that time belongs to the
            # requests being decoded (served BERT on 2 cores: half the CPU per request, 10-20% more throughput).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # Fatal only: what onnxruntime reports (an error included) is aotc's to say, as ExecError or a warning.
        options.log_severity_level = 4
        return options

    def prepare(self, variant: Variant, binaries: Mapping[str, KernelBinary]) -> OrtProgram | CpuProgram:
        """The variant's program: onnxruntime over the source graph (when bound) or the variant's graph written as
        ONNX, or the numpy references when neither has an ONNX form (the compile's ``--explain`` names the op).
        Its plan and the binaries are not read."""
        graph = variant.graph
        built = None
        if self._source is not None and not interface_mismatch(graph, self._source):
            built = self._session(self._source, warn=False)
        if built is None:
            built = self._session(graph, warn=True)
        if built is None:
            return CpuProgram(graph)
        session, form, values = built
        weights = {name: self._weight(constant) for name, constant in form.weights.items()}
        return OrtProgram(session, graph, weights, form.id_bounds, self._run_options, held=values)

    def state_memory(self, specs: Sequence[StateSpec], env: Mapping[str, int], dims: tuple[int, ...]) -> StateMemory:
        """A session's states as onnxruntime reads them: float32 buffers for half-precision states (the model
        computes in float32, see build_model's float32)."""
        return StateMemory(specs, env, dims, widen=True)

    def read_state(self, memory: StateMemory, index: int) -> np.ndarray:
        return memory.arrays[index].astype(memory.specs[index].type.dtype.np)

    def _session(self, graph: Graph, warn: bool) -> tuple[Any, OnnxForm, list[Any]] | None:
        """onnxruntime's session over ``graph`` (built once per graph), or None when it has an op with no ONNX form
        or onnxruntime refuses the model (``warn``: say so)."""
        if id(graph) in self._sessions:
            return self._sessions[id(graph)]
        self._sessions[id(graph)] = None
        held = _session_weights(graph) if self._prepack else frozenset()
        try:
            form = build_model(graph, weights_as_inputs=True, float32=True, id_bounds=True, session_weights=held)
            options = self._options()
            supplied = {name: self._weight(constant) for name, constant in form.session_weights.items()}
            values = [self._ort.OrtValue.ortvalue_from_numpy(a) for a in supplied.values()]
            if supplied:
                options.add_external_initializers(list(supplied), values)
            session = self._ort.InferenceSession(form.model, options, providers=["CPUExecutionProvider"])
        except UnsupportedError:
            return None
        except Exception as e:  # a model aotc could not write, or onnxruntime refuses: the references still run it
            if warn:
                warnings.warn(
                    f"aotc: onnxruntime cannot run graph {graph.name!r} ({_first_line(e)}); "
                    "device='cpu' runs it on the numpy references",
                    FallbackWarning,
                    stacklevel=3,
                )
            return None
        # The session holds its own (prepacked) copies of the supplied weights now: the mapped pages they were copied
        # from leave this process's resident set, so the weights stay in memory once.
        for constant in form.session_weights.values():
            if self._weights[constant] is self._constants[constant]:
                release_pages(self._constants[constant])
        self._sessions[id(graph)] = (session, form, values)
        return self._sessions[id(graph)]

    def _weight(self, constant: str) -> np.ndarray:
        """The mapped array itself when it is float32 or an integer already; a half weight is widened once, here,
        for every variant that reads it."""
        if constant not in self._weights:
            array = self._constants[constant]
            if array.dtype.name in _HALF:
                array = array.astype(np.float32)
            contiguous = np.ascontiguousarray(array)  # the mapped array itself when it already is (bound in place)
            if contiguous.ndim != array.ndim:  # a 0-d array comes back 1-d, which onnxruntime refuses for a 0-d one
                contiguous = contiguous.reshape(array.shape)
            self._weights[constant] = contiguous
        return self._weights[constant]


class OrtProgram:
    """A variant run by its session, with its own guards (checked by the Executable) and its own reference program
    for errors."""

    def __init__(
        self,
        session: Any,
        graph: Graph,
        weights: Mapping[str, np.ndarray],
        bounds: Sequence[IdBound],
        run_options: Any,
        held: Sequence[Any] = (),
    ) -> None:
        self._session = session
        # the public session.run (the compiled session under it is a microsecond faster, but no API) and its options
        self._call, self._options = session.run, run_options
        self._held = tuple(held)  # the OrtValues the session was given: onnxruntime may read them for its lifetime
        self._graph = graph
        self._weights = dict(weights)
        self._inputs = [
            (name, np.dtype(np.float32) if v.type.dtype.value in _HALF else v.type.dtype.np)
            for name, v in zip(graph.input_names, graph.inputs)
        ]
        self._outputs = [o.name for o in session.get_outputs()]
        self._count = len(graph.outputs)  # the graph's outputs; the id bounds' come after them
        # The outputs written as float32 for a half output (build_model's float32), cast back after each run.
        self._casts = tuple((i, o.type.dtype.np) for i, o in enumerate(graph.outputs) if o.type.dtype.value in _HALF)
        self._bounds = tuple((*b.outputs, _size(b.size)) for b in bounds)
        self._reference = CpuProgram(graph)
        self._checks = _input_index_checks(graph)
        self._warned = threading.Lock()  # taken for good by the first fallback's warning
        # States: onnxruntime's ScatterND writes its input's buffer in place when its output is bound to that same
        # buffer (it copies the input only when they differ), which is safe for a state each of whose overwritten
        # values has its write as its only reader: then any order onnxruntime runs the nodes in is the graph's.
        # Another state's new value goes to a second buffer, which swaps in after the call (a copy of that state per
        # call, inside ScatterND).
        self._feeds = graph.num_feeds
        self._state_names = [
            (name, out)
            for name, out in zip(
                graph.input_names[self._feeds :], self._outputs[self._count - len(graph.states) : self._count]
            )
        ]
        self._results = graph.num_results
        self.in_place_states = _writes_alone(graph)
        self.in_place = all(self.in_place_states)
        self._allocated = [name for i, name in enumerate(self._outputs) if not self._results <= i < self._count]

    def run(self, feeds: Sequence[np.ndarray], env: Mapping[str, int]) -> list[np.ndarray]:
        for position, size, low, unsigned in self._checks:
            ids = feeds[position]
            if ids.size and _outside(ids, size if type(size) is int else evaluate(size, env), low, unsigned):
                return self._reference.run(feeds, env)  # raises the ExecError every backend raises for this id
        values = dict(self._weights)
        for (name, dtype), x in zip(self._inputs, feeds):
            values[name] = np.ascontiguousarray(x, dtype)
        try:
            # session.run over arrays: with onnxruntime 1.32 about half the per-call cost of run_with_ort_values
            outs = list(self._call(self._outputs, values, self._options))
        except Exception as e:
            # onnxruntime's message never reaches the user as an error: the reference raises aotc's error for these
            # inputs (a bad id computed inside the model, say), or computes the call onnxruntime could not.
            result = self._reference.run(feeds, env)
            self._warn(e)
            return result
        for low, high, size in self._bounds:
            # an empty ids tensor has low > high: never outside
            if int(outs[low]) < 0 or int(outs[high]) >= (size if type(size) is int else evaluate(size, env)):
                return self._reference.run(feeds, env)  # raises the ExecError every backend raises for this id
        if len(outs) > self._count:
            del outs[self._count :]
        for i, dtype in self._casts:
            outs[i] = outs[i].astype(dtype)
        return outs

    def run_session(self, feeds: Sequence[np.ndarray], env: Mapping[str, int], memory: StateMemory) -> list[np.ndarray]:
        """A call of a session over IOBinding: the states bound to the session's buffers, so onnxruntime reads and
        writes them where they are (in place, or into the spare buffers, which then swap in); the other inputs bound
        as arrays, read in place; the outputs allocated by onnxruntime, only the caller's ones turned to arrays."""
        for position, size, low, unsigned in self._checks:
            ids = feeds[position]
            if ids.size and _outside(ids, size if type(size) is int else evaluate(size, env), low, unsigned):
                return self._reference.run_session(feeds, env, memory)  # raises the ExecError every backend raises
        io = self._binding(memory)
        for (name, dtype), x in zip(self._inputs, feeds):
            io.bind_cpu_input(name, np.ascontiguousarray(x, dtype))
        for name in self._allocated:  # onnxruntime allocates these afresh for this call's shapes
            io.bind_output(name, "cpu")
        if not self.in_place:
            self._bind_states(io, memory, spare_only=True)
        try:
            self._session.run_with_iobinding(io, self._options)
        except Exception as e:
            # as run(): the reference raises aotc's error for these inputs, or computes the call (warned)
            result = self._reference.run_session(feeds, env, memory)
            self._warn(e)
            return result
        values = io.get_outputs()
        for low, high, size in self._bounds:
            if int(values[low].numpy()) < 0 or int(values[high].numpy()) >= (
                size if type(size) is int else evaluate(size, env)
            ):
                return self._reference.run_session(feeds, env, memory)  # raises the ExecError every backend raises
        outs = [values[i].numpy() for i in range(self._results)]
        for i, dtype in self._casts:
            outs[i] = outs[i].astype(dtype)
        if not self.in_place:
            assert memory.spare is not None
            for i, in_place in enumerate(self.in_place_states):
                if not in_place:
                    memory.arrays[i], memory.spare[i] = memory.spare[i], memory.arrays[i]
        return outs

    def _binding(self, memory: StateMemory) -> Any:
        """The session's IOBinding for this program: its weights and in-place states bound once, and every output
        bound once in the model's order (get_outputs lists them in the order they were first bound; a rebinding
        keeps its place)."""
        if memory.binding is None:
            memory.binding = {}
        io = memory.binding.get(id(self))
        if io is None:
            io = self._session.io_binding()
            for name, array in self._weights.items():
                io.bind_cpu_input(name, array)
            if not self.in_place and memory.spare is None:
                memory.spare = [
                    None if alone else np.empty_like(a) for a, alone in zip(memory.arrays, self.in_place_states)
                ]
            targets = {out: i for i, (_, out) in enumerate(self._state_names)}
            for name in self._outputs:
                if name in targets:
                    b = self._target(memory, targets[name])
                    io.bind_output(name, "cpu", 0, b.dtype, b.shape, b.ctypes.data)
                else:
                    io.bind_output(name, "cpu")
            self._bind_states(io, memory, spare_only=False)
            memory.binding[id(self)] = io
        return io

    def _target(self, memory: StateMemory, i: int) -> np.ndarray:
        """The buffer state ``i``'s new value goes to: its own (in place) or its spare."""
        if self.in_place_states[i]:
            return memory.arrays[i]
        assert memory.spare is not None
        return memory.spare[i]  # type: ignore[return-value]

    def _bind_states(self, io: Any, memory: StateMemory, spare_only: bool) -> None:
        """Each state's input and output bound to the session's buffers (``spare_only``: only the states whose
        buffers swap each call)."""
        for i, ((name, out), a) in enumerate(zip(self._state_names, memory.arrays)):
            if spare_only and self.in_place_states[i]:
                continue
            b = self._target(memory, i)
            io.bind_input(name, "cpu", 0, a.dtype, a.shape, a.ctypes.data)
            io.bind_output(out, "cpu", 0, b.dtype, b.shape, b.ctypes.data)

    def _warn(self, error: BaseException) -> None:
        if self._warned.acquire(blocking=False):
            warnings.warn(
                f"aotc: onnxruntime failed on inputs of graph {self._graph.name!r} that passed aotc's checks "
                f"({_first_line(error)}); device='cpu' computed the call with the numpy references (slower), as it "
                "will each call onnxruntime fails",
                FallbackWarning,
                stacklevel=4,
            )


def _writes_alone(graph: Graph) -> tuple[bool, ...]:
    """Per state: whether every value of it a write overwrites has that write as its only reader (see OrtProgram)."""
    readers: dict[int, int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            readers[v.id] = readers.get(v.id, 0) + 1
    return tuple(all(readers.get(v, 0) == 1 for v in c.versions[:-1]) for c in state_chains(graph))


def _session_weights(graph: Graph) -> frozenset[str]:
    """The weights to give the session as its own: every one that some node reads other than as a gather's table.
    onnxruntime prepacks a MatMul's, Gemm's or Conv's weight only when it holds it (packed GEMM panels, blocked
    convolution filters), which makes those ops up to 2x faster; an embedding table is read a few rows a call, so it
    stays mapped, its pages read only as they are used."""
    constants = {n.outputs[0].id: n.attrs["name"] for n in graph.nodes if n.op is Op.CONSTANT}
    held = set()
    for node in graph.nodes:
        for i, v in enumerate(node.inputs):
            if v.id in constants and not (node.op in GATHER_OPS and i == 0):
                held.add(constants[v.id])
    return frozenset(held)


def _input_index_checks(graph: Graph) -> tuple[tuple[int, ShapeDim, int, np.dtype | None], ...]:
    """Per gather whose ids come unchanged from a graph input: that input's position, the size ``n`` of the gathered
    axis, the lowest valid id as a multiple of ``n`` (-1 where negative ids count from the end, else 0), and for the
    strict rule over signed ids the unsigned dtype of their width (see _outside)."""
    position = {name: i for i, name in enumerate(graph.input_names)}
    checks = []
    for node in graph.nodes:
        if node.op not in GATHER_OPS:
            continue
        name, _ = index_source(graph, node)
        if name is not None:
            size = node.inputs[0].type.shape[node.attrs.get("axis", 0)]
            negative = allows_negative(node.attrs)
            ids = graph.inputs[position[name]].type.dtype.np
            unsigned = np.dtype(f"u{ids.itemsize}") if ids.kind == "i" and not negative else None
            checks.append((position[name], _size(size), -1 if negative else 0, unsigned))
    return tuple(checks)


def _outside(ids: np.ndarray, n: int, low: int, unsigned: np.dtype | None) -> bool:
    """Whether some id of a non-empty ``ids`` lies outside ``[low * n, n)``. For ``[0, n)`` over signed ids, one
    reduction: read as unsigned, a negative id is at least 2**(bits-1), above any n, so the largest is >= n exactly
    when some id is outside."""
    if unsigned is not None:
        return bool(_MAX(ids.view(unsigned), None) >= n)
    return bool(_MIN(ids, None) < low * n or _MAX(ids, None) >= n)


def _size(size: ShapeDim) -> ShapeDim:
    """A gathered axis's size as run() reads it: a plain int (``type(size) is int``), or the expression to evaluate."""
    return size if isinstance(size, SymExpr) else int(size)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
