"""The ONNX model an artifact stores for onnxruntime, the cpu backend's engine (aotc/runtime/backends/onnxrt.py).

It is the model's high-level graph with no weight data: each weight is a graph input named in the model's
metadata (``aotc.weights``: input name -> the artifact constant it binds), so at load the runtime binds the
artifact's mapped, checksum-verified segments to it and the weights stay stored once, never copied. Inputs
rather than initializers: with onnxruntime 1.32, a session over initializers (in the model, as in-memory
external data, or as ``add_initializer`` stubs) held one to three copies of the weights after it was built
(its own tensors, constant-folded transposes, prepacked GEMM and reordered conv weights), while inputs given as
OrtValues over the mapped arrays are read in place. The price is that onnxruntime cannot prepack them: a
matmul with few rows or a convolution runs slower than on a session that owns its weights (see README).

It computes in float32 throughout: float16 and bfloat16 tensors are widened (onnxruntime's x86 CPU kernels have
few half-precision kernels and none faster than float32's), and the metadata says which dtypes were
(``aotc.widened``); the runtime casts half weights once at load, half inputs per call, and outputs back to the
graph's dtypes.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from aotc.errors import AotcError
from aotc.ir.graph import Graph

# ONNX element types that are widened, and their names for the metadata.
_HALF = {10: "float16", 16: "bfloat16"}
_FLOAT = 1
WIDENED_META_KEY = "aotc.widened"
# The artifact's meta key for RuntimeOnnx.summary (aotc inspect reads it there).
ONNX_META_KEY = "onnx"


@dataclasses.dataclass(frozen=True)
class RuntimeOnnx:
    """What the compiler stores (``model``; None when the graph has no ONNX form), its ``--explain`` line, and
    what ``aotc inspect`` shows of it (``summary``, kept in the artifact's meta: the reader never parses ONNX)."""

    model: bytes | None
    note: str
    summary: dict[str, Any]


def runtime_onnx(graph: Graph) -> RuntimeOnnx:
    """The weightless float32 ONNX model of ``graph`` for onnxruntime, or None with the reason (naming the op)."""
    try:
        from aotc.onnx.exporter import export_graph

        model = export_graph(graph, weights_as_inputs=True)
    except AotcError as e:  # an op with no ONNX form, or no onnx package (UnsupportedError saying what to install)
        note = f"onnx: none stored, device='cpu' runs the numpy references ({e})"
        return RuntimeOnnx(None, note, {"stored": False, "reason": str(e)})
    widened = widen_to_float32(model)
    if widened:
        _set_prop(model, WIDENED_META_KEY, json.dumps(widened))
    weights = len(json.loads(_props(model)["aotc.weights"]))
    how = f", float32 (widened from {' and '.join(widened)})" if widened else ""
    note = f"onnx: stored for onnxruntime ({len(model.graph.node)} nodes, {weights} weights bound by name{how})"
    summary = {"stored": True, "nodes": len(model.graph.node), "weights": weights, "widened_from": widened}
    return RuntimeOnnx(model.SerializeToString(), note, summary)


def widen_to_float32(model: Any) -> list[str]:
    """Retype every float16/bfloat16 tensor of ``model`` as float32, in place; returns the dtypes widened."""
    seen: set[int] = set()
    _widen_graph(model.graph, seen)
    return [_HALF[t] for t in sorted(seen)]


def _widen_graph(graph: Any, seen: set[int]) -> None:
    from onnx import AttributeProto

    for info in (*graph.input, *graph.output, *graph.value_info):
        tensor_type = info.type.tensor_type
        if tensor_type.elem_type in _HALF:
            seen.add(tensor_type.elem_type)
            tensor_type.elem_type = _FLOAT
    for i, t in enumerate(graph.initializer):
        if t.data_type in _HALF:
            graph.initializer[i].CopyFrom(_widen_tensor(t, seen))
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type in ("Cast", "EyeLike", "RandomNormal", "RandomUniform") and attr.name in ("to", "dtype"):
                if attr.i in _HALF:
                    seen.add(attr.i)
                    attr.i = _FLOAT
            elif attr.type == AttributeProto.TENSOR and attr.t.data_type in _HALF:
                attr.t.CopyFrom(_widen_tensor(attr.t, seen))
            elif attr.type == AttributeProto.GRAPH:
                _widen_graph(attr.g, seen)


def _widen_tensor(t: Any, seen: set[int]) -> Any:
    from onnx import numpy_helper

    seen.add(t.data_type)
    return numpy_helper.from_array(np.asarray(numpy_helper.to_array(t), dtype=np.float32), t.name)


def _props(model: Any) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def _set_prop(model: Any, key: str, value: str) -> None:
    entry = model.metadata_props.add()
    entry.key, entry.value = key, value
