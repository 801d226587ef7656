"""Graphs, attrs and the artifact header into a FlatBuffer (schema.fbs). Used by the writer only.

Graphs are stored by column over tables that every graph of the artifact shares (strings, tensor
types, attr values, attr sets). A model of thousands of nodes has a few dozen distinct types and
attrs, so interning them turns the work per node into a few list appends, and each graph into a few
numeric vectors that the FlatBuffers builder copies in one go.
"""

from __future__ import annotations

import json
import numbers
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np

from aotc.artifact.fb_build import longs, string, strings, table_vector
from aotc.artifact.generated import Artifact as FbArtifact
from aotc.artifact.generated import AttrSet as FbAttrSet
from aotc.artifact.generated import AttrValue as FbAttrValue
from aotc.artifact.generated import Constant as FbConstant
from aotc.artifact.generated import Graph as FbGraph
from aotc.artifact.generated import Guard as FbGuard
from aotc.artifact.generated import Segment as FbSegment
from aotc.artifact.generated import State as FbState
from aotc.artifact.generated import Symbol as FbSymbol
from aotc.artifact.generated import TensorType as FbTensorType
from aotc.artifact.generated import Variant as FbVariant
from aotc.artifact.generated.ValueKind import ValueKind
from aotc.artifact.layout import DTYPE_CODES, MAX_ATTR_DEPTH
from aotc.artifact.plan_checks import GRAPH_FEATURES, STATE_FEATURE
from aotc.artifact.plan_encode import KernelPlan, encode_codes, encode_schedule
from aotc.errors import ArtifactError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, Guard, Symbol
from aotc.ir.state import StateProblem, state_chains
from aotc.ir.symbolic import SymExpr, to_sexpr
from aotc.ir.types import Attrs, TensorType
from aotc.ir.variant import Variant

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_DOUBLE = struct.Struct("<d")


@dataclass(frozen=True)
class ConstantEntry:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    segment: int


@dataclass(frozen=True)
class SegmentEntry:
    offset: int  # from the data start (see schema.fbs)
    length: int
    checksum: bytes


@dataclass(frozen=True)
class Header:
    schema_version: int
    producer_version: str
    model_name: str
    meta_json: str


@dataclass(frozen=True)
class _AttrRow:
    kind: int
    int_value: int = 0
    float_value: float = 0.0
    string: int = 0
    items: tuple[int, ...] = ()


def new_builder() -> flatbuffers.Builder:
    b = flatbuffers.Builder(1 << 16)
    # Write every scalar even when it equals the default: -0.0 == 0.0 would otherwise be dropped and
    # read back as +0.0.
    b.ForceDefaults(True)
    return b


def encode_artifact(
    header: Header,
    variants: Sequence[Variant],
    source: Graph | None,
    constants: Sequence[ConstantEntry],
    segments: Sequence[SegmentEntry],
    tables: Interner | None = None,
    plan: KernelPlan | None = None,
    onnx: bytes | None = None,
) -> bytes:
    """The artifact's FlatBuffer. ``tables`` may hold entries already (tests encode attr values alone);
    ``plan`` holds the kernel code the variants' plans launch (plan_encode.plan_kernels); ``onnx`` the stored ONNX
    model (schema 7), or None."""
    b = new_builder()
    t = Interner() if tables is None else tables
    plan = plan or KernelPlan()
    const_index = {c.name: i for i, c in enumerate(constants)}
    code_index = {k.name: i for i, k in enumerate(plan.codes)}
    variant_offs = [_variant(b, v, t, const_index, f"variant {i}", code_index) for i, v in enumerate(variants)]
    source_off = _graph(b, source, t, const_index, "source graph") if source is not None else None
    const_offs = [_constant(b, c) for c in constants]
    seg_offs = [_segment(b, s) for s in segments]
    string_table, types, values, sets = t.build(b)
    producer = string(b, header.producer_version, "producer version")
    model_name = string(b, header.model_name, "model name")
    meta = string(b, header.meta_json, "meta")
    variants_vec = table_vector(b, variant_offs)
    consts_vec = table_vector(b, const_offs)
    segs_vec = table_vector(b, seg_offs)
    stateful = any(v.graph.states for v in variants)
    features = strings(b, (*GRAPH_FEATURES, STATE_FEATURE) if stateful else GRAPH_FEATURES)
    kernel_features = strings(b, plan.kernel_features)
    codes = encode_codes(b, plan)
    floor = string(b, plan.driver_floor, "CUDA driver floor") if plan.driver_floor else None
    onnx_vec = _onnx(b, onnx) if onnx is not None else None
    FbArtifact.Start(b)
    FbArtifact.AddSchemaVersion(b, header.schema_version)
    FbArtifact.AddProducerVersion(b, producer)
    FbArtifact.AddModelName(b, model_name)
    FbArtifact.AddMetaJson(b, meta)
    if source_off is not None:
        FbArtifact.AddSource(b, source_off)
    FbArtifact.AddConstants(b, consts_vec)
    FbArtifact.AddSegments(b, segs_vec)
    FbArtifact.AddStrings(b, string_table)
    FbArtifact.AddTypes(b, types)
    FbArtifact.AddAttrValues(b, values)
    FbArtifact.AddAttrSets(b, sets)
    FbArtifact.AddFeatures(b, features)
    FbArtifact.AddKernelFeatures(b, kernel_features)
    FbArtifact.AddKernels(b, codes)
    if floor is not None:
        FbArtifact.AddCudaDriverFloor(b, floor)
    if onnx_vec is not None:
        FbArtifact.AddOnnx(b, onnx_vec)
    FbArtifact.AddVariants(b, variants_vec)
    b.Finish(FbArtifact.End(b))
    return bytes(b.Output())


