"""Reads artifacts: maps the file, verifies every byte of it, and rebuilds the graphs.

Trust nothing: the magic, versions, every offset and length, every index and enum, every checksum and
the zero padding are checked before anything is used, and each graph is run through the IR verifier.
A bad file raises ArtifactError and only ArtifactError. Imports numpy, flatbuffers, stdlib and aotc.ir.
"""

from __future__ import annotations

import math
import mmap
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from aotc.artifact.checks import interface_mismatch
from aotc.artifact.decode import ConstantInfo, Decoder, SegmentInfo
from aotc.artifact.layout import PREAMBLE_SIZE, align_up, checksum, unpack_preamble
from aotc.errors import AotcError, ArtifactError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.verify import verify

Buffer = bytes | mmap.mmap


@dataclass(frozen=True, eq=False)
class Artifact:
    """A verified artifact. Constants are read-only arrays viewing the mapped file (zero-copy)."""

    variants: tuple[Graph, ...]
    source: Graph | None
    meta: dict[str, Any]
    name: str
    schema_version: int
    format_version: int
    producer_version: str
    constants: Mapping[str, np.ndarray]
    file_size: int
    path: str | None = None

    @property
    def weight_bytes(self) -> int:
        return sum(int(a.nbytes) for a in self.constants.values())

    def __repr__(self) -> str:
        where = f" from {self.path!r}" if self.path else ""
        return f"<Artifact {self.name!r}{where}: {len(self.variants)} variant(s), {len(self.constants)} constants>"


def read_artifact(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> Artifact:
    """Read and verify an artifact from a path (memory-mapped) or from bytes; raises ArtifactError."""
    buf, path = _open(source)
    label = f"invalid artifact {path!r}" if path else "invalid artifact"
    try:
        return _read(buf, path)
    except ArtifactError as e:
        raise ArtifactError(f"{label}: {e}") from None
    except Exception as e:
        # The FlatBuffers runtime reports a malformed buffer with whatever struct/numpy raise.
        raise ArtifactError(f"{label}: malformed FlatBuffer ({type(e).__name__}: {e})") from None


def _open(source: Any) -> tuple[Buffer, str | None]:
    if isinstance(source, bytes):
        return source, None
    if isinstance(source, (bytearray, memoryview)):
        return bytes(source), None  # a snapshot, so later writes by the caller can't change verified data
    if not isinstance(source, (str, os.PathLike)):
        raise ArtifactError(f"read_artifact needs a path or bytes, got {type(source).__name__}")
    path = os.fspath(source)
    path = path.decode() if isinstance(path, bytes) else path
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ArtifactError(f"cannot read artifact {path!r}: not a regular file")
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b"", path
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), path
    except OSError as e:
        raise ArtifactError(f"cannot read artifact {path!r}: {e}") from e


