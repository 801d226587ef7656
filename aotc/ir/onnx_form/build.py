"""aotc Graph -> ONNX model bytes at default-domain opset EXPORT_OPSET: the one emission behind ``aotc
export-onnx`` (aotc/onnx/exporter.py), the model a compile stores (aotc/onnx/runtime_model.py) and the model the
cpu backend builds from the verified graph it runs (aotc/runtime/backends/onnxrt.py).

Each symbol becomes a ``dim_param`` named after its Dim; ops map onto their ONNX equivalents where ONNX has one
(emitters.EMITTERS) and are written as their op-table decomposition otherwise. Symbol ranges are kept in the
model's metadata (``aotc.symbols``) so that importing the file again restores them; guards have no ONNX form and
are listed in ``aotc.guards`` for reference only.

Options: ``weights_as_inputs`` writes no weight data (each constant becomes a graph input after the model's own,
named in ``aotc.weights``, for whoever runs it to bind arrays it already holds; those named in ``session_weights``
become initializers that reference external data instead, for the caller to supply when it builds the session, so
that onnxruntime holds them as its own: it prepacks a GEMM's or a convolution's weights only then; each must be
read by some node, as onnxruntime refuses a supplied initializer that none reads); ``float32`` writes every
float16/bfloat16 tensor as float32 (``aotc.widened`` says which dtypes were); ``external`` puts initializers of a
KiB or more in a data file of that name (protobuf cannot hold 2 GiB); ``id_bounds`` adds, per gather whose ids
the model computes and whose rule refuses negative ids, unless the graph proves them valid (gather_ids.
ids_proved_valid: positions from an arange over a dim the table covers), two scalar outputs after the graph's own:
the ids' min and max, which the caller checks against the gathered axis after the run.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from aotc.errors import UnsupportedError
from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType
from aotc.ir.gather_ids import (
    GATHER_OPS,
    allows_negative,
    coordinate_columns,
    ids_nonnegative,
    ids_proved_valid,
    index_source,
    value_source,
)
from aotc.ir.graph import Graph
from aotc.ir.onnx_form import proto
from aotc.ir.onnx_form.context import ExportCtx, unique
from aotc.ir.onnx_form.emitters import DECOMPOSED_WHEN, EMITTERS
from aotc.ir.onnx_form.opset import (
    EXPORT_OPSET,
    GUARDS_META_KEY,
    IR_VERSION,
    SYMBOLS_META_KEY,
    WEIGHTS_META_KEY,
    WIDENED_META_KEY,
)
from aotc.ir.ops import OPS, Op
from aotc.ir.ops.scatter import scatter_allows_negative
from aotc.ir.symbolic import SymExpr, to_infix
from aotc.ir.types import Node, ShapeDim, TensorType
from aotc.ir.verify import verify

# Initializers of at least this many bytes go to the external data file, when there is one.
EXTERNAL_MIN_BYTES = 1024
_EXTERNAL_ALIGN = 4096  # each external tensor starts on a page, so onnxruntime may map it
# Where a session weight's data "is": no file; the session's builder supplies every such tensor itself.
SUPPLIED_LOCATION = "aotc-supplied-weight"


@dataclasses.dataclass(frozen=True)
class IdBound:
    """A gather whose ids the model computes: its node, the size of the gathered axis, and the positions of the
    ids' min and max among the model's outputs."""

    node: Node
    size: ShapeDim
    outputs: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class OnnxForm:
    """A graph written as ONNX: the model bytes and what its caller needs to run or save it."""

    model: bytes
    nodes: int
    # ONNX input name -> the constant it binds, for a model written with weights_as_inputs
    weights: Mapping[str, str]
    # ONNX initializer name -> the constant the caller supplies for it (the session_weights the model reads)
    session_weights: Mapping[str, str]
    # the half dtypes written as float32 ("float16", "bfloat16"), for a model written with float32
    widened: tuple[str, ...]
    id_bounds: tuple[IdBound, ...]
    # for a model written with ``external``: the data file's contents, arrays (and padding) to write in order
    external_data: tuple[np.ndarray, ...]


def build_model(
    graph: Graph,
    *,
    weights_as_inputs: bool = False,
    float32: bool = False,
    external: str | None = None,
    id_bounds: bool = False,
    session_weights: Collection[str] = (),
    producer_version: str = "",
) -> OnnxForm:
    """``graph`` as an ONNX model; UnsupportedError names an op with no ONNX form."""
    verify(graph, stage="onnx export")
    ctx = ExportCtx(graph, weights_as_inputs, float32)
    inputs = _declare_inputs(ctx, graph)
    out_names = _declare_outputs(ctx, graph)
    weight_inputs = _declare_constants(ctx, graph, as_inputs=weights_as_inputs)
    supplied = {name: w for name, w in weight_inputs.items() if w[0] in session_weights}
    ctx.held = _held_values(graph, frozenset(constant for constant, _ in supplied.values()))
    inputs += [_value_info(ctx, name, t) for name, (_, t) in weight_inputs.items() if name not in supplied]
    gathers, scatters = [], []
    for node in graph.nodes:
        _emit(ctx, node)
        if id_bounds and node.op in GATHER_OPS and not allows_negative(node.attrs):
            # ids straight from an input are checked before the run; ids the graph proves valid need no check
            if index_source(graph, node)[0] is None and not ids_proved_valid(graph, node, ctx.shape_ctx):
                gathers.append(node)
        if id_bounds and node.op is Op.SCATTER and not scatter_allows_negative(node.attrs):
            # ScatterND counts a negative position from the end: one the model computes is caught by its minimum
            # (onnxruntime raises for one past the end itself); positions from an input are checked before the run
            if _computes_negative(graph, node, ctx):
                scatters.append(node)
    outputs = []
    for v, name in zip(graph.outputs, out_names):
        if ctx.names[v.id] != name:
            ctx.one("Identity", [ctx.names[v.id]], name)
        outputs.append(_value_info(ctx, name, v.type))
    bounds = []
    for node in gathers:
        ids, dtype = ctx.names[node.inputs[1].id], node.inputs[1].type.dtype
        positions = []
        for reduce in ("ReduceMin", "ReduceMax"):
            positions.append(len(outputs))
            outputs.append(proto.value_info(ctx.one(reduce, [ids], keepdims=0), ctx.elem_type(dtype), []))
        size = node.inputs[0].type.shape[node.attrs.get("axis", 0)]
        bounds.append(IdBound(node, size, (positions[0], positions[1])))
    for node in scatters:
        ids = ctx.names[node.inputs[1].id]
        at = len(outputs)
        outputs.append(
            proto.value_info(ctx.one("ReduceMin", [ids], keepdims=0), ctx.elem_type(node.inputs[1].type.dtype), [])
        )
        bounds.append(IdBound(node, NO_BOUND, (at, at)))  # the minimum only: it must be >= 0
    initializers, data = _initializers(ctx, external)
    for name, (_, t) in supplied.items():
        itemsize = 4 if float32 and t.dtype in (DType.float16, DType.bfloat16) else t.dtype.np.itemsize
        nbytes = math.prod(t.shape) * itemsize
        initializers.append(proto.tensor_reference(name, t.shape, ctx.elem_type(t.dtype), SUPPLIED_LOCATION, nbytes))
    meta = {SYMBOLS_META_KEY: json.dumps({s.name: [s.min, s.max] for s in graph.symbols})}
    if graph.guards:
        meta[GUARDS_META_KEY] = json.dumps([str(gd) for gd in graph.guards])
    weights = {name: constant for name, (constant, _) in weight_inputs.items() if name not in supplied}
    if weights_as_inputs:
        meta[WEIGHTS_META_KEY] = json.dumps(weights)
    widened = tuple(d.value for d in sorted(ctx.widened, key=lambda d: d.value))
    if widened:
        meta[WIDENED_META_KEY] = json.dumps(list(widened))
    body = proto.graph(graph.name, ctx.nodes, inputs, outputs, initializers)
    model = proto.model(
        body, ir_version=IR_VERSION, opset=EXPORT_OPSET, producer=("aotc", producer_version), metadata=meta
    )
    session = {name: constant for name, (constant, _) in supplied.items()}
    return OnnxForm(model.tobytes(), len(ctx.nodes), weights, session, widened, tuple(bounds), data)


# The size an IdBound's maximum is checked against when only its minimum matters (a state write's positions).
NO_BOUND = 2**62


def _computes_negative(graph: Graph, node: Node, ctx: ExportCtx) -> bool:
    """Whether a strict scatter's positions may be negative: some coordinate column neither comes from a graph input
    (checked before the run) nor is proved >= 0 (an iota, a full of a non-negative value, moves of them)."""
    columns = coordinate_columns(graph, node)
    if columns is None:
        return not ids_nonnegative(graph, node.inputs[1], ctx.shape_ctx)
    return any(value_source(graph, c)[0] is None and not ids_nonnegative(graph, c, ctx.shape_ctx) for c in columns)


# Ops onnxruntime folds when their input is a constant it holds: a weight's transpose (a tied lm head), a cast.
_FOLDED = frozenset({Op.PERMUTE, Op.CAST})


def _held_values(graph: Graph, held: frozenset[str]) -> frozenset[int]:
    """The ids of the values onnxruntime holds as constants: the ``held`` constants and the folds of them."""
    ids: set[int] = set()
    for n in graph.nodes:
        if (n.op is Op.CONSTANT and n.attrs["name"] in held) or (n.op in _FOLDED and n.inputs[0].id in ids):
            ids.add(n.outputs[0].id)
    return frozenset(ids)


def _initializers(ctx: ExportCtx, external: str | None) -> tuple[list[proto.Message], tuple[np.ndarray, ...]]:
    messages: list[proto.Message] = []
    data: list[np.ndarray] = []
    offset = 0
    for name, array in ctx.initializers:
        elem = ctx.array_elem_type(array, name)
        if external is None or array.nbytes < EXTERNAL_MIN_BYTES:
            messages.append(proto.tensor(name, array, elem))
            continue
        pad = -offset % _EXTERNAL_ALIGN
        if pad:
            data.append(np.zeros(pad, np.uint8))
        offset += pad
        messages.append(proto.tensor(name, array, elem, external=(external, offset)))
        data.append(array)
        offset += array.nbytes
    return messages, tuple(data)


def _value_info(ctx: ExportCtx, name: str, t: TensorType) -> proto.Message:
    dims = [d if isinstance(d, int) else to_infix(d).replace(" ", "") for d in t.shape]
    return proto.value_info(name, ctx.elem_type(t.dtype), dims)


def _declare_inputs(ctx: ExportCtx, graph: Graph) -> list[proto.Message]:
    infos = []
    for name, v in zip(graph.input_names, graph.inputs):
        ctx.taken.add(name)
        ctx.names[v.id] = name
        for axis, d in enumerate(v.type.shape):
            if isinstance(d, SymExpr) and d.is_symbol():
                ctx.add_symbol_source(d.symbol_name, name, axis)
        infos.append(_value_info(ctx, name, v.type))
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
    for i, st in enumerate(graph.states):  # a state's new value, beside the state's own input
        names[graph.num_results + i] = f"{st.name}.next"
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
        return  # already an initializer or an input
    ins = [ctx.names[v.id] for v in node.inputs]
    outs = []
    for o in node.outputs:
        if o.id not in ctx.names:
            ctx.names[o.id] = ctx.fresh(f"v{o.id}")
        outs.append(ctx.names[o.id])
    emitter = EMITTERS.get(node.op)
    declines = DECOMPOSED_WHEN.get(node.op)
    if emitter is not None and not (declines is not None and declines(node)):
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
