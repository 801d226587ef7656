"""``aotc export-onnx``: an aotc Graph, traced model or artifact as an ``onnx.ModelProto`` and an ``.onnx`` file.

The model is written by the one emission aotc has (aotc/ir/onnx_form/build.py, which the runtime uses too); this
module adds what a user's file needs: the onnx package's ModelProto to return, and weights above 2 GiB (protobuf's
limit) stored as external data next to the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aotc.errors import UnsupportedError
from aotc.ir.graph import Graph
from aotc.ir.onnx_form import OnnxForm, build_model
from aotc.ir.ops import Op
from aotc.onnx._common import require_onnx

# Initializers above this many bytes in total go to an external data file (protobuf can't serialize 2 GiB).
EXTERNAL_DATA_THRESHOLD = 2**31 - 2**26


def export_onnx(model: Any, inputs: Mapping[str, Any], path: str | os.PathLike | None, name: str | None = None) -> Any:
    """Trace ``model`` (an aotc.nn.Module or a function) on ``inputs`` (name -> TensorSpec) and export it."""
    from aotc.frontend.trace import trace

    graph = trace(model, inputs, name=name) if name is not None else trace(model, inputs)
    return export_graph(graph, path)


def export_artifact(artifact: Any, path: str | os.PathLike | None) -> Any:
    """Export an aotc artifact (a path, bytes or a read Artifact): its high-level source graph when it kept
    one, else its first variant."""
    from aotc.artifact.reader import read_artifact

    art = artifact if hasattr(artifact, "variants") else read_artifact(artifact)
    graph = art.source if art.source is not None else art.variants[0].graph
    return export_graph(graph, path)


def export_graph(graph: Graph, path: str | os.PathLike | None = None, *, weights_as_inputs: bool = False) -> Any:
    """Write ``graph`` as an ONNX model to ``path`` (when given) and return the ``onnx.ModelProto``.

    ``weights_as_inputs`` writes no weight data: each of the graph's constants becomes a graph input after the
    model's own, named in the model's metadata (``aotc.weights``), for whoever runs it to bind arrays it already
    holds."""
    onnx = require_onnx()
    graph = _without_unread_constants(graph)
    external = None
    weight_bytes = sum(int(np.asarray(a).nbytes) for a in graph.constants.values())
    if not weights_as_inputs and weight_bytes > EXTERNAL_DATA_THRESHOLD:
        if path is None:
            raise UnsupportedError("a model with over 2 GiB of weights needs a path to write its external data")
        external = Path(path).name + ".data"
    form = build_model(graph, weights_as_inputs=weights_as_inputs, external=external, producer_version=_version())
    if path is not None:
        _save(form, Path(path), external)
    return onnx.load_model_from_string(form.model)


def _without_unread_constants(graph: Graph) -> Graph:
    """``graph`` less the constants nothing reads (the torch importer stores none, but a rewritten graph may keep
    some): each would be an initializer no node reads, which onnxruntime warns about."""
    read = {v.id for n in graph.nodes for v in n.inputs} | {v.id for v in graph.outputs}
    nodes = tuple(n for n in graph.nodes if n.op is not Op.CONSTANT or n.outputs[0].id in read)
    if len(nodes) == len(graph.nodes):
        return graph
    names = {n.attrs["name"] for n in nodes if n.op is Op.CONSTANT}
    return graph.replace(nodes=nodes, constants={k: v for k, v in graph.constants.items() if k in names})


def _version() -> str:
    import aotc

    return aotc.__version__


def _save(form: OnnxForm, path: Path, external: str | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(form.model)
    if external is not None:
        with open(path.parent / external, "wb") as f:
            for chunk in form.external_data:
                f.write(np.ascontiguousarray(chunk).reshape(-1).view(np.uint8).data)
