"""aotc Graph -> ONNX model at default-domain opset ``EXPORT_OPSET`` (18).

Opset 18 is the first where every reduction takes ``axes`` as an input, and onnxruntime has run it since 1.14;
ops ONNX only gained later (Gelu in 20, Attention and RMSNormalization in 23) are written as decompositions.

Each symbol becomes a ``dim_param`` named after its Dim; weights become initializers (stored as external data
next to the file when they pass 2 GiB, protobuf's limit); ops map onto their ONNX equivalents where ONNX has
one (export_ops.EMITTERS) and are written as their op-table decomposition otherwise. Symbol ranges are kept in
the model's metadata (``aotc.symbols``) so that importing the file again restores them; guards have no ONNX
form and are listed in ``aotc.guards`` for reference only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aotc.errors import UnsupportedError
from aotc.ir.builder import Builder
from aotc.ir.graph import Graph
from aotc.ir.ops import OPS, Op
from aotc.ir.symbolic import SymExpr, to_infix
from aotc.ir.types import Node, TensorType
from aotc.ir.verify import verify
from aotc.onnx._common import EXPORT_OPSET, SYMBOLS_META_KEY, WEIGHTS_META_KEY, require_onnx, unique
from aotc.onnx.export_ctx import ExportCtx, elem_type
from aotc.onnx.export_ops import EMITTERS

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
    graph = art.source if art.source is not None else art.variants[0]
    return export_graph(graph, path)


def export_graph(graph: Graph, path: str | os.PathLike | None = None, *, weights_as_inputs: bool = False) -> Any:
    """Write ``graph`` as an ONNX model to ``path`` (when given) and return the ``onnx.ModelProto``.

    ``weights_as_inputs`` writes no weight data: each of the graph's constants becomes a graph input after the
    model's own, and the model's metadata maps those inputs to the constants' names (``aotc.weights``), so that
    whoever runs it binds arrays it already holds (aotc/onnx/runtime_model.py)."""
    onnx = require_onnx()
    verify(graph, stage="onnx export")
    ctx = ExportCtx(graph, weights_as_inputs)
    inputs = _declare_inputs(ctx, graph)
    out_names = _declare_outputs(ctx, graph)
    weight_inputs = _declare_constants(ctx, graph, as_inputs=weights_as_inputs)
    inputs += [_value_info(name, t) for name, (_, t) in weight_inputs.items()]
    for node in graph.nodes:
        _emit(ctx, node)
    outputs = []
    for v, name in zip(graph.outputs, out_names):
        if ctx.names[v.id] != name:
            ctx.one("Identity", [ctx.names[v.id]], name)
        outputs.append(_value_info(name, v.type))
    g = onnx.helper.make_graph(ctx.nodes, graph.name, inputs, outputs, initializer=ctx.initializers)
    opsets = [onnx.helper.make_opsetid("", EXPORT_OPSET)]
    model = onnx.helper.make_model(g, opset_imports=opsets, producer_name="aotc", producer_version=_version())
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets)
    meta = {SYMBOLS_META_KEY: json.dumps({s.name: [s.min, s.max] for s in graph.symbols})}
    if graph.guards:
        meta["aotc.guards"] = json.dumps([str(gd) for gd in graph.guards])
    if weights_as_inputs:
        meta[WEIGHTS_META_KEY] = json.dumps({name: constant for name, (constant, _) in weight_inputs.items()})
    onnx.helper.set_model_props(model, meta)
    if path is not None:
        _save(model, Path(path), sum(int(np.asarray(a).nbytes) for a in graph.constants.values()))
    elif (
        not weights_as_inputs
        and sum(int(np.asarray(a).nbytes) for a in graph.constants.values()) > EXTERNAL_DATA_THRESHOLD
    ):
        raise UnsupportedError("a model with over 2 GiB of weights needs a path to write its external data")
    return model


def _version() -> str:
    import aotc

    return aotc.__version__


def _save(model: Any, path: Path, weight_bytes: int) -> None:
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    if weight_bytes > EXTERNAL_DATA_THRESHOLD:
        data = path.name + ".data"
        (path.parent / data).unlink(missing_ok=True)  # external data is appended to; start clean
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data,
            size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(path))


def _value_info(name: str, t: TensorType) -> Any:
    import onnx

    dims = [d if isinstance(d, int) else to_infix(d).replace(" ", "") for d in t.shape]
    return onnx.helper.make_tensor_value_info(name, elem_type(t.dtype), dims)


def _declare_inputs(ctx: ExportCtx, graph: Graph) -> list[Any]:
    infos = []
    for name, v in zip(graph.input_names, graph.inputs):
        ctx.taken.add(name)
        ctx.names[v.id] = name
        for axis, d in enumerate(v.type.shape):
            if isinstance(d, SymExpr) and d.is_symbol():
                ctx.add_symbol_source(d.symbol_name, name, axis)
        infos.append(_value_info(name, v.type))
    return infos


def _declare_outputs(ctx: ExportCtx, graph: Graph) -> list[str]:
    """Output names from the output tree (dict keys, tuple positions), reserved before anything else."""
    names: list[str] = [""] * len(graph.outputs)

    def walk(tree: Any, prefix: str) -> None:
        if isinstance(tree, int):
            names[tree] = prefix or "output"
            return
        ((kind, items),) = tree.items()
        if kind == "dict":
            for key, sub in items:
                walk(sub, f"{prefix}.{key}" if prefix else str(key))
        else:
            for i, sub in enumerate(items):
                walk(sub, f"{prefix}.{i}" if prefix else f"output_{i}")

    walk(graph.output_tree, "")
    constants = {n.outputs[0].id for n in graph.nodes if n.op is Op.CONSTANT}
    out = []
    for v, name in zip(graph.outputs, names):
        name = unique(name, ctx.taken)
        out.append(name)
        if v.id not in ctx.names and v.id not in constants:
            ctx.names[v.id] = name  # the producing node writes the output directly
    return out


def _declare_constants(ctx: ExportCtx, graph: Graph, as_inputs: bool) -> dict[str, tuple[str, TensorType]]:
    """Name each CONSTANT's value; returns ONNX input name -> (constant name, type) for the weights made inputs."""
    inputs: dict[str, tuple[str, TensorType]] = {}
    by_constant: dict[str, str] = {}
    for n in graph.nodes:
        if n.op is not Op.CONSTANT:
            continue
        constant = n.attrs["name"]
        if as_inputs and constant in by_constant:  # one input per weight, however many nodes read it
            ctx.names[n.outputs[0].id] = by_constant[constant]
            continue
        name = ctx.fresh(constant)
        ctx.names[n.outputs[0].id] = name
        if as_inputs:
            by_constant[constant] = name
            inputs[name] = (constant, n.outputs[0].type)
        else:
            ctx.initializer(np.asarray(graph.constants[constant]), name)
    return inputs


def _emit(ctx: ExportCtx, node: Node) -> None:
    if node.op is Op.CONSTANT:
        return  # already an initializer
    ins = [ctx.names[v.id] for v in node.inputs]
    outs = []
    for o in node.outputs:
        if o.id not in ctx.names:
            ctx.names[o.id] = ctx.fresh(f"v{o.id}")
        outs.append(ctx.names[o.id])
    emitter = EMITTERS.get(node.op)
    if emitter is not None:
        emitter(ctx, node, ins, outs)
        return
    d = OPS[node.op]
    if d.decompose is None:
        raise UnsupportedError(f"primitive {node.op.value} has no ONNX form")
    b = Builder(ctx.shape_ctx, next_id=ctx.next_id, loc=node.loc)
    results = d.decompose(b, list(node.inputs), node.attrs)
    ctx.next_id = b.next_id
    copies = []
    for r, name in zip(results, outs):
        if r.id in ctx.names:  # the decomposition returned an existing value (an input, or a repeated result)
            copies.append((ctx.names[r.id], name))
        else:
            ctx.names[r.id] = name
    for sub in b.nodes:
        _emit(ctx, sub)
    for src, dst in copies:
        ctx.one("Identity", [src], dst)
