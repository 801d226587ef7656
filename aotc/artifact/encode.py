"""Graphs, attrs and the artifact header into a FlatBuffer (schema.fbs). Used by the writer only."""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import flatbuffers
import numpy as np

from aotc.artifact.generated import Artifact as FbArtifact
from aotc.artifact.generated import Attr as FbAttr
from aotc.artifact.generated import AttrValue as FbAttrValue
from aotc.artifact.generated import Constant as FbConstant
from aotc.artifact.generated import Graph as FbGraph
from aotc.artifact.generated import Guard as FbGuard
from aotc.artifact.generated import Node as FbNode
from aotc.artifact.generated import Segment as FbSegment
from aotc.artifact.generated import Symbol as FbSymbol
from aotc.artifact.generated import TensorType as FbTensorType
from aotc.artifact.generated import Value as FbValue
from aotc.artifact.generated.ValueKind import ValueKind
from aotc.artifact.layout import DTYPE_CODES, MAX_ATTR_DEPTH
from aotc.errors import ArtifactError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.symbolic import SymExpr, to_sexpr
from aotc.ir.types import Attrs, TensorType, Value

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class ConstantEntry:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    segment: int


@dataclass(frozen=True)
class SegmentEntry:
    offset: int
    length: int
    checksum: bytes


@dataclass(frozen=True)
class Header:
    schema_version: int
    producer_version: str
    model_name: str
    meta_json: str


def new_builder() -> flatbuffers.Builder:
    b = flatbuffers.Builder(1024)
    # Write every scalar even when it equals the default: -0.0 == 0.0 would otherwise be dropped and
    # read back as +0.0, and the FlatBuffer's size no longer depends on the values (see writer.py).
    b.ForceDefaults(True)
    return b


def encode_artifact(
    header: Header,
    variants: Sequence[Graph],
    source: Graph | None,
    constants: Sequence[ConstantEntry],
    segments: Sequence[SegmentEntry],
) -> bytes:
    b = new_builder()
    const_index = {c.name: i for i, c in enumerate(constants)}
    variant_offs = [_graph(b, g, const_index, f"variant {i}") for i, g in enumerate(variants)]
    source_off = _graph(b, source, const_index, "source graph") if source is not None else None
    const_offs = [_constant(b, c) for c in constants]
    seg_offs = [_segment(b, s) for s in segments]
    producer = _string(b, header.producer_version, "producer version")
    model_name = _string(b, header.model_name, "model name")
    meta = _string(b, header.meta_json, "meta")
    variants_vec = _table_vector(b, variant_offs)
    consts_vec = _table_vector(b, const_offs)
    segs_vec = _table_vector(b, seg_offs)
    FbArtifact.Start(b)
    FbArtifact.AddSchemaVersion(b, header.schema_version)
    FbArtifact.AddProducerVersion(b, producer)
    FbArtifact.AddModelName(b, model_name)
    FbArtifact.AddMetaJson(b, meta)
    FbArtifact.AddVariants(b, variants_vec)
    if source_off is not None:
        FbArtifact.AddSource(b, source_off)
    FbArtifact.AddConstants(b, consts_vec)
    FbArtifact.AddSegments(b, segs_vec)
    b.Finish(FbArtifact.End(b))
    return bytes(b.Output())


# -- graphs --------------------------------------------------------------------------------------


def _graph(b: flatbuffers.Builder, g: Graph, const_index: Mapping[str, int], what: str) -> int:
    name = _string(b, g.name, f"{what} name")
    input_names = _string_vector(b, g.input_names, f"{what} input names")
    inputs = _table_vector(b, [_value(b, v) for v in g.inputs])
    nodes = _table_vector(b, [_node(b, n, f"{what} node {i} ({n.op.value})") for i, n in enumerate(g.nodes)])
    outputs = b.CreateNumpyVector(np.array([o.id for o in g.outputs], dtype=np.int64))
    tree = _string(b, json.dumps(g.output_tree), f"{what} output tree")
    symbols = _table_vector(b, [_symbol(b, s.name, s.min, s.max, s.multiple_of, what) for s in g.symbols])
    guards = _table_vector(b, [_guard(b, gd.lhs, gd.rel, gd.rhs, gd.loc) for gd in g.guards])
    consts = b.CreateNumpyVector(np.array([const_index[k] for k in g.constants], dtype=np.uint32))
    FbGraph.Start(b)
    FbGraph.AddName(b, name)
    FbGraph.AddInputNames(b, input_names)
    FbGraph.AddInputs(b, inputs)
    FbGraph.AddNodes(b, nodes)
    FbGraph.AddOutputs(b, outputs)
    FbGraph.AddOutputTreeJson(b, tree)
    FbGraph.AddSymbols(b, symbols)
    FbGraph.AddGuards(b, guards)
    FbGraph.AddConstants(b, consts)
    return FbGraph.End(b)


def _tensor_type(b: flatbuffers.Builder, t: TensorType) -> int:
    shape = _string_vector(b, [to_sexpr(d) for d in t.shape], "shape")
    FbTensorType.Start(b)
    FbTensorType.AddDtype(b, DTYPE_CODES[t.dtype])
    FbTensorType.AddShape(b, shape)
    return FbTensorType.End(b)