def _onnx(b: flatbuffers.Builder, model: bytes) -> int:
    if not isinstance(model, (bytes, bytearray, memoryview)) or len(model) == 0:
        raise ArtifactError("the onnx model must be non-empty bytes (None: the artifact stores none)")
    return b.CreateNumpyVector(np.frombuffer(model, dtype=np.uint8))


# -- the shared tables ---------------------------------------------------------------------------


class Interner:
    """Interns the strings, tensor types, attr values and attr sets of every graph of one artifact."""

    def __init__(self) -> None:
        self._strings: dict[str, int] = {}
        self._utf8: list[bytes] = []
        self._types: dict[TensorType, int] = {}
        self._type_rows: list[tuple[int, list[int]]] = []
        self._values: dict[tuple[int, Any], int] = {}
        self._value_rows: list[_AttrRow] = []
        self._sets: dict[tuple[tuple[int, int], ...], int] = {}

    def string(self, s: str, what: str) -> int:
        if not isinstance(s, str):
            raise ArtifactError(f"{what}: expected a string, got {type(s).__name__}")
        index = self._strings.get(s)
        if index is None:
            try:
                self._utf8.append(s.encode("utf-8"))
            except UnicodeEncodeError as e:
                raise ArtifactError(f"{what}: {s!r} is not valid unicode ({e})") from None
            index = self._strings[s] = len(self._strings)
        return index

    def tensor_type(self, t: TensorType) -> int:
        index = self._types.get(t)
        if index is None:
            dims = [self.string(to_sexpr(d), "shape") for d in t.shape]
            self._type_rows.append((DTYPE_CODES[t.dtype], dims))
            index = self._types[t] = len(self._types)
        return index

    def attr_set(self, attrs: Attrs) -> int:
        key = tuple([(self.string(k, "attr name"), self.attr_value(v, f"attr {k!r}")) for k, v in attrs.items()])
        index = self._sets.get(key)
        if index is None:
            index = self._sets[key] = len(self._sets)
        return index

    def attr_value(self, v: Any, what: str, depth: int = 0) -> int:
        """One attr value's index. Values are keyed by kind, so True, 1 and 1.0 stay apart, and a float
        by its bits, so -0.0 and 0.0 do too (and NaNs meet)."""
        kind = _KINDS.get(type(v))
        if kind is None:
            kind = _kind_of(v, what)
        if kind == ValueKind.Tuple:
            if depth >= MAX_ATTR_DEPTH:
                raise ArtifactError(f"{what}: tuples nest deeper than {MAX_ATTR_DEPTH} levels")
            # Items are interned first, so a tuple only ever refers to earlier entries.
            key: tuple[int, Any] = (kind, tuple([self.attr_value(x, what, depth + 1) for x in v]))
        elif kind == ValueKind.Int:
            key = (kind, _int64(int(v), what))
        elif kind == ValueKind.Bool:
            key = (kind, bool(v))
        elif kind == ValueKind.Float:
            key = (kind, _DOUBLE.pack(float(v)))
        else:
            key = (kind, v)
        index = self._values.get(key)
        if index is None:
            self._value_rows.append(self._row(key, what))
            index = self._values[key] = len(self._values)
        return index

    def _row(self, key: tuple[int, Any], what: str) -> _AttrRow:
        kind, x = key
        if kind in (ValueKind.Int, ValueKind.Bool):
            return _AttrRow(kind, int_value=int(x))
        if kind == ValueKind.Dtype:
            return _AttrRow(kind, int_value=DTYPE_CODES[x])
        if kind == ValueKind.Float:
            return _AttrRow(kind, float_value=_DOUBLE.unpack(x)[0])
        if kind == ValueKind.Str:
            return _AttrRow(kind, string=self.string(x, what))
        if kind == ValueKind.Sym:
            return _AttrRow(kind, string=self.string(to_sexpr(x), what))
        if kind == ValueKind.Tuple:
            return _AttrRow(kind, items=x)
        return _AttrRow(kind)

    def build(self, b: flatbuffers.Builder) -> tuple[int, int, int, int]:
        """The four table vectors: strings, types, attr values, attr sets."""
        table = table_vector(b, [b.CreateString(s) for s in self._utf8])
        type_offs = []
        for code, dims in self._type_rows:
            shape = _uints(b, dims)
            FbTensorType.Start(b)
            FbTensorType.AddDtype(b, code)
            FbTensorType.AddShape(b, shape)
            type_offs.append(FbTensorType.End(b))
        value_offs = []
        for row in self._value_rows:
            items = _uints(b, row.items) if row.kind == ValueKind.Tuple else None
            FbAttrValue.Start(b)
            FbAttrValue.AddKind(b, row.kind)
            FbAttrValue.AddIntValue(b, row.int_value)
            FbAttrValue.AddFloatValue(b, row.float_value)
            FbAttrValue.AddStrValue(b, row.string)
            if items is not None:
                FbAttrValue.AddItems(b, items)
            value_offs.append(FbAttrValue.End(b))
        set_offs = []
        for pairs in self._sets:
            names = _uints(b, [k for k, _ in pairs])
            values = _uints(b, [v for _, v in pairs])
            FbAttrSet.Start(b)
            FbAttrSet.AddNames(b, names)
            FbAttrSet.AddValues(b, values)
            set_offs.append(FbAttrSet.End(b))
        return table, table_vector(b, type_offs), table_vector(b, value_offs), table_vector(b, set_offs)


