"""Resealed mutations of artifacts and the classification of what the reader makes of them.

A mutation changes one integer of the FlatBuffer (an index, a count, an offset, a length, a vtable
entry, a scalar field), one character of one of its strings (a kernel's source, an expression, a name, a
digest) or one weight, then recomputes every checksum, so only the reader's consistency checks stand
between the file and the caller. Each outcome is classified:

- ``refused``: ArtifactError;
- ``identical``: the reader returns exactly the original artifact;
- ``different:<what>``: a different model, which must be one the writer itself produces: written back
  out, it reads back to the same model, and its FlatBuffer is byte for byte the mutated one. So the
  mutated file is indistinguishable from a real file of that model: no check could have refused it.

Anything else (another exception, a model the writer would not write) fails the test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import struct
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

from aotc.artifact import Artifact, read_artifact, write_artifact, writer
from aotc.artifact.decode import Decoder
from aotc.artifact.fbverify import verify_flatbuffer
from aotc.artifact.layout import PREAMBLE_CHECKSUM_SIZE, PREAMBLE_SIZE, checksum, segment_checksum
from aotc.errors import ArtifactError
from aotc.ir.graph import Graph

HEAD = struct.Struct("<4sIIIQQQ32s")
_FORMATS = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}
_OPAQUE = re.compile(r"\.data\[(?:[4-9]|\d\d+)\]$")


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


@dataclass(frozen=True)
class Slot:
    pos: int  # in the FlatBuffer
    size: int
    what: str


@dataclass
class Subject:
    """One artifact to mutate: its bytes, what the reader makes of it, and every integer slot in it."""

    name: str
    data: bytes
    art: Artifact
    slots: list[Slot]
    segments: list[tuple[int, int, int]]  # (file offset, length, where its checksum is in the FlatBuffer)
    texts: list[Slot] = dataclasses.field(default_factory=list)  # each string's characters

    @classmethod
    def of(cls, name: str, data: bytes) -> Subject:
        start, end = fb_region(data)
        fb = data[start:end]
        found: list[Slot] = []
        verify_flatbuffer(fb, on_slot=lambda pos, size, what: found.append(Slot(pos, size, what)))
        texts = [s for s in found if s.what.endswith(" text")]
        slots = [s for s in found if not s.what.endswith(" text")]
        # Cubin bytes are opaque to the reader, like weights (a changed byte is a different binary the writer
        # writes so): a few of each stand for them, so the sweep's samples go to the structure.
        slots = [s for s in slots if not _OPAQUE.search(s.what)]
        data_start = -(-end // 4096) * 4096
        sums = {s.what: s.pos for s in slots}
        segs = [
            (data_start + s.offset, s.length, sums[f"Artifact.segments[{i}].checksum[0]"])
            for i, s in enumerate(Decoder(fb).segments())
        ]
        return cls(name, data, read_artifact(data), slots, segs, texts)


def mutate_slot(subject: Subject, slot: Slot, rng: np.random.Generator) -> bytes:
    """The file with one integer changed (to a nearby, a small, another slot's or a random value), resealed."""
    start, _ = fb_region(subject.data)
    fmt = _FORMATS[slot.size]
    at = start + slot.pos
    old = struct.unpack_from(fmt, subject.data, at)[0]
    top = 1 << (8 * slot.size)
    choice = int(rng.integers(6))
    if choice == 0:
        new = old + int(rng.choice([-1, 1]))
    elif choice == 1:
        new = int(rng.integers(0, 16))
    elif choice == 2:  # another slot's value of the same size: a plausible index, count or offset
        peers = [s for s in subject.slots if s.size == slot.size]
        other = peers[int(rng.integers(len(peers)))]
        new = struct.unpack_from(fmt, subject.data, start + other.pos)[0]
    elif choice == 3:
        new = old ^ (1 << int(rng.integers(8 * slot.size)))
    elif choice == 4:
        new = old + int(rng.integers(-64, 65)) * 4
    else:
        new = int(rng.integers(0, top, dtype=np.uint64)) if slot.size == 8 else int(rng.integers(0, top))
    new %= top
    if new == old:
        new = (old + 1) % top
    buf = bytearray(subject.data)
    struct.pack_into(fmt, buf, at, new)
    return reseal(buf)


# what a character of a string becomes: a neighbouring digit or letter keeps most texts well-formed (a block size
# 64 -> 65, an offset's 192 -> 193, a name's in_ptr0 -> in_ptr1), so the checks behind the parser are exercised
_SWAPS = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_ +-*/%()[]<>=.,:"


def mutate_text(subject: Subject, rng: np.random.Generator, where: str = "") -> tuple[str, bytes]:
    """The file with one character of one string changed (of a string whose path holds ``where``), resealed."""
    pool = [t for t in subject.texts if where in t.what] or subject.texts
    text = pool[int(rng.integers(len(pool)))]
    start, _ = fb_region(subject.data)
    at = start + text.pos + int(rng.integers(text.size))
    buf = bytearray(subject.data)
    old = buf[at]
    if chr(old).isdigit() and rng.random() < 0.5:
        new = ord("0") + (old - ord("0") + int(rng.choice([-1, 1]))) % 10
    else:
        new = _SWAPS[int(rng.integers(len(_SWAPS)))]
    buf[at] = new if new != old else (old + 1) % 128 or 1
    return text.what, reseal(buf)


def mutate_weight(subject: Subject, rng: np.random.Generator) -> bytes:
    """The file with one byte of one weight changed and that segment's checksum recomputed."""
    nonempty = [s for s in subject.segments if s[1]]
    offset, length, at = nonempty[int(rng.integers(len(nonempty)))]
    buf = bytearray(subject.data)
    buf[offset + int(rng.integers(length))] ^= 1 << int(rng.integers(8))
    new_sum = segment_checksum(bytes(buf[offset : offset + length]))
    at += fb_region(subject.data)[0]
    buf[at : at + len(new_sum)] = new_sum
    return reseal(buf)


# -- classification ------------------------------------------------------------------------------


def classify(subject: Subject, data: bytes) -> str:
    try:
        art = read_artifact(data)
    except ArtifactError as e:
        # the reader's last resort for an exception it did not expect: a path no check covers
        assert "malformed FlatBuffer (" not in str(e), str(e)
        return "refused"
    diff = differences(subject.art, art)
    if not diff:
        return "identical"
    if art.unusable_kernel_features:
        # A kernel feature this aotc does not know (a newer aotc's file, as far as the reader can tell): it keeps
        # the graphs and drops every schedule and kernel, so the file runs on the cpu only. No writer of this aotc
        # writes such a file, so it is not written back; what the reader kept must be the original's.
        assert set(diff) <= {"plans", "kernels", "onnx"}, diff  # the stored ONNX model: bytes nothing runs
        assert all(v.plan is None for v in art.variants) and not art.kernels, "kernels kept beside an unknown feature"
        return "different:unknown kernel feature (cpu only)"
    check_writer_makes(art, data)
    return "different:" + "+".join(diff)


def check_writer_makes(art: Artifact, data: bytes) -> None:
    """The model the reader returned is one the writer writes, exactly as in ``data``."""
    # the producer version is free text: as if this file came from that release of aotc
    with mock.patch.object(writer, "__version__", art.producer_version):
        again = write_artifact(
            list(art.variants),
            source=art.source,
            meta=art.meta,
            binaries=tuple(art.kernels.values()),
            onnx=art.onnx,
        )
    assert not differences(art, read_artifact(again)), "the reader's view does not survive a round trip"
    start, end = fb_region(data)
    a, b = fb_region(again)
    assert again[a:b] == data[start:end], "a model the reader accepted is written differently by the writer"


def differences(a: Artifact, b: Artifact) -> list[str]:
    out = []
    if (a.name, a.meta, a.schema_version, a.producer_version) != (b.name, b.meta, b.schema_version, b.producer_version):
        out.append("header")
    graphs_a = [*(v.graph for v in a.variants), a.source]
    graphs_b = [*(v.graph for v in b.variants), b.source]
    if [graph_key(g) for g in graphs_a] != [graph_key(g) for g in graphs_b]:
        out.append("graph")
    if sorted(a.constants) != sorted(b.constants) or any(
        a.constants[k].dtype != b.constants[k].dtype
        or a.constants[k].shape != b.constants[k].shape
        or a.constants[k].tobytes() != b.constants[k].tobytes()
        for k in a.constants
    ):
        out.append("weights")
    # Schedule, Kernel and KernelBinary are frozen dataclasses of ints, strings, bytes and SymExprs: == is exact
    plans_a, plans_b = [v.plan for v in a.variants], [v.plan for v in b.variants]
    if (plans_a, a.features, a.kernel_features) != (plans_b, b.features, b.kernel_features):
        out.append("plans")
    if dict(a.kernels) != dict(b.kernels):
        out.append("kernels")
    if a.onnx != b.onnx:
        out.append("onnx")
    return out


def graph_key(g: Graph | None) -> Any:
    """Everything a graph holds but its constants' data, comparable with ==, attrs compared by kind."""
    if g is None:
        return None
    nodes = tuple(
        (n.op, n.inputs, n.outputs, n.loc, tuple((k, _canon(v)) for k, v in n.attrs.items())) for n in g.nodes
    )
    return (
        g.name,
        g.input_names,
        g.inputs,
        g.outputs,
        repr(g.output_tree),
        g.symbols,
        g.guards,
        nodes,
        sorted(g.constants),
    )


def _canon(v: Any) -> Any:
    """True != 1 != 1.0, -0.0 != 0.0, nan == nan."""
    if isinstance(v, tuple):
        return ("tuple", tuple(_canon(x) for x in v))
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else v.hex())
    return (type(v).__name__, v)
