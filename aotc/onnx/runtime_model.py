"""The ONNX model a compile stores in the artifact (schema 7's ``onnx`` field): the model's high-level graph as a
weightless float32 model, for ``aotc inspect`` and for tools that want an ONNX form of the file.

The cpu backend does not run it: a stored model is bytes like any other in the file, bound to nothing the reader
checks, so the runtime builds its onnxruntime model from the verified variant graph it runs
(aotc/runtime/backends/onnxrt.py). Both are written by the one emission, aotc/ir/onnx_form/build.py.

Each weight is a graph input named in the model's metadata (``aotc.weights``: input name -> the artifact
constant it binds), so the model holds no weight data. It computes in float32 throughout: float16 and bfloat16
tensors are widened, and the metadata says which dtypes were (``aotc.widened``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aotc.errors import AotcError
from aotc.ir.graph import Graph
from aotc.ir.onnx_form import build_model

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
    """The weightless float32 ONNX model of ``graph``, or None with the reason (naming the op)."""
    import aotc

    try:
        form = build_model(graph, weights_as_inputs=True, float32=True, producer_version=aotc.__version__)
    except AotcError as e:  # an op with no ONNX form
        note = f"onnx: none stored ({e})"
        return RuntimeOnnx(None, note, {"stored": False, "reason": str(e)})
    widened = list(form.widened)
    how = f", float32 (widened from {' and '.join(widened)})" if widened else ""
    note = f"onnx: stored ({form.nodes} nodes, {len(form.weights)} weights bound by name{how})"
    summary = {"stored": True, "nodes": form.nodes, "weights": len(form.weights), "widened_from": widened}
    return RuntimeOnnx(form.model, note, summary)
