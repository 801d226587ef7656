"""A truncated or corrupted artifact raises ArtifactError (and nothing else) wherever the damage is.

Checksums catch accidental damage; "resealed" files (damage with every checksum recomputed) reach the
FlatBuffer decoder and the graph checks behind it, which must fail cleanly too.
"""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np
import pytest
from artifact_graphs import F32, const, make_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotc.artifact import read_artifact, write_artifact
from aotc.artifact.layout import PREAMBLE_CHECKSUM_SIZE, PREAMBLE_SIZE, SEGMENT_ALIGN, checksum
from aotc.errors import ArtifactError
from aotc.ir import Guard, Op, Symbol, TensorType, sym

HEAD = struct.Struct("<4sIIIQQQ32s")


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


def fb_region(data: bytes) -> tuple[int, int]:
    fields = HEAD.unpack_from(data)
    return fields[4], fields[4] + fields[5]


def reseal(data: bytes | bytearray, **fields: int) -> bytes:
    """Recompute the FlatBuffer and preamble checksums (after editing preamble ``fields`` if given)."""
    magic, fmt, schema, reserved, fb_off, fb_len, file_len, _ = HEAD.unpack_from(data)
    vals = {"fmt": fmt, "schema": schema, "reserved": reserved, "file_len": file_len} | fields
    fb = bytes(data[fb_off : fb_off + fb_len])
    head = HEAD.pack(
        magic, vals["fmt"], vals["schema"], vals["reserved"], fb_off, fb_len, vals["file_len"], checksum(fb)
    )
    seal = hashlib.blake2b(head, digest_size=PREAMBLE_CHECKSUM_SIZE).digest()
    return head + seal + bytes(data[PREAMBLE_SIZE:])


def expect_error(data: bytes, match: str = "") -> None:
    with pytest.raises(ArtifactError, match=match):
        read_artifact(data)


def read_or_error(data: bytes) -> None:
    """The only two outcomes allowed for damaged input: a verified artifact or ArtifactError."""
    try:
        read_artifact(data)
    except ArtifactError:
        pass


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
    expect_error(reseal(DATA, schema=2), "newer than this aotc supports")
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
    old, new = checksum(mask_bytes), checksum(bytes(bad[pos : pos + len(mask_bytes)]))
    assert fb.count(old) == 1
    expect_error(reseal(bytes(bad).replace(old, new)), "bool but holds bytes other than 0 and 1")


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
