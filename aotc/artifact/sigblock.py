"""The signature block of a signed artifact, and the digests it signs. Stdlib only at import: a plain load
reads the block's structure (so a flip in it is caught like a flip anywhere) and never imports blake3 or
cryptography; those load only when a signature is made or verified (signing.py).

A signed file is an artifact of format version 2 (layout.py) followed by this block::

    offset L = the preamble's file_length: every byte before it is signed
      magic "AOTCSIG\\0" | block_version u32 (1) | algorithm u32 (1: Ed25519 over BLAKE3-256 chunk digests)
      | chunk_size u64 | signed_length u64 (= L) | chunk_count u64
      | public key (32 bytes, raw Ed25519)
      | chunk digests, 32 bytes each: BLAKE3-256 of bytes [i * chunk_size, min((i + 1) * chunk_size, L))
      | signature (64 bytes): Ed25519 over DOMAIN + every byte of the block before it
      | checksum (16 bytes): blake2b over every byte of the block before it, so damage reads as damage
      | block_length u64 | end magic "AOTCSIGE"
    the file ends here

What is signed is every byte of [0, L): the preamble (versions, lengths, the FlatBuffer's checksum), the
FlatBuffer (graphs, launch plans, kernel source, cubins, PTX, the segment table), the padding and every
weight. The chunks let threads hash the file in parallel while the reader decodes it (BLAKE3 releases the
GIL), and a mismatch names the bytes that changed. The footer finds the block from the file's end, so a
required signature is checked before any byte it covers is trusted, the preamble included.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from aotc.artifact.layout import PREAMBLE_SIZE
from aotc.artifact.pacing import Hashing, start_workers
from aotc.errors import ArtifactError, UnsupportedError

MAGIC = b"AOTCSIG\0"
END_MAGIC = b"AOTCSIGE"
BLOCK_VERSION = 1
ED25519_BLAKE3 = 1
# What the signature is over starts with this, so an aotc signature can't be replayed as any other message.
DOMAIN = b"aotc artifact signature v1\0"
CHUNK_SIZE = 8 << 20
MIN_CHUNK_SIZE, MAX_CHUNK_SIZE = 64 << 10, 1 << 30
DIGEST_SIZE = 32
PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64
CHECKSUM_SIZE = 16

_HEAD = struct.Struct("<8sIIQQQ")
_FOOTER = struct.Struct("<Q8s")
# Below this many bytes a thread costs more than it saves.
PARALLEL_MIN_BYTES = 32 << 20
MAX_WORKERS = 8


class SignatureError(ArtifactError):
    """An artifact's signature is missing, damaged, made with an untrusted key, or does not match its bytes."""


@dataclass(frozen=True)
class SignatureBlock:
    chunk_size: int
    signed_length: int
    public_key: bytes
    digests: tuple[bytes, ...]
    signature: bytes = b""

    def message(self) -> bytes:
        """The bytes the Ed25519 signature is over."""
        return DOMAIN + self._signed_part()

    def pack(self) -> bytes:
        body = self._signed_part() + self.signature
        body += hashlib.blake2b(body, digest_size=CHECKSUM_SIZE).digest()
        return body + _FOOTER.pack(len(body) + _FOOTER.size, END_MAGIC)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    def _signed_part(self) -> bytes:
        head = _HEAD.pack(MAGIC, BLOCK_VERSION, ED25519_BLAKE3, self.chunk_size, self.signed_length, len(self.digests))
        return head + self.public_key + b"".join(self.digests)


def block_size(chunk_count: int) -> int:
    return _HEAD.size + PUBLIC_KEY_SIZE + DIGEST_SIZE * chunk_count + SIGNATURE_SIZE + CHECKSUM_SIZE + _FOOTER.size


