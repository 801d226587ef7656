"""A truncated or corrupted artifact raises ArtifactError (and nothing else) wherever the damage is.

Checksums catch accidental damage; "resealed" files (damage with every checksum recomputed) reach the
FlatBuffer decoder and the graph checks behind it, which must fail cleanly too.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from artifact_graphs import F32, const, make_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutation import Subject, classify, fb_region, reseal

from aotc.artifact import read_artifact, write_artifact
from aotc.artifact.decode import Decoder
from aotc.artifact.generated.Artifact import Artifact as FbArtifact
from aotc.artifact.generated.ValueKind import ValueKind
from aotc.artifact.layout import SCHEMA_VERSION, SEGMENT_ALIGN, segment_checksum
from aotc.errors import ArtifactError
from aotc.ir import Guard, Op, Symbol, TensorType, sym


def small_artifact() -> bytes:
    """Three segments (one empty), padding, a guard and a symbol: every part of the layout, in ~12 KiB."""
    n = sym("n")
    w = np.array([1.0, -2.0, 3.0], np.float32)
    mask = np.array([True, False, True])
    empty = np.zeros((0,), np.float32)

    def body(b, x):
        y = b.op(Op.MUL, x, const(b, "w", w))
        return [b.op(Op.WHERE, const(b, "mask", mask), y, x), const(b, "empty", empty), b.op(Op.NEG, y)]

    g = make_graph(
        {"x": TensorType(F32, (n, 3))},
        body,
        symbols=(Symbol("n", 1, 16),),
        guards=(Guard(n, "<=", 8, "m.py:1"),),
        constants={"w": w, "mask": mask, "empty": empty},
        tree={"dict": [["a", 0], ["b", {"tuple": [1, 2]}]]},
    )
    return write_artifact([g], meta={"note": "small"})


DATA = small_artifact()


def poke(data: bytes, edit: Callable[[Any], None]) -> bytes:
    """``data`` with its FlatBuffer changed by ``edit(root)`` and resealed, so only the decoder can catch it.

    The generated ``...AsNumpy()`` accessors over a bytearray are writable views, so ``edit`` changes
    vectors in place; ``set_field`` changes a scalar field of a table.
    """
    start, end = fb_region(data)
    fb = bytearray(data[start:end])
    edit(FbArtifact.GetRootAs(fb, 0))
    return reseal(data[:start] + bytes(fb) + data[end:])


def set_field(table: Any, index: int, fmt: str, value: int) -> None:
    """Overwrite the ``index``-th field (in schema order) of a generated table object, which must be present."""
    tab = table._tab
    offset = tab.Offset(4 + 2 * index)
    assert offset, "the field is not stored"
    struct.pack_into(fmt, tab.Bytes, tab.Pos + offset, value)


def expect_error(data: bytes, match: str = "") -> None:
    with pytest.raises(ArtifactError, match=match):
        read_artifact(data)


SUBJECT = Subject.of("small", DATA)


def read_or_error(data: bytes) -> str:
    """ArtifactError, the original, or a different model the writer writes exactly so (mutation.py)."""
    return classify(SUBJECT, data)


def test_small_artifact_reads() -> None:
    art = read_artifact(DATA)
    assert sorted(art.constants) == ["empty", "mask", "w"]
    assert reseal(DATA) == DATA
    assert len(DATA) > 2 * SEGMENT_ALIGN


def test_every_truncation_is_detected() -> None:
    for n in range(len(DATA)):
        with pytest.raises(ArtifactError):
            read_artifact(DATA[:n])


def test_every_byte_flip_is_detected() -> None:
    buf = bytearray(DATA)
    end = fb_region(DATA)[1]
    for i in range(len(buf)):
        # one low bit everywhere; in the structured head (preamble, FlatBuffer) every bit too
        for mask in (0x01, 0xFE) if i < end else (0x01,):
            buf[i] ^= mask
            with pytest.raises(ArtifactError):
                read_artifact(bytes(buf))
            buf[i] ^= mask


def test_extra_bytes_are_detected() -> None:
    expect_error(DATA + b"\0", "unexpected bytes")
    expect_error(reseal(DATA + bytes(10), file_len=len(DATA) + 10), "after its last segment")


def test_messages_name_the_damage() -> None:
    expect_error(b"", "shorter than")
    expect_error(b"PK\x03\x04" + DATA[4:], "magic")
    expect_error(DATA[:-1], "truncated")
    buf = bytearray(DATA)
    buf[10] ^= 1
    expect_error(bytes(buf), "preamble is corrupted")
    start, end = fb_region(DATA)
    buf = bytearray(DATA)
    buf[(start + end) // 2] ^= 1
    expect_error(bytes(buf), "FlatBuffer is corrupted")
    buf = bytearray(DATA)
    buf[end] = 1  # the padding right after the FlatBuffer
    expect_error(bytes(buf), "padding before segment 0 is not zero")
    buf = bytearray(DATA)
    buf[DATA.index(np.float32(-2.0).tobytes(), end)] ^= 1  # inside the first segment
    expect_error(bytes(buf), "segment 0 is corrupted")
    buf = bytearray(DATA)
    buf[-1] ^= 1  # the file ends with the padding before the empty last segment
    expect_error(bytes(buf), "padding before segment 2 is not zero")


def test_versions_are_checked() -> None:
    expect_error(reseal(DATA, schema=SCHEMA_VERSION + 1), "newer than this aotc supports")
    expect_error(reseal(DATA, schema=SCHEMA_VERSION - 1), f"in the FlatBuffer != {SCHEMA_VERSION - 1} in the preamble")
    expect_error(reseal(DATA, schema=0), "schema version 0 is invalid")
    expect_error(reseal(DATA, fmt=9), "format version 9 is not supported")
    expect_error(reseal(DATA, reserved=1), "reserved")


def test_resealed_bad_contents_are_caught() -> None:
    start, end = fb_region(DATA)
    fb = DATA[start:end]
    # an op name no aotc knows, in a FlatBuffer whose checksum is right
    expect_error(reseal(DATA.replace(b"\x03\x00\x00\x00neg", b"\x03\x00\x00\x00nog")), "unknown op 'nog'")
    # a bool constant holding 2, with its segment checksum updated in the FlatBuffer
    art = read_artifact(DATA)
    mask_bytes = art.constants["mask"].tobytes()
    pos = DATA.index(mask_bytes, end)
    bad = bytearray(DATA)
    bad[pos] = 2
    old, new = segment_checksum(mask_bytes), segment_checksum(bytes(bad[pos : pos + len(mask_bytes)]))
    assert fb.count(old) == 1
    expect_error(reseal(bytes(bad).replace(old, new)), "bool but holds bytes other than 0 and 1")


def test_small_artifact_tables() -> None:
    """The facts the index tests below rely on."""
    start, end = fb_region(DATA)
    t = Decoder(DATA[start:end]).tables
    assert t.attr_values[2:4] == [3, (3,)] and t.strings[1] == "3"
    assert list(t.attr_sets[0]) == ["dtype", "name", "shape"]


def variant(root: Any) -> Any:
    return root.Variants(0).Graph()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda r: variant(r).NodeOpsAsNumpy().__setitem__(1, 10**6), "node 1: op index 1000000 is out of range"),
        (lambda r: variant(r).NodeLocsAsNumpy().__setitem__(0, 99), "node 0: loc index 99"),
        (lambda r: variant(r).NodeAttrsAsNumpy().__setitem__(2, 7), "node 2: attr set index 7"),
        (lambda r: variant(r).NodeOutputTypesAsNumpy().__setitem__(3, 4), "node output 3: type index 4"),
        (lambda r: variant(r).InputTypesAsNumpy().__setitem__(0, 2**32 - 1), "input 0: type index 4294967295"),
        (lambda r: variant(r).NodeOpsAsNumpy().__setitem__(1, 1), "node 1 has unknown op '3'"),
        (lambda r: variant(r).NodeInputsAsNumpy().__setitem__(0, 77), "uses value %77, which is not defined before"),
        (lambda r: variant(r).NodeInputsAsNumpy().__setitem__(0, 2), "uses value %2, which is not defined before"),
        (
            lambda r: variant(r).NodeOutputIdsAsNumpy().__setitem__(1, 0),
            r"node 1 \(mul\) defines value %0 a second time",
        ),
        (lambda r: variant(r).OutputsAsNumpy().__setitem__(0, 99), "output uses value %99, which is not defined"),
        (lambda r: variant(r).NodeInputCountsAsNumpy().__setitem__(1, 3), "input counts add up to 7, not 6"),
        (
            lambda r: variant(r).NodeOutputCountsAsNumpy().__setitem__(0, 0),
            "output counts add up to 5, but there are 6 output ids",
        ),
        (lambda r: variant(r).ConstantsAsNumpy().__setitem__(0, 9), "holds constant 9"),
        (lambda r: r.Types(0).ShapeAsNumpy().__setitem__(0, 500), "type 0 shape: string index 500"),
        (lambda r: r.Types(0).ShapeAsNumpy().__setitem__(0, 6), "type 0 shape: "),  # the empty string
        (lambda r: set_field(r.Types(0), 0, "<B", 77), "type 0 has unknown dtype code 77"),
        (lambda r: r.AttrValues(3).ItemsAsNumpy().__setitem__(0, 3), "attr value 3: a tuple may only hold earlier"),
        (lambda r: set_field(r.AttrValues(2), 0, "<B", ValueKind.Bool), "attr value 2: bool stored as 3"),
        (lambda r: set_field(r.AttrValues(2), 0, "<B", 99), "attr value 2 has unknown value kind 99"),
        (lambda r: set_field(r.AttrValues(1), 3, "<I", 1000), "attr value 1: string index 1000"),
        (
            lambda r: (set_field(r.AttrValues(2), 0, "<B", ValueKind.Sym), set_field(r.AttrValues(2), 3, "<I", 1)),
            r"attr value 2: kind Sym also sets \['int_value'\]",
        ),
        (
            lambda r: (
                set_field(r.AttrValues(2), 0, "<B", ValueKind.Sym),
                set_field(r.AttrValues(2), 1, "<q", 0),
                set_field(r.AttrValues(2), 3, "<I", 1),
            ),
            "attr value 2: symbolic value 3 has no symbols",
        ),
        (lambda r: r.AttrSets(0).NamesAsNumpy().__setitem__(1, 2), "attr set 0 names an attr twice"),
        (lambda r: r.AttrSets(0).ValuesAsNumpy().__setitem__(2, 9), "attr set 0 value 2: attr value index 9"),
        (lambda r: set_field(r.Segments(1), 0, "<Q", 0), "segment 1 starts at 0 from the data start, expected 4096"),
    ],
)
def test_resealed_bad_indices_are_caught(edit: Callable[[Any], None], match: str) -> None:
    """Every index, count and kind in the tables and node columns is checked, with a message naming it."""
    expect_error(poke(DATA, edit), match)


def test_every_resealed_flatbuffer_flip_fails_cleanly() -> None:
    """Past the checksums, the decoder sees each flipped byte: never a crash, only ArtifactError or a valid read."""
    start, end = fb_region(DATA)
    buf = bytearray(DATA)
    for i in range(start, end):
        mask = 0xFF if i % 2 else 0x01
        buf[i] ^= mask
        read_or_error(reseal(buf))
        buf[i] ^= mask


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_resealed_damage_fails_cleanly(data: st.DataObject) -> None:
    start, end = fb_region(DATA)
    buf = bytearray(DATA)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(start, end - 1))
        buf[i] = data.draw(st.integers(0, 255))
    read_or_error(reseal(buf))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_random_bytes_fail_cleanly(junk: bytes) -> None:
    with pytest.raises(ArtifactError):
        read_artifact(junk)
    with pytest.raises(ArtifactError):
        read_artifact(b"AOTC" + junk)


def test_paths_that_are_not_artifacts(tmp_path) -> None:
    with pytest.raises(ArtifactError, match="cannot read artifact"):
        read_artifact(tmp_path / "missing.aotc")
    with pytest.raises(ArtifactError, match="not a regular file"):
        read_artifact(tmp_path)
    empty = tmp_path / "empty.aotc"
    empty.write_bytes(b"")
    with pytest.raises(ArtifactError, match="shorter than"):
        read_artifact(empty)
    trunc = tmp_path / "trunc.aotc"
    trunc.write_bytes(DATA[: len(DATA) // 2])
    with pytest.raises(ArtifactError, match=r"invalid artifact '.*trunc\.aotc': file is truncated"):
        read_artifact(os.fspath(trunc))
    with pytest.raises(ArtifactError, match="path or bytes"):
        read_artifact(123)  # type: ignore[arg-type]