# -- graphs --------------------------------------------------------------------------------------


@dataclass
class _NodeColumns:
    """A graph's nodes by column, as the Graph table of schema.fbs stores them."""

    ops: list[int] = field(default_factory=list)
    input_counts: list[int] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    output_counts: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    output_types: list[int] = field(default_factory=list)
    attrs: list[int] = field(default_factory=list)
    locs: list[int] = field(default_factory=list)


def _node_columns(g: Graph, t: Interner, what: str) -> _NodeColumns:
    c = _NodeColumns()
    string, tensor_type, attr_set = t.string, t.tensor_type, t.attr_set
    for i, n in enumerate(g.nodes):
        try:
            c.ops.append(string(n.op.value, "op"))
            c.input_counts.append(len(n.inputs))
            c.inputs.extend([v.id for v in n.inputs])
            c.output_counts.append(len(n.outputs))
            for o in n.outputs:
                c.output_ids.append(o.id)
                c.output_types.append(tensor_type(o.type))
            c.attrs.append(attr_set(n.attrs))
            c.locs.append(string(n.loc, "loc"))
        except ArtifactError as e:
            raise ArtifactError(f"{what} node {i} ({n.op.value}): {e}") from None
    return c


def _variant(
    b: flatbuffers.Builder,
    v: Variant,
    t: Interner,
    const_index: Mapping[str, int],
    what: str,
    code_index: Mapping[str, int],
) -> int:
    graph = _graph(b, v.graph, t, const_index, what)
    plan = encode_schedule(b, v.plan, code_index) if v.plan is not None else None
    FbVariant.Start(b)
    FbVariant.AddGraph(b, graph)
    if plan is not None:
        FbVariant.AddPlan(b, plan)
    return FbVariant.End(b)


def _graph(b: flatbuffers.Builder, g: Graph, t: Interner, const_index: Mapping[str, int], what: str) -> int:
    c = _node_columns(g, t, what)
    fields = [
        (FbGraph.AddName, string(b, g.name, f"{what} name")),
        (FbGraph.AddInputNames, table_vector(b, [string(b, s, f"{what} input name") for s in g.input_names])),
        (FbGraph.AddInputIds, longs(b, [v.id for v in g.inputs], what)),
        (FbGraph.AddInputTypes, _uints(b, [t.tensor_type(v.type) for v in g.inputs])),
        (FbGraph.AddNodeOps, _uints(b, c.ops)),
        (FbGraph.AddNodeInputCounts, _uints(b, c.input_counts)),
        (FbGraph.AddNodeInputs, longs(b, c.inputs, what)),
        (FbGraph.AddNodeOutputCounts, _uints(b, c.output_counts)),
        (FbGraph.AddNodeOutputIds, longs(b, c.output_ids, what)),
        (FbGraph.AddNodeOutputTypes, _uints(b, c.output_types)),
        (FbGraph.AddNodeAttrs, _uints(b, c.attrs)),
        (FbGraph.AddNodeLocs, _uints(b, c.locs)),
        (FbGraph.AddOutputs, longs(b, [o.id for o in g.outputs], what)),
        (FbGraph.AddOutputTreeJson, string(b, json.dumps(g.output_tree), f"{what} output tree")),
        (FbGraph.AddSymbols, table_vector(b, [_symbol(b, s, what) for s in g.symbols])),
        (FbGraph.AddGuards, table_vector(b, [_guard(b, gd) for gd in g.guards])),
        (FbGraph.AddConstants, _uints(b, [const_index[k] for k in g.constants])),
    ]
    if g.states:
        fields.append((FbGraph.AddStates, table_vector(b, _states(b, g, const_index, what))))
    FbGraph.Start(b)
    for add, offset in fields:
        add(b, offset)
    return FbGraph.End(b)