def _value(b: flatbuffers.Builder, v: Value) -> int:
    t = _tensor_type(b, v.type)
    FbValue.Start(b)
    FbValue.AddId(b, _int64(v.id, "value id"))
    FbValue.AddType(b, t)
    return FbValue.End(b)


def _node(b: flatbuffers.Builder, n: Any, what: str) -> int:
    op = _string(b, n.op.value, what)
    inputs = b.CreateNumpyVector(np.array([v.id for v in n.inputs], dtype=np.int64))
    outputs = _table_vector(b, [_value(b, v) for v in n.outputs])
    attrs = _table_vector(b, encode_attrs(b, n.attrs, what))
    loc = _string(b, n.loc, f"{what} loc")
    FbNode.Start(b)
    FbNode.AddOp(b, op)
    FbNode.AddInputs(b, inputs)
    FbNode.AddOutputs(b, outputs)
    FbNode.AddAttrs(b, attrs)
    FbNode.AddLoc(b, loc)
    return FbNode.End(b)


def _symbol(b: flatbuffers.Builder, name: str, lo: int, hi: int, mult: int, what: str) -> int:
    name_off = _string(b, name, f"{what} symbol name")
    FbSymbol.Start(b)
    FbSymbol.AddName(b, name_off)
    FbSymbol.AddMin(b, _int64(lo, f"symbol {name} min"))
    FbSymbol.AddMax(b, _int64(hi, f"symbol {name} max"))
    FbSymbol.AddMultipleOf(b, _int64(mult, f"symbol {name} multiple_of"))
    return FbSymbol.End(b)


def _guard(b: flatbuffers.Builder, lhs: int | SymExpr, rel: str, rhs: int | SymExpr, loc: str) -> int:
    offs = [_string(b, s, "guard") for s in (to_sexpr(lhs), rel, to_sexpr(rhs), loc)]
    FbGuard.Start(b)
    FbGuard.AddLhs(b, offs[0])
    FbGuard.AddRel(b, offs[1])
    FbGuard.AddRhs(b, offs[2])
    FbGuard.AddLoc(b, offs[3])
    return FbGuard.End(b)


def _constant(b: flatbuffers.Builder, c: ConstantEntry) -> int:
    name = _string(b, c.name, "constant name")
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


# -- attrs ---------------------------------------------------------------------------------------


def encode_attrs(b: flatbuffers.Builder, attrs: Attrs, what: str) -> list[int]:
    out = []
    for key, value in attrs.items():
        v = encode_attr_value(b, value, f"{what} attr {key!r}")
        k = _string(b, key, f"{what} attr name")
        FbAttr.Start(b)
        FbAttr.AddName(b, k)
        FbAttr.AddValue(b, v)
        out.append(FbAttr.End(b))
    return out


def encode_attr_value(b: flatbuffers.Builder, v: Any, what: str, depth: int = 0) -> int:
    """One attr value; bool is tested before int and DType before anything else so kinds never blur."""
    int_value, float_value, str_off, items_off = 0, 0.0, None, None
    if v is None:
        kind = ValueKind.Null
    elif isinstance(v, (bool, np.bool_)):
        kind, int_value = ValueKind.Bool, int(bool(v))
    elif isinstance(v, DType):
        kind, int_value = ValueKind.Dtype, DTYPE_CODES[v]
    elif isinstance(v, SymExpr):
        kind, str_off = ValueKind.Sym, _string(b, to_sexpr(v), what)
    elif isinstance(v, numbers.Integral):
        kind, int_value = ValueKind.Int, _int64(int(v), what)
    elif isinstance(v, (float, np.floating)):
        kind, float_value = ValueKind.Float, float(v)
    elif isinstance(v, str):
        kind, str_off = ValueKind.Str, _string(b, v, what)
    elif isinstance(v, tuple):
        if depth >= MAX_ATTR_DEPTH:
            raise ArtifactError(f"{what}: tuples nest deeper than {MAX_ATTR_DEPTH} levels")
        kind = ValueKind.Tuple
        items_off = _table_vector(b, [encode_attr_value(b, x, what, depth + 1) for x in v])
    else:
        raise ArtifactError(f"{what}: a value of type {type(v).__name__} ({v!r}) can't be stored in an artifact")
    FbAttrValue.Start(b)
    FbAttrValue.AddKind(b, kind)
    FbAttrValue.AddIntValue(b, int_value)
    FbAttrValue.AddFloatValue(b, float_value)
    if str_off is not None:
        FbAttrValue.AddStrValue(b, str_off)
    if items_off is not None:
        FbAttrValue.AddItems(b, items_off)
    return FbAttrValue.End(b)


# -- helpers -------------------------------------------------------------------------------------


def _int64(x: int, what: str) -> int:
    if not INT64_MIN <= x <= INT64_MAX:
        raise ArtifactError(f"{what}: {x} does not fit in 64 bits")
    return x


def _string(b: flatbuffers.Builder, s: str, what: str) -> int:
    if not isinstance(s, str):
        raise ArtifactError(f"{what}: expected a string, got {type(s).__name__}")
    try:
        return b.CreateString(s.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise ArtifactError(f"{what}: {s!r} is not valid unicode ({e})") from None


def _string_vector(b: flatbuffers.Builder, items: Sequence[str], what: str) -> int:
    return _table_vector(b, [_string(b, s, what) for s in items])


def _table_vector(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()
