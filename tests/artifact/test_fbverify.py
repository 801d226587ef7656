"""The structural FlatBuffer verifier: the schema it reads from schema.fbs matches the generated code,
and each kind of structural damage is refused with a message naming where it is."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import flatbuffers
import pytest
from mutation import fb_region, reseal
from test_artifact_corruption import DATA

from aotc.artifact import fbverify, read_artifact
from aotc.artifact.fbschema import artifact_schema, parse_schema
from aotc.artifact.fbverify import verify_flatbuffer
from aotc.errors import ArtifactError

GENERATED = Path(__file__).resolve().parents[2] / "aotc" / "artifact" / "generated"
START, END = fb_region(DATA)
FB = DATA[START:END]


def slots() -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    verify_flatbuffer(FB, on_slot=lambda pos, size, what: out.setdefault(what, (pos, size)))
    return out


SLOTS = slots()


def get(what: str) -> int:
    pos, size = SLOTS[what]
    return int.from_bytes(FB[pos : pos + size], "little")


def with_value(what: str, value: int) -> bytes:
    pos, size = SLOTS[what]
    buf = bytearray(FB)
    buf[pos : pos + size] = value.to_bytes(size, "little")
    return bytes(buf)


def expect(fb: bytes, match: str) -> None:
    with pytest.raises(ArtifactError, match=match):
        verify_flatbuffer(fb)


def test_the_schema_matches_the_generated_code() -> None:
    """Each table has the fields, in the slots, that flatc generated: schema.fbs and generated/ agree."""
    schema = artifact_schema()
    assert schema.root == "Artifact"
    for table, fields in schema.tables.items():
        code = (GENERATED / f"{table}.py").read_text()
        assert f"builder.StartObject({len(fields)})" in code, table
        slots_in_code = {
            m[0].lower(): int(m[1])
            for m in re.findall(rf"def {table}Add(\w+)\(builder, \w+\): builder\.\w+\((\d+)", code)
        }
        assert slots_in_code == {f.name.replace("_", ""): i for i, f in enumerate(fields)}, table
    graph = {f.name: f for f in schema.tables["Graph"]}
    assert graph["node_ops"].kind == "vector" and graph["node_ops"].scalar == "uint" and graph["name"].required
    assert graph["symbols"].elem == "table" and graph["symbols"].table == "Symbol"
    artifact = {f.name: f for f in schema.tables["Artifact"]}
    assert not artifact["source"].required and artifact["source"].table == "Graph"
    assert {f.name: f for f in schema.tables["AttrValue"]}["kind"].scalar == "ubyte"  # the enum's type


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("struct S { a: int; } table T { s: S; } root_type T;", "struct"),
        ("table T { a: int; } union U { T } root_type T;", "union"),
        ("table T { a: Missing; } root_type T;", "unknown type 'Missing'"),
        ("table T { a: int (id: 3); } root_type T;", r"attributes \['id'\]"),
        ("table T { a: int (required); } root_type T;", "scalar cannot be required"),
        ("table T { a: int; }", "no root_type"),
        ("enum E : string { A } table T { e: E; } root_type T;", "underlying type"),
    ],
)
def test_schemas_the_verifier_cannot_check_are_refused(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_schema(text)


def test_the_small_artifact_is_sound() -> None:
    assert verify_flatbuffer(FB) > 50
    whats = list(SLOTS)
    assert "root offset" in whats and "Artifact.variants[0].graph.node_ops[1]" in whats


@pytest.mark.parametrize(
    ("what", "value", "match"),
    [
        ("root offset", 10**6, "Artifact: table at 1000000 is misaligned or outside"),
        ("root offset", 2, "misaligned"),
        ("Artifact vtable offset", 2**31 - 1, "vtable at .* is misaligned or outside"),
        ("Artifact vtable size", 3, "vtable size 3"),
        ("Artifact table size", 60000, "table size 60000 .* runs past"),
        (
            "Artifact.variants[0].graph.name vtable entry",
            0,
            r"Artifact.variants\[0\].graph.name: required field is missing",
        ),
        ("Artifact.variants[0].graph.name vtable entry", 60000, "outside the .*-byte table"),
        ("Artifact.variants[0].graph.node_ops length", 10**6, "run past the buffer"),
        ("Artifact.variants[0].graph.guards length", 0, "belong to no object"),
        ("Artifact.strings[0] offset", 2, "misaligned|not 4-byte aligned|overlap|referenced"),
    ],
)
def test_structural_damage_is_refused(what: str, value: int, match: str) -> None:
    expect(with_value(what, value), match)


def test_a_scalar_read_as_its_default_is_refused() -> None:
    """A zeroed slot would read back as the default (0.0, multiple_of 1): the writer stores every scalar."""
    expect(with_value("Artifact.variants[0].graph.symbols[0].multiple_of vtable entry", 0), "scalar field is absent")
    expect(with_value("Artifact.attr_values[0].float_value vtable entry", 0), "scalar field is absent")


def test_overlapping_and_misaligned_fields_are_refused() -> None:
    sym = "Artifact.variants[0].graph.symbols[0]"
    # min's slot moved onto max's: two fields share bytes
    expect(
        with_value(f"{sym}.min vtable entry", get(f"{sym}.max vtable entry")),
        "fields (min and max|max and min) overlap",
    )
    expect(with_value(f"{sym}.min vtable entry", get(f"{sym}.min vtable entry") + 4), "not 8-byte aligned")


def test_strings_need_their_terminator() -> None:
    pos, _ = SLOTS["Artifact.model_name length"]
    end = pos + 4 + get("Artifact.model_name length")
    buf = bytearray(FB)
    buf[end] = ord("x")
    expect(bytes(buf), "Artifact.model_name: string is not NUL-terminated")


def test_each_string_of_a_string_vector_is_checked_and_named() -> None:
    """Strings in a vector are checked in one loop (fbverify's ``strings``): each fault still names its element."""
    pos, _ = SLOTS["Artifact.strings[2] length"]
    buf = bytearray(FB)
    buf[pos + 4 + get("Artifact.strings[2] length")] = ord("x")
    expect(bytes(buf), r"Artifact.strings\[2\]: string is not NUL-terminated")
    expect(with_value("Artifact.strings[2] length", 10**6), r"Artifact.strings\[2\]: 1000000 elements .* run past")
    at, _ = SLOTS["Artifact.strings[2] offset"]
    twice = SLOTS["Artifact.strings[1] offset"][0] + get("Artifact.strings[1] offset")
    expect(with_value("Artifact.strings[2] offset", twice - at), r"Artifact.strings\[2\]: .*referenced a second time")
    expect(with_value("Artifact.strings[2] offset", get("Artifact.strings[2] offset") + 2), "not 4-byte aligned")


def test_an_object_reached_twice_is_refused() -> None:
    """model_name pointed at the producer version's string: both read fine, but the writer never shares."""
    at, _ = SLOTS["Artifact.model_name offset"]
    target = SLOTS["Artifact.producer_version offset"][0] + get("Artifact.producer_version offset")
    expect(with_value("Artifact.model_name offset", target - at), "referenced a second time")


def test_padding_must_be_zero() -> None:
    """The bytes between two objects (alignment padding) are zero in every file the writer makes."""
    spans: list[tuple[int, int]] = []
    verify_flatbuffer(FB, on_slot=lambda pos, size, what: spans.append((pos, pos + size)))
    covered = bytearray(len(FB))
    for a, b in spans:
        covered[a:b] = b"\1" * (b - a)
    gaps = [i for i in range(len(FB)) if not covered[i] and FB[i] == 0]
    # some gap byte must be padding (not a string's contents): flipping it must be refused or harmless
    refused = 0
    for i in gaps:
        buf = bytearray(FB)
        buf[i] = 0x55
        try:
            verify_flatbuffer(bytes(buf))
        except ArtifactError:
            refused += 1
    assert refused > 0


def nested(depth: int) -> bytes:
    b = flatbuffers.Builder(0)
    child = None
    for _ in range(depth):
        b.StartObject(1)
        if child is not None:
            b.PrependUOffsetTRelativeSlot(0, child, 0)
        child = b.EndObject()
    b.Finish(child)
    return bytes(b.Output())


def test_depth_and_object_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = parse_schema("table N { child: N; } root_type N;")
    assert verify_flatbuffer(nested(fbverify.MAX_DEPTH + 1), schema) == fbverify.MAX_DEPTH + 1
    with pytest.raises(ArtifactError, match="nest deeper than 64"):
        verify_flatbuffer(nested(fbverify.MAX_DEPTH + 2), schema)
    monkeypatch.setattr(fbverify, "MAX_OBJECTS", 10)
    expect(FB, "more than 10 objects")


def test_fields_beyond_the_schema_are_refused() -> None:
    """A table written with a field this schema does not have (a newer schema, or damage)."""
    b = flatbuffers.Builder(0)
    b.StartObject(3)
    b.PrependInt32Slot(0, 1, 0)
    b.PrependInt32Slot(1, 0, 1)  # stored even where it equals its default, as the artifact writer does
    b.PrependInt32Slot(2, 7, 0)
    b.Finish(b.EndObject())
    buf = bytes(b.Output())
    assert verify_flatbuffer(buf, parse_schema("table T { a: int; b: int; c: int; } root_type T;")) == 1
    with pytest.raises(ArtifactError, match="field 2 is not in the schema of table T"):
        verify_flatbuffer(buf, parse_schema("table T { a: int; b: int; } root_type T;"))


def test_the_reader_verifies_the_structure_first() -> None:
    """Through read_artifact, a resealed structural fault is an ArtifactError from the verifier."""
    bad = with_value("Artifact.variants[0].graph.guards length", 0)
    with pytest.raises(
        ArtifactError, match=r"FlatBuffer is malformed: Artifact: the .* bytes at .* belong to no object"
    ):
        read_artifact(reseal(DATA[:START] + bad + DATA[END:]))
    assert struct.unpack_from("<I", FB, 0)[0] == get("root offset")


def test_padding_inside_a_table_must_be_zero() -> None:
    """The builder zeroes the alignment padding between a table's fields; a non-zero byte there is damage no
    field shows (random resealed damage found it), so the verifier refuses it."""
    from aotc.artifact.fbschema import FieldDef

    # after the 4-byte vtable offset: a uint at 4, a ubyte at 8, a ulong at 16 -> padding at 9..16
    fields = [(4, FieldDef("a", "scalar", "uint")), (8, FieldDef("b", "scalar", "ubyte"))]
    fields.append((16, FieldDef("c", "scalar", "ulong")))
    assert fbverify._gaps(24, fields) == [(9, 16)]
    assert fbverify._gaps(28, fields) == [(9, 16), (24, 28)]
    start, end = fb_region(DATA)
    for pos in range(start, end):
        if DATA[pos]:
            continue
        buf = bytearray(DATA)
        buf[pos] = 1
        try:
            read_artifact(reseal(buf))
        except ArtifactError as e:
            if "padding at table offset" in str(e):
                return
    raise AssertionError("no table of the small artifact has padding between its fields")
