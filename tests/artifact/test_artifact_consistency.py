"""Internally inconsistent artifacts are refused by the reader (and never written by the writer): attrs an
op does not declare, duplicate table entries, value kinds with stray fields, constants no node uses,
unsatisfiable symbols, shared tables out of the writer's order or with unused entries."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from artifact_graphs import F32, const, make_graph, mlp_source
from mutation import fb_region, reseal
from test_artifact_corruption import DATA, poke, set_field, variant

import aotc
from aotc.artifact import read_artifact, write_artifact
from aotc.artifact.canonical import InterningOrder
from aotc.artifact.decode import Decoder
from aotc.artifact.encode import ConstantEntry, Header, Interner, SegmentEntry, encode_artifact
from aotc.artifact.generated.ValueKind import ValueKind
from aotc.artifact.layout import (
    FORMAT_VERSION,
    PREAMBLE_SIZE,
    SCHEMA_VERSION,
    Preamble,
    align_up,
    checksum,
    segment_checksum,
)
from aotc.artifact.tables import Tables
from aotc.errors import ArtifactError
from aotc.ir import Graph, Op, Symbol, TensorType, sym
from aotc.ir.dtypes import dtype_of
from aotc.ir.types import Attrs
from aotc.ir.variant import Variant
from aotc.lowering.decompose import decompose


def assemble(variants: Sequence[Graph], constants: Mapping[str, np.ndarray], tables: Interner | None = None) -> bytes:
    """A file laid out as the writer lays it out, but without the writer's checks on the graphs."""
    datas = [np.ascontiguousarray(a).tobytes() for a in constants.values()]
    offsets, pos = [], 0
    for d in datas:
        pos = align_up(pos)
        offsets.append(pos)
        pos += len(d)
    entries = [ConstantEntry(n, dtype_of(a.dtype), a.shape, i) for i, (n, a) in enumerate(constants.items())]
    segments = [SegmentEntry(o, len(d), segment_checksum(d)) for o, d in zip(offsets, datas)]
    header = Header(SCHEMA_VERSION, aotc.__version__, variants[0].name, "{}")
    fb = encode_artifact(header, [Variant(g) for g in variants], None, entries, segments, tables)
    start = align_up(PREAMBLE_SIZE + len(fb))
    body = bytearray(fb)
    for o, d in zip(offsets, datas):
        body += bytes(start + o - PREAMBLE_SIZE - len(body)) + d
    end = PREAMBLE_SIZE + len(body)
    return Preamble(FORMAT_VERSION, SCHEMA_VERSION, PREAMBLE_SIZE, len(fb), end, checksum(fb)).pack() + bytes(body)


def neg_graph(**kw: Any) -> Graph:
    w = np.array([1.0, 2.0], np.float32)
    return make_graph(
        {"x": TensorType(F32, (sym("n"), 2))},
        lambda b, x: [b.op(Op.MUL, b.op(Op.NEG, x), const(b, "w", w))],
        symbols=(Symbol("n", 1, 64),),
        constants={"w": w, **kw.pop("extra", {})},
        **kw,
    )


def with_node_attrs(g: Graph, index: int, **attrs: Any) -> Graph:
    nodes = list(g.nodes)
    nodes[index] = nodes[index].replace(attrs=Attrs(dict(nodes[index].attrs), **attrs))
    return g.replace(nodes=tuple(nodes))


def refused(data: bytes, match: str) -> None:
    with pytest.raises(ArtifactError, match=match):
        read_artifact(data)


def test_assemble_matches_the_writer() -> None:
    g = neg_graph()
    assert assemble([g], g.constants)[PREAMBLE_SIZE:] == write_artifact([g])[PREAMBLE_SIZE:]


def test_attrs_an_op_does_not_declare() -> None:
    g = with_node_attrs(neg_graph(), 0, alpha=0.5)  # neg takes no attrs: it would ignore alpha
    refused(assemble([g], g.constants), r"node 0 \(neg\) has attrs \['alpha'\] that neg does not declare \[\]")
    with pytest.raises(ArtifactError, match="does not declare"):
        write_artifact([g])
    src = mlp_source()
    g = with_node_attrs(src, 0, approximate_gelu=True)  # a linear node: declared attrs are none
    with pytest.raises(ArtifactError, match=r"source graph: node 0 .* does not declare"):
        write_artifact([decompose(mlp_source())], source=g)


