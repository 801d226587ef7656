"""The byte layout of an artifact file around its FlatBuffer: preamble, checksums, segment alignment.

::

    offset 0    preamble (88 bytes, little-endian)
                  magic "AOTC" | format_version u32 | schema_version u32 | reserved u32 (0)
                  flatbuffer_offset u64 | flatbuffer_length u64 | file_length u64
                  flatbuffer checksum (32 bytes) | preamble checksum (16 bytes, over the 72 bytes before it)
    offset 88   the FlatBuffer (schema.fbs)
                zero padding to the next multiple of 4096: the data start
                segment 0, zero padding, segment 1, ... (each at the next multiple of 4096 after the previous)
                the file ends where the last segment (or, with none, the FlatBuffer) ends
    file_length  a signed file (format version 2) carries its signature block here (sigblock.py); the block
                 is not counted in file_length, so the signed bytes are exactly [0, file_length)

Segment offsets in the FlatBuffer count from the data start, so they do not depend on the FlatBuffer's
own size and the writer builds it once.

Every byte is covered by a checksum or is padding the reader checks is zero, so a flip anywhere is caught.
The FlatBuffer and preamble checksums are blake2b; segment checksums are XXH3-128 from schema version 2
(blake2b-256 in version 1), so verifying the weights runs at memory speed.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import xxhash

from aotc.errors import ArtifactError
from aotc.ir.dtypes import DType

MAGIC = b"AOTC"
# The layout around the FlatBuffer; bump only when this module's byte layout changes.
FORMAT_VERSION = 1
# Format 1 followed by a signature block (sigblock.py). Only signed files carry it: unsigned files stay
# format 1, so every aotc reads them, and an aotc that predates signing refuses a signed file by its version.
SIGNED_FORMAT_VERSION = 2
# Mirrors the header of schema.fbs; every version up to this one loads.
SCHEMA_VERSION = 10
SEGMENT_ALIGN = 4096
# The preamble's FlatBuffer checksum (blake2b: the FlatBuffer is small, so strength costs nothing).
DIGEST_SIZE = 32
# Attr tuples may nest (a tuple of tuples) this deep, and no deeper.
MAX_ATTR_DEPTH = 8
# Output trees (tuple/list/dict of outputs) may nest this deep.
MAX_TREE_DEPTH = 64

_HEAD = struct.Struct("<4sIIIQQQ32s")
PREAMBLE_CHECKSUM_SIZE = 16
PREAMBLE_SIZE = _HEAD.size + PREAMBLE_CHECKSUM_SIZE

# DType <-> the schema's DType enum codes. Codes are part of the format: never renumber.
DTYPE_CODES: dict[DType, int] = {
    DType.float32: 0,
    DType.float16: 1,
    DType.bfloat16: 2,
    DType.int32: 3,
    DType.int64: 4,
    DType.bool: 5,
}
DTYPES_BY_CODE: dict[int, DType] = {c: d for d, c in DTYPE_CODES.items()}


def checksum(data: bytes | memoryview) -> bytes:
    """The FlatBuffer's checksum in the preamble."""
    return hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest()


def segment_digest_size(schema_version: int) -> int:
    return 32 if schema_version < 2 else 16


def segment_checksum(data: bytes | memoryview, schema_version: int = SCHEMA_VERSION) -> bytes:
    """A data segment's checksum. From schema 2 it is XXH3-128, which hashes at memory speed (and, like
    blake2b, releases the GIL on large buffers, so the reader hashes segments on several threads);
    schema 1 files used blake2b-256, about 20x slower."""
    if schema_version < 2:
        return hashlib.blake2b(data, digest_size=32).digest()
    return xxhash.xxh3_128_digest(data)


def align_up(n: int, align: int = SEGMENT_ALIGN) -> int:
    return -(-n // align) * align


@dataclass(frozen=True)
class Preamble:
    format_version: int
    schema_version: int
    flatbuffer_offset: int
    flatbuffer_length: int
    file_length: int
    flatbuffer_checksum: bytes

    def pack(self) -> bytes:
        head = _HEAD.pack(
            MAGIC,
            self.format_version,
            self.schema_version,
            0,
            self.flatbuffer_offset,
            self.flatbuffer_length,
            self.file_length,
            self.flatbuffer_checksum,
        )
        return head + hashlib.blake2b(head, digest_size=PREAMBLE_CHECKSUM_SIZE).digest()


def unpack_preamble(data: bytes | memoryview) -> Preamble:
    """The preamble at the start of ``data``, with magic, checksum and versions checked."""
    if len(data) < PREAMBLE_SIZE:
        raise ArtifactError(
            f"not an aotc artifact: {len(data)} bytes is shorter than the {PREAMBLE_SIZE}-byte preamble"
        )
    head = bytes(data[: _HEAD.size])
    magic, fmt, schema, reserved, fb_off, fb_len, file_len, fb_sum = _HEAD.unpack(head)
    if magic != MAGIC:
        raise ArtifactError(f"not an aotc artifact: magic is {magic!r}, expected {MAGIC!r}")
    stored = bytes(data[_HEAD.size : PREAMBLE_SIZE])
    if hashlib.blake2b(head, digest_size=PREAMBLE_CHECKSUM_SIZE).digest() != stored:
        raise ArtifactError("artifact preamble is corrupted (checksum mismatch)")
    if fmt not in (FORMAT_VERSION, SIGNED_FORMAT_VERSION):
        raise ArtifactError(
            f"artifact format version {fmt} is not supported "
            f"(this aotc reads versions {FORMAT_VERSION} and {SIGNED_FORMAT_VERSION})"
        )
    if schema > SCHEMA_VERSION:
        raise ArtifactError(
            f"artifact schema version {schema} is newer than this aotc supports ({SCHEMA_VERSION}); upgrade aotc"
        )
    if schema < 1:
        raise ArtifactError(f"artifact schema version {schema} is invalid")
    if reserved != 0:
        raise ArtifactError("artifact preamble has a non-zero reserved field")
    return Preamble(fmt, schema, fb_off, fb_len, file_len, fb_sum)