def fingerprint(public_key: bytes) -> str:
    """The key's OpenSSH fingerprint (``SHA256:...``), the same ``ssh-keygen -lf KEY.pub`` prints."""
    blob = b"".join(len(part).to_bytes(4, "big") + part for part in (b"ssh-ed25519", public_key))
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def read_block(view: memoryview) -> SignatureBlock | None:
    """The signature block at the end of ``view``, checked for damage and consistency (not verified: that
    is signing.py's work); None when the file does not end with one. Raises SignatureError for a damaged one."""
    size = len(view)
    if size < _FOOTER.size + PREAMBLE_SIZE or bytes(view[size - 8 :]) != END_MAGIC:
        return None
    (length, _) = _FOOTER.unpack(bytes(view[size - _FOOTER.size :]))
    # at most one digest per smallest chunk of the file: a damaged length never makes the reader copy the file
    if not block_size(1) <= length <= min(size - PREAMBLE_SIZE, block_size(-(-size // MIN_CHUNK_SIZE))):
        raise SignatureError(f"signature block length {length} does not fit in a {size}-byte file")
    block = bytes(view[size - length :])
    body = block[: -(_FOOTER.size + CHECKSUM_SIZE)]
    if hashlib.blake2b(body, digest_size=CHECKSUM_SIZE).digest() != block[len(body) : len(body) + CHECKSUM_SIZE]:
        raise SignatureError("signature block is corrupted (checksum mismatch)")
    magic, version, algorithm, chunk_size, signed_length, count = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise SignatureError(f"signature block starts with {magic!r}, expected {MAGIC!r}")
    if version != BLOCK_VERSION:
        raise SignatureError(f"signature block version {version} is not supported (this aotc reads {BLOCK_VERSION})")
    if algorithm != ED25519_BLAKE3:
        raise SignatureError(f"signature algorithm {algorithm} is not supported (this aotc knows {ED25519_BLAKE3})")
    if signed_length != size - length:
        raise SignatureError(f"signature block says it starts at {signed_length}, but it starts at {size - length}")
    if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE or count != -(-signed_length // chunk_size):
        raise SignatureError(f"signature block has {count} chunks of {chunk_size} bytes for {signed_length} bytes")
    if length != block_size(count):
        raise SignatureError(f"signature block is {length} bytes, expected {block_size(count)} for {count} chunks")
    pos = _HEAD.size + PUBLIC_KEY_SIZE
    return SignatureBlock(
        chunk_size=chunk_size,
        signed_length=signed_length,
        public_key=body[_HEAD.size : pos],
        digests=tuple(body[pos + i * DIGEST_SIZE : pos + (i + 1) * DIGEST_SIZE] for i in range(count)),
        signature=body[pos + count * DIGEST_SIZE :],
    )


def block_after(view: memoryview, file_length: int) -> SignatureBlock:
    """The block a format-2 file must carry right after ``file_length`` (its preamble's end)."""
    block = read_block(view)
    if block is None:
        raise SignatureError("the file is signed (format version 2) but its signature block is missing or damaged")
    if block.signed_length != file_length:
        raise SignatureError(
            f"signature block starts at {block.signed_length}, but the preamble says the file ends at {file_length}"
        )
    return block


def load_blake3() -> type:
    try:
        from blake3 import blake3
    except ImportError:
        raise UnsupportedError(
            "signed artifacts need the blake3 and cryptography packages: pip install 'aotc[sign]'"
        ) from None
    return blake3


class ChunkHasher:
    """BLAKE3-256 of each ``chunk_size`` chunk of ``view[:length]``: inline for small files, else on worker
    threads started at once, so hashing overlaps whatever the caller does before ``join()``. ``head`` stands
    in for the file's first bytes (the signer hashes the format-2 preamble it is about to write)."""

    def __init__(self, view: memoryview, length: int, chunk_size: int, head: bytes = b"") -> None:
        self._blake3 = load_blake3()
        self._view, self._length, self._chunk, self._head = view, length, chunk_size, head
        count = -(-length // chunk_size)
        self.digests: list[bytes] = [b""] * count
        self._jobs = list(range(count - 1, -1, -1))  # popped from the end: in file order
        workers = min(MAX_WORKERS, os.cpu_count() or 1, count) if length >= PARALLEL_MIN_BYTES else 0
        self._threads = start_workers(self._paced_work, workers)
        if not self._threads:
            self._work()

    def _paced_work(self) -> None:
        with Hashing():
            self._work()

    def _work(self) -> None:
        jobs, view, head = self._jobs, self._view, self._head
        while True:
            try:
                i = jobs.pop()  # atomic under the GIL
            except IndexError:
                return
            start, end = i * self._chunk, min((i + 1) * self._chunk, self._length)
            h = self._blake3(max_threads=1)
            if start < len(head):
                h.update(head[start:end])
            h.update(view[max(start, len(head)) : end])
            self.digests[i] = h.digest(length=DIGEST_SIZE)

    def join(self) -> list[bytes]:
        for t in self._threads:
            t.join()
        return self.digests


class DigestCheck:
    """The signed digests against the file's bytes, hashed on threads (ChunkHasher) from construction."""

    def __init__(self, view: memoryview, block: SignatureBlock) -> None:
        self.block = block
        self._hasher = ChunkHasher(view, block.signed_length, block.chunk_size)

    def join(self) -> None:
        """Wait for the hashing; raise SignatureError naming the first bytes that differ from what was signed."""
        bad = first_mismatch(self._hasher.join(), self.block.digests)
        if bad is not None:
            start, end = bad * self.block.chunk_size, min((bad + 1) * self.block.chunk_size, self.block.signed_length)
            raise SignatureError(
                f"the file was modified after it was signed: bytes {start}-{end} do not match the signed digest"
            )


def first_mismatch(digests: Sequence[bytes], signed: Sequence[bytes]) -> int | None:
    return next((i for i, (a, b) in enumerate(zip(digests, signed, strict=True)) if a != b), None)