def test_constants_no_node_uses() -> None:
    g = neg_graph(extra={"spare": np.zeros(3, np.float32)})
    refused(assemble([g], g.constants), r"variant 0: constants \['spare'\] are held but no node uses them")
    with pytest.raises(ArtifactError, match="no node uses them"):
        write_artifact([g])
    g = neg_graph()
    refused(assemble([g], {**g.constants, "orphan": np.ones(2, np.float32)}), "constant 'orphan' belongs to no graph")


@pytest.mark.parametrize(
    ("symbol", "match"),
    [
        (Symbol("n", 3, 7, multiple_of=8), r"no value in \[3, 7\] is a multiple of 8"),
        (Symbol("n", 9, 15, multiple_of=8), r"no value in \[9, 15\] is a multiple of 8"),
    ],
)
def test_unsatisfiable_symbols(symbol: Symbol, match: str) -> None:
    g = neg_graph().replace(symbols=(symbol,))
    refused(assemble([g], g.constants), match)
    with pytest.raises(ArtifactError, match=match):
        write_artifact([g])
    ok = neg_graph().replace(symbols=(Symbol("n", 9, 16, multiple_of=8),))
    assert read_artifact(write_artifact([ok])).variants[0].graph.symbols == ok.symbols


def test_resealed_symbol_ranges() -> None:
    sym0 = lambda r: variant(r).Symbols(0)  # noqa: E731
    refused(poke(DATA, lambda r: set_field(sym0(r), 3, "<q", 32)), r"no value in \[1, 16\] is a multiple of 32")
    refused(poke(DATA, lambda r: set_field(sym0(r), 1, "<q", 17)), r"bad range \[17, 16\]")
    refused(poke(DATA, lambda r: set_field(sym0(r), 3, "<q", 0)), "bad range")


def test_duplicate_strings() -> None:
    """Two string-table entries spelling the same name (a renamed op or constant would alias another)."""
    start, end = fb_region(DATA)
    fb = DATA[start:end]
    assert fb.count(b"\x03\x00\x00\x00neg\x00") == 1 and b"\x03\x00\x00\x00mul\x00" in fb
    refused(
        reseal(DATA.replace(b"\x03\x00\x00\x00neg\x00", b"\x03\x00\x00\x00mul\x00")), "string table holds 'mul' twice"
    )


def test_duplicate_table_rows() -> None:
    """Types, attr values and attr sets are interned too: a row equal to another is refused."""
    start, end = fb_region(DATA)
    t = Decoder(DATA[start:end]).tables
    shapes = [ty.shape for ty in t.types]
    i, j = next((i, j) for i in range(len(shapes)) for j in range(i + 1, len(shapes)) if shapes[i] == shapes[j])
    code = {"float32": 0, "bool": 5, "int64": 4, "int32": 3}[t.types[i].dtype.value]
    refused(poke(DATA, lambda r: set_field(r.Types(j), 0, "<B", code)), f"type table holds .* twice .*{i} and {j}")
    ints = [k for k, v in enumerate(t.attr_values) if type(v) is int]
    a, b = ints[:2]
    refused(
        poke(DATA, lambda r: set_field(r.AttrValues(b), 1, "<q", t.attr_values[a])),
        f"attr values {a} and {b} hold the same value",
    )
    k, m = next((k, m) for k in range(len(t.set_refs)) for m in range(k + 1, len(t.set_refs))
                if t.set_refs[k][0] == t.set_refs[m][0])  # fmt: skip

    def same_values(r: Any) -> None:
        r.AttrSets(m).ValuesAsNumpy()[:] = t.set_refs[k][1]

    refused(poke(DATA, same_values), f"attr set table holds attrs .* twice \\(entries {k} and {m}\\)")


