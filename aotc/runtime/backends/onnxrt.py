"""The cpu backend on onnxruntime: the artifact's stored ONNX model (aotc/onnx/runtime_model.py) run by
onnxruntime's CPU kernels, its weights read in place from the artifact's mapped, verified segments.

The model has its weights as inputs, named in its metadata; each is bound once, at load, to the mapped array,
and passed with every call (onnxruntime reads a contiguous array of the input's dtype in place: no copy).
Half-precision weights are cast to float32 once, here: the one copy this backend makes. onnxruntime is imported
only when this backend is built.

Every input has passed aotc's guards before a program runs. A token id outside its gather's valid range that
comes straight from an input is found here, before onnxruntime sees it (onnxruntime would wrap a negative id
that aotc refuses); the numpy reference program then runs the call and raises the same ExecError as every other
backend. Any error onnxruntime raises is handled the same way: the reference runs the call, so the user sees
aotc's error (or, for an onnxruntime failure on valid inputs, the reference's result), never onnxruntime's.

One session serves every thread: onnxruntime's ``run`` is thread-safe and a call keeps its state in locals.
``threads`` sets onnxruntime's intra-op threads (None: its default, one per physical core).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aotc.errors import ArtifactError
from aotc.ir.gather_ids import allows_negative, index_source
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.symbolic import SymExpr
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import ShapeDim
from aotc.runtime.backends.cpu import CpuProgram

WEIGHTS_META_KEY = "aotc.weights"  # as aotc/onnx/_common.py writes it (the runtime never imports aotc.onnx)
_ORT_DTYPES = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(bool)": np.dtype(np.bool_),
}


class OrtBackend:
    """One onnxruntime session over an artifact's stored ONNX model and mapped weights."""

    name = "cpu"

    def __init__(self, model: bytes, constants: Mapping[str, np.ndarray], *, threads: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        # Fatal only: what onnxruntime reports (an error included) is aotc's to say, as ArtifactError or ExecError.
        options.log_severity_level = 4
        # The model carries no weight data; should a crafted one name external data, resolving it under a path that
        # cannot exist refuses it rather than reading files near the process's working directory.
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", os.path.join(os.devnull, "no-external-data")
        )
        try:
            session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise ArtifactError(f"onnxruntime cannot load the artifact's ONNX model: {_first_line(e)}") from None
        try:
            bound = json.loads(session.get_modelmeta().custom_metadata_map.get(WEIGHTS_META_KEY, "{}"))
        except ValueError:
            bound = None
        if not isinstance(bound, dict):
            raise ArtifactError(f"the artifact's ONNX model has no valid {WEIGHTS_META_KEY!r} metadata")
        self._session = session
        self.weights: dict[str, np.ndarray] = {}
        self.inputs: list[tuple[str, np.dtype]] = []
        for info in session.get_inputs():
            dtype = _ORT_DTYPES.get(info.type)
            if dtype is None:
                raise ArtifactError(
                    f"the artifact's ONNX model takes {info.name!r} as {info.type}, not a dtype of aotc"
                )
            if info.name in bound:
                self.weights[info.name] = self._bind(info, bound[info.name], constants, dtype)
            else:
                self.inputs.append((info.name, dtype))
        self.outputs = [o.name for o in session.get_outputs()]

    def _bind(self, info: Any, constant: str, constants: Mapping[str, np.ndarray], dtype: np.dtype) -> np.ndarray:
        if constant not in constants:
            raise ArtifactError(
                f"the artifact's ONNX model binds {info.name!r} to constant {constant!r}, which it lacks"
            )
        array = constants[constant]
        if tuple(array.shape) != tuple(info.shape):
            raise ArtifactError(
                f"the artifact's ONNX model takes weight {info.name!r} as {list(info.shape)}, "
                f"but constant {constant!r} is {list(array.shape)}"
            )
        # The mapped array itself when it is float32 already; a half weight is widened once, here.
        return np.ascontiguousarray(array if array.dtype == dtype else array.astype(dtype))

    def prepare(self, graph: Graph) -> OrtProgram:
        return OrtProgram(self, graph)

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The model's outputs for checked inputs (in input order); onnxruntime's errors propagate."""
        values = dict(self.weights)
        for (name, dtype), x in zip(self.inputs, feeds):
            values[name] = np.ascontiguousarray(x, dtype)
        # session.run over arrays: with onnxruntime 1.32 about half the per-call cost of run_with_ort_values
        return self._session.run(self.outputs, values)


class OrtProgram:
    """A variant run by the backend's session: every variant shares the one model, each keeps its own guards
    (checked by the Executable) and its own reference program for errors."""

    def __init__(self, backend: OrtBackend, graph: Graph) -> None:
        names = [name for name, _ in backend.inputs]
        if names != list(graph.input_names) or len(backend.outputs) != len(graph.outputs):
            raise ArtifactError(
                f"the artifact's ONNX model takes {names} and gives {len(backend.outputs)} outputs; "
                f"graph {graph.name} takes {list(graph.input_names)} and gives {len(graph.outputs)}"
            )
        self._backend = backend
        self._reference = CpuProgram(graph)
        self._checks = _input_index_checks(graph)
        self._dtypes = [o.type.dtype.np for o in graph.outputs]

    def run(self, feeds: Sequence[np.ndarray], env: Mapping[str, int]) -> list[np.ndarray]:
        if any(_outside(feeds[pos], size, negative, env) for pos, size, negative in self._checks):
            return self._reference.run(feeds, env)  # raises the ExecError every backend raises for this id
        try:
            outs = self._backend.run(feeds)
        except Exception:
            # onnxruntime's message never reaches the user: the reference raises aotc's error for these inputs
            # (a bad id computed inside the model, say), or computes the call onnxruntime could not.
            return self._reference.run(feeds, env)
        return [x if x.dtype == dt else x.astype(dt) for x, dt in zip(outs, self._dtypes)]


def _input_index_checks(graph: Graph) -> list[tuple[int, ShapeDim, bool]]:
    """Per gather whose ids come unchanged from a graph input: that input's position, the size of the gathered
    axis, and whether negative ids count from the end."""
    position = {name: i for i, name in enumerate(graph.input_names)}
    checks = []
    for node in graph.nodes:
        if node.op is not Op.GATHER:
            continue
        name, _ = index_source(graph, node)
        if name is not None:
            size = node.inputs[0].type.shape[node.attrs.get("axis", 0)]
            checks.append((position[name], size, allows_negative(node.attrs)))
    return checks


def _outside(ids: np.ndarray, size: ShapeDim, negative: bool, env: Mapping[str, int]) -> bool:
    if ids.size == 0:
        return False
    n = evaluate(size, env) if isinstance(size, SymExpr) else size
    return bool(ids.min() < (-n if negative else 0) or ids.max() >= n)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