def _read(buf: Buffer, path: str | None) -> Artifact:
    view = memoryview(buf)
    size = len(view)
    pre = unpack_preamble(view)
    if pre.file_length != size:
        if size < pre.file_length:
            raise ArtifactError(f"file is truncated: {size} bytes, the preamble says {pre.file_length}")
        raise ArtifactError(f"file has {size - pre.file_length} unexpected bytes after its end")
    if pre.flatbuffer_offset != PREAMBLE_SIZE:
        raise ArtifactError(f"FlatBuffer offset is {pre.flatbuffer_offset}, expected {PREAMBLE_SIZE}")
    fb_end = PREAMBLE_SIZE + pre.flatbuffer_length
    if pre.flatbuffer_length < 8 or fb_end > size:
        raise ArtifactError(f"FlatBuffer length {pre.flatbuffer_length} does not fit in a {size}-byte file")
    fb = bytes(view[PREAMBLE_SIZE:fb_end])
    if checksum(fb) != pre.flatbuffer_checksum:
        raise ArtifactError("FlatBuffer is corrupted (checksum mismatch)")

    dec = Decoder(fb)
    if dec.schema_version() != pre.schema_version:
        raise ArtifactError(
            f"schema version {dec.schema_version()} in the FlatBuffer != {pre.schema_version} in the preamble"
        )
    segments = dec.segments()
    starts = _check_segments(view, fb_end, segments)
    infos = dec.constants(len(segments))
    if len(infos) != len(segments):
        raise ArtifactError(f"{len(segments) - len(infos)} data segment(s) belong to no constant")
    arrays = [(c.name, _constant_array(buf, starts[c.segment], segments[c.segment], c)) for c in infos]

    variants = tuple(_graph(dec, g, arrays, f"variant {i}", True) for i, g in enumerate(dec.variants()))
    if not variants:
        raise ArtifactError("artifact holds no variants")
    for i, g in enumerate(variants[1:], 1):
        problem = interface_mismatch(variants[0], g)
        if problem:
            raise ArtifactError(f"variant {i} does not match variant 0: {problem}")
    src = dec.source()
    source = _graph(dec, src, arrays, "source graph", False) if src is not None else None
    return Artifact(
        variants=variants,
        source=source,
        meta=dec.meta(),
        name=dec.model_name(),
        schema_version=pre.schema_version,
        format_version=pre.format_version,
        producer_version=dec.producer_version(),
        constants=MappingProxyType(dict(arrays)),
        file_size=size,
        path=path,
    )


def _check_segments(view: memoryview, fb_end: int, segments: Sequence[SegmentInfo]) -> list[int]:
    """Where each segment starts in the file: in order after the FlatBuffer, each at the next 4096
    boundary, zero padding between. Stored offsets count from the data start, the first 4096 boundary
    at or after the FlatBuffer's end."""
    size, pos = len(view), fb_end
    data_start = align_up(fb_end)
    starts = []
    for i, s in enumerate(segments):
        start = align_up(pos)
        if s.offset != start - data_start:
            raise ArtifactError(f"segment {i} starts at {s.offset} from the data start, expected {start - data_start}")
        if s.length > size - start:
            raise ArtifactError(f"segment {i} ({s.length} bytes at {start}) runs past the end of the file")
        if bytes(view[pos:start]) != bytes(start - pos):
            raise ArtifactError(f"padding before segment {i} is not zero")
        if checksum(view[start : start + s.length]) != s.checksum:
            raise ArtifactError(f"segment {i} is corrupted (checksum mismatch)")
        starts.append(start)
        pos = start + s.length
    if pos != size:
        raise ArtifactError(f"file has {size - pos} bytes after its last segment")
    return starts


def _constant_array(buf: Buffer, offset: int, seg: SegmentInfo, c: ConstantInfo) -> np.ndarray:
    n = math.prod(c.shape)
    if n * c.dtype.itemsize != seg.length:
        raise ArtifactError(
            f"constant {c.name!r} is {c.dtype.value}{list(c.shape)} ({n * c.dtype.itemsize} bytes) "
            f"but its segment holds {seg.length} bytes"
        )
    try:
        dt = c.dtype.np
    except ImportError:
        raise ArtifactError(f"constant {c.name!r} is bfloat16, which needs the ml_dtypes package") from None
    if n == 0:
        arr = np.empty(c.shape, dtype=dt)
    else:
        arr = np.frombuffer(buf, dtype=dt, count=n, offset=offset).reshape(c.shape)
        if c.dtype is DType.bool and int(arr.view(np.uint8).max()) > 1:
            raise ArtifactError(f"constant {c.name!r} is bool but holds bytes other than 0 and 1")
    arr.flags.writeable = False
    return arr


def _graph(dec: Decoder, fb_graph: Any, arrays: Sequence[tuple[str, np.ndarray]], what: str, primitive: bool) -> Graph:
    g = dec.graph(fb_graph, arrays, what)
    try:
        verify(g, stage="artifact reader", primitive_only=primitive)
    except AotcError as e:
        raise ArtifactError(f"{what}: {e}") from None
    return g