@pytest.mark.parametrize(
    ("index", "field", "fmt", "value", "match"),
    [
        (2, 2, "<d", 1.5, r"kind Int also sets \['float_value'\]"),
        (2, 2, "<d", -0.0, r"kind Int also sets \['float_value'\]"),  # by its bits
        (2, 3, "<I", 4, r"kind Int also sets \['str_value'\]"),
        (3, 1, "<q", 1, r"kind Tuple also sets \['int_value'\]"),
    ],
)
def test_value_kinds_with_stray_fields(index: int, field: int, fmt: str, value: Any, match: str) -> None:
    """An attr value's kind changed while another kind's field stays set, or a field a kind never sets."""
    start, end = fb_region(DATA)
    t = Decoder(DATA[start:end]).tables
    assert t.attr_values[2:4] == [3, (3,)]
    refused(poke(DATA, lambda r: set_field(r.AttrValues(index), field, fmt, value)), f"attr value {index}: {match}")
    # the same for a float changed to an int: its float bits stay behind
    floats = [k for k, v in enumerate(t.attr_values) if type(v) is float and v != 0.0]
    if floats:
        k = floats[0]
        refused(poke(DATA, lambda r: set_field(r.AttrValues(k), 0, "<B", ValueKind.Int)), "kind Int also sets")


def test_tables_in_the_writers_order() -> None:
    """A reference moved to another valid entry leaves the tables out of the order the writer interns."""

    def body(b: Any, x: Any) -> list[Any]:
        b.loc = "a.py:1"
        y = b.op(Op.NEG, x)
        b.loc = "a.py:2"
        y = b.op(Op.NEG, y)
        b.loc = "a.py:1"
        return [b.op(Op.NEG, y)]

    g = make_graph({"x": TensorType(F32, (2,))}, body)
    data = write_artifact([g])
    start, end = fb_region(data)
    strings = Decoder(data[start:end]).tables.strings
    loc1, loc2 = strings.index("a.py:1"), strings.index("a.py:2")
    assert loc1 < loc2

    def move(r: Any) -> None:
        r.Variants(0).Graph().NodeLocsAsNumpy()[0] = loc2

    refused(poke(data, move), f"strings table is not in the order the writer makes: entry {loc2} is first used where")
    assert [n.loc for n in read_artifact(data).variants[0].graph.nodes] == ["a.py:1", "a.py:2", "a.py:1"]


def test_interning_order_rules() -> None:
    """InterningOrder alone: strings first used in index order, types after their dims, and all used."""
    tables = Tables(["neg", "3", "", "spare"], [], [], [Attrs()], type_dims=[], value_refs=[], set_refs=[([], [])])
    tables.types.append(TensorType(F32, (3,)))
    tables.type_dims.append([1])  # the type's dim "3" is interned right after the op, before the loc
    order = InterningOrder(tables)
    order.graph([0], [1], [0], [0], [2], [])
    with pytest.raises(ArtifactError, match="strings entry 3 is not used by any graph"):
        order.finish()
    order = InterningOrder(tables)
    with pytest.raises(ArtifactError, match="strings table is not in the order the writer makes: entry 3 is first"):
        order.graph([0], [1], [0], [0], [3], [])


def test_model_name_is_the_first_variant_name() -> None:
    g = neg_graph()
    start, end = fb_region(write_artifact([g]))
    data = write_artifact([g])
    # "model" -> "mödel" is two bytes longer; "model" -> "modem" keeps the layout
    pos = data.index(b"\x05\x00\x00\x00model\x00", start, end)
    bad = data[:pos] + b"\x05\x00\x00\x00modem\x00" + data[pos + 10 :]
    assert struct.unpack_from("<I", bad, pos)[0] == 5
    refused(reseal(bad), "model name 'modem' is not variant 0's name 'model'|variant 0 .*")


def test_producer_version_is_a_version() -> None:
    """A length that swallows the terminator reads "0.1.0\\x00": a version the writer never writes."""
    data = write_artifact([neg_graph()])
    start, end = fb_region(data)
    at = data.index(b"\x05\x00\x00\x00" + aotc.__version__.encode() + b"\x00", start, end)
    refused(reseal(data[:at] + b"\x06" + data[at + 1 :]), r"producer version '[^']*\\x00' is not a version number")