def _states(b: flatbuffers.Builder, g: Graph, const_index: Mapping[str, int], what: str) -> list[int]:
    """Each state's initial value (a constant's index) and its writers: the chain aotc/ir/state.py derives, which
    the reader derives again and compares."""
    try:
        chains = state_chains(g)
    except StateProblem as e:
        raise ArtifactError(f"{what}: {e}") from None
    out = []
    for c in chains:
        writers = _uints(b, list(c.writers))
        FbState.Start(b)
        FbState.AddInitial(b, const_index[c.state.init])
        FbState.AddWriters(b, writers)
        out.append(FbState.End(b))
    return out


def _symbol(b: flatbuffers.Builder, s: Symbol, what: str) -> int:
    name_off = string(b, s.name, f"{what} symbol name")
    FbSymbol.Start(b)
    FbSymbol.AddName(b, name_off)
    FbSymbol.AddMin(b, _int64(s.min, f"symbol {s.name} min"))
    FbSymbol.AddMax(b, _int64(s.max, f"symbol {s.name} max"))
    FbSymbol.AddMultipleOf(b, _int64(s.multiple_of, f"symbol {s.name} multiple_of"))
    return FbSymbol.End(b)


def _guard(b: flatbuffers.Builder, g: Guard) -> int:
    offs = [string(b, s, "guard") for s in (to_sexpr(g.lhs), g.rel, to_sexpr(g.rhs), g.loc)]
    FbGuard.Start(b)
    FbGuard.AddLhs(b, offs[0])
    FbGuard.AddRel(b, offs[1])
    FbGuard.AddRhs(b, offs[2])
    FbGuard.AddLoc(b, offs[3])
    return FbGuard.End(b)


def _constant(b: flatbuffers.Builder, c: ConstantEntry) -> int:
    name = string(b, c.name, "constant name")
    shape = b.CreateNumpyVector(np.array(c.shape, dtype=np.int64))
    FbConstant.Start(b)
    FbConstant.AddName(b, name)
    FbConstant.AddDtype(b, DTYPE_CODES[c.dtype])
    FbConstant.AddShape(b, shape)
    FbConstant.AddSegment(b, c.segment)
    return FbConstant.End(b)


def _segment(b: flatbuffers.Builder, s: SegmentEntry) -> int:
    digest = b.CreateByteVector(s.checksum)
    FbSegment.Start(b)
    FbSegment.AddOffset(b, s.offset)
    FbSegment.AddLength(b, s.length)
    FbSegment.AddChecksum(b, digest)
    return FbSegment.End(b)


# -- helpers -------------------------------------------------------------------------------------

# Exact types first (the common case, one dict lookup); subclasses and numpy scalars by _kind_of.
_KINDS: dict[type, int] = {
    type(None): ValueKind.Null,
    bool: ValueKind.Bool,
    int: ValueKind.Int,
    float: ValueKind.Float,
    str: ValueKind.Str,
    tuple: ValueKind.Tuple,
    DType: ValueKind.Dtype,
    SymExpr: ValueKind.Sym,
}


def _kind_of(v: Any, what: str) -> int:
    """bool is tested before int and DType before anything else, so kinds never blur."""
    if isinstance(v, (bool, np.bool_)):
        return ValueKind.Bool
    if isinstance(v, DType):
        return ValueKind.Dtype
    if isinstance(v, SymExpr):
        return ValueKind.Sym
    if isinstance(v, numbers.Integral):
        return ValueKind.Int
    if isinstance(v, (float, np.floating)):
        return ValueKind.Float
    if isinstance(v, str):
        return ValueKind.Str
    if isinstance(v, tuple):
        return ValueKind.Tuple
    raise ArtifactError(f"{what}: a value of type {type(v).__name__} ({v!r}) can't be stored in an artifact")


def _int64(x: int, what: str) -> int:
    if not INT64_MIN <= x <= INT64_MAX:
        raise ArtifactError(f"{what}: {x} does not fit in 64 bits")
    return x


def _uints(b: flatbuffers.Builder, xs: Sequence[int]) -> int:
    return b.CreateNumpyVector(np.array(xs, dtype=np.uint32))
