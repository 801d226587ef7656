"""An ``onnx.backend.base.Backend`` so ONNX's backend test suite (and any ONNX tooling) can drive aotc. It sits with
the compiler (it imports, compiles and loads), above aotc/onnx/, which only converts.

``prepare`` imports the model and compiles it the way ``aotc compile model.onnx`` does (lower, write the
artifact, load it with the runtime on the cpu backend). ``compile_graph`` is the one place that decides how an
imported graph executes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from aotc.errors import AotcError, GuardError, UnsupportedError
from aotc.ir.graph import Graph
from aotc.onnx.importer import import_onnx
from aotc.onnx.node import NeedsKnownInput

RunFn = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


def compile_graph(graph: Graph, runtime_device: str = "cpu") -> RunFn:
    """An imported high-level graph as a function of its flat inputs: lowered, written as an artifact and
    loaded by the runtime on ``runtime_device`` ("cpu": the numpy references, or "interpret" to run the
    scheduled Triton kernels under the Triton interpreter), the path ``aotc compile model.onnx`` takes.

    Raises UnsupportedError for "interpret" when the model has no kernel to run: the scheduler refused it (its
    reason is given) or every output is an input, a weight or a view of one."""
    import dataclasses

    import aotc.runtime
    from aotc.compiler import compile_graph as compile_to_artifact
    from aotc.lowering.options import CompileOptions

    if runtime_device not in ("cpu", "interpret"):
        raise AotcError(f"runtime_device must be 'cpu' or 'interpret', got {runtime_device!r}")
    # It runs on the cpu (or the interpreter): the kernels are scheduled (so every node test exercises the
    # scheduler) but no cubins are built for GPUs it never uses.
    options = dataclasses.replace(CompileOptions.from_env(), targets=())
    compiled = compile_to_artifact(graph, options=options)
    if runtime_device == "interpret" and compiled.schedule is None:
        raise UnsupportedError(f"device 'interpret' runs the scheduled kernels; this model has {compiled.kernels.note}")
    if runtime_device == "interpret" and not compiled.schedule.kernels:
        # Nothing would be interpreted: counting it as run would claim kernel coverage it doesn't give.
        raise UnsupportedError(
            "device 'interpret' runs the scheduled kernels; this model needs none "
            "(its outputs are inputs, weights or views of them)"
        )
    # "cpu" is the numpy references over the lowered graph: this adapter checks aotc's import and lowering, which
    # load(device="cpu") on onnxruntime would bypass by running the ONNX model the artifact stores.
    exe = aotc.runtime.load(compiled.artifact_bytes, device="reference" if runtime_device == "cpu" else runtime_device)
    names = exe.input_names

    def run(feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(feeds) != len(names):
            raise GuardError(f"the model takes {len(names)} inputs, got {len(feeds)}")
        return exe.run(dict(zip(names, feeds)))

    return run


class AotcRep(BackendRep):
    """A prepared model: ``run`` takes inputs in graph order (a list, one array, or a name -> array dict)."""

    def __init__(self, graph: Graph, run: RunFn, onnx_input_names: Sequence[str]) -> None:
        self.graph = graph
        self._run = run
        self._onnx_names = list(onnx_input_names)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if isinstance(inputs, Mapping):
            missing = [n for n in self._onnx_names if n not in inputs]
            if missing:
                raise GuardError(f"missing inputs {missing}")
            inputs = [inputs[n] for n in self._onnx_names]
        return tuple(self._run([np.asarray(x) for x in inputs]))


class SpecializingRep(BackendRep):
    """A model that feeds a shape-like tensor (Reshape's shape, Slice's starts...) as a graph input, or computes
    one from small graph inputs (a window length).

    aotc needs those at compile time, so each call compiles the model with the values it was given for them
    (cached per value), the way a shape-tensor input is handled by ahead-of-time engines.
    """

    MAX_VARIANTS = 16

    def __init__(
        self, model: Any, onnx_input_names: Sequence[str], first_needed: Sequence[str], runtime_device: str = "cpu"
    ) -> None:
        self.model = model
        self.runtime_device = runtime_device
        self._names = list(onnx_input_names)
        self._needed = list(first_needed)
        self._cache: dict[tuple, tuple[Graph, RunFn]] = {}

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        feeds = dict(inputs) if isinstance(inputs, Mapping) else dict(zip(self._names, inputs))
        while True:
            frozen = {n: np.asarray(feeds[n]) for n in self._needed}
            key = tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in frozen.items())
            if key not in self._cache:
                try:
                    graph = import_onnx(self.model, constant_inputs=frozen)
                except NeedsKnownInput as e:
                    more = [n for n in e.input_names if n not in self._needed]
                    if not more:
                        raise
                    self._needed += more
                    continue
                if len(self._cache) >= self.MAX_VARIANTS:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = (graph, compile_graph(graph, self.runtime_device))
            _, run = self._cache[key]
            return tuple(run([np.asarray(feeds[n]) for n in self._names if n not in frozen]))


class AotcBackend(Backend):
    """aotc as an ONNX backend: CPU only, inference only."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", *, runtime_device: str = "cpu", **kwargs: Any) -> BackendRep:
        """``runtime_device``: the aotc runtime backend that runs the compiled model, "cpu" or "interpret"
        (the scheduled Triton kernels under the Triton interpreter, to test the kernels themselves)."""
        inits = {t.name for t in model.graph.initializer}
        names = [vi.name for vi in model.graph.input if vi.name not in inits]
        try:
            graph = import_onnx(model)
        except NeedsKnownInput as e:
            if not e.input_names:
                raise
            return SpecializingRep(model, names, e.input_names, runtime_device)
        return AotcRep(graph, compile_graph(graph, runtime_device), names)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls, node: Any, inputs: Any, device: str = "CPU", outputs_info: Any = None, **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        import onnx

        arrays = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
        present = [n for n in node.input if n]
        graph_inputs = [
            onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(present, arrays)
        ]
        outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        graph = onnx.helper.make_graph([node], "node", graph_inputs, outputs)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        return cls.run_model(model, arrays, device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


prepare = AotcBackend.prepare
run_model = AotcBackend.run_model
run_node = AotcBackend.run_node
supports_device = AotcBackend.supports_device
