"""Reads artifacts: maps the file, verifies every byte of it, and rebuilds the graphs.

Trust nothing: the magic, versions, the FlatBuffer's structure (fbverify.py), every offset and length,
every index and enum, every checksum and the zero padding are checked before anything is used, each
graph is run through the IR verifier, and the file must be exactly what the writer makes of the model
it holds (canonical.py, checks.py): an internally inconsistent file is refused, never read as a
slightly different model. Segment checksums are computed on worker threads while the graphs decode.
A bad file raises ArtifactError and only ArtifactError. Imports numpy, flatbuffers, xxhash, stdlib and aotc.ir.

Signed files (sigblock.py, keys.py): without ``trusted_keys`` the signature block is only checked for
damage (cryptography and blake3 are not imported); with them the signature is checked first, and the
signed BLAKE3 digests are hashed on threads in place of the XXH3 segment checksums and the FlatBuffer's
checksum (the signature is the stronger check of the same bytes).
"""

from __future__ import annotations

import math
import mmap
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from aotc.artifact.checks import SOURCE_DIGEST_KEY, graph_problem, interface_mismatch, source_problem, source_weights
from aotc.artifact.decode import ConstantInfo, Decoder, SegmentInfo
from aotc.artifact.fbverify import verify_flatbuffer
from aotc.artifact.layout import PREAMBLE_SIZE, SIGNED_FORMAT_VERSION, checksum, unpack_preamble
from aotc.artifact.plan_checks import STATE_FEATURE
from aotc.artifact.plan_decode import PlanDecoder
from aotc.artifact.segments import SegmentHasher, place_segments
from aotc.artifact.sigblock import block_after
from aotc.errors import AotcError, ArtifactError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.launch import KernelBinary
from aotc.ir.variant import Variant
from aotc.ir.verify import verify

if TYPE_CHECKING:
    from aotc.artifact.keys import KeySource, SignaturePolicy

Buffer = bytes | mmap.mmap


@dataclass(frozen=True, eq=False)
class Artifact:
    """A verified artifact. Constants are read-only arrays viewing the mapped file (zero-copy)."""

    # Each variant's primitive graph and launch plan; the runtime runs the first whose guards hold.
    variants: tuple[Variant, ...]
    source: Graph | None
    meta: dict[str, Any]
    name: str
    schema_version: int
    format_version: int
    producer_version: str
    constants: Mapping[str, np.ndarray]
    file_size: int
    path: str | None = None
    # False only when read with verify_weights=False (``aotc inspect``): every check but the segment
    # checksums ran, so the arrays in ``constants`` are unverified.
    weights_verified: bool = True
    # The compiled kernels by name (empty when compiled with no targets, or with no kernels).
    kernels: Mapping[str, KernelBinary] = field(default_factory=lambda: MappingProxyType({}))
    # What reading the graphs needs, and what the plans and kernels need (schema.fbs, version 3).
    features: tuple[str, ...] = ("graph",)
    kernel_features: tuple[str, ...] = ()
    # Kernel features this aotc does not know: the file loads for the cpu, with no plans or kernels.
    unusable_kernel_features: tuple[str, ...] = ()
    # The oldest CUDA driver release every kernel binary loads on ("12.4"; schema >= 5, "" before or with none).
    cuda_driver_floor: str = ""
    # The fingerprint (SHA256:...) of the key that signed the file, None when unsigned; and whether that
    # signature was verified against trusted keys when the file was read (read_artifact(trusted_keys=...)).
    signed_by: str | None = None
    signature_verified: bool = False
    # The model's high-level graph as ONNX with no weight data, for tools and ``aotc inspect`` (schema >= 7; None: the
    # file stores none). Its weights are inputs named after ``constants`` (aotc/onnx/runtime_model.py). Nothing binds
    # it to the graphs, so the runtime never runs it: the cpu backend writes its own from the verified graphs.
    onnx: bytes | None = None
    # Whether the writer bound ``source`` to the variants with its digest, which the reader checked (files written
    # since the binding): then the cpu backend may run the source graph as the variants' equal.
    source_bound: bool = False

    @property
    def plans_bound(self) -> bool:
        """Whether every launch of every plan carries a digest and extents, which the reader checked (schema >= 6):
        each launch is bound to the nodes it computes and its pointers proved inside their values. Files of
        schema 3-5 load with their plans checked as before, unbound; a server that wants bound plans refuses a file
        with kernels for which this is False."""
        return all(
            v.plan is None or all(k.digest and k.extents is not None for k in v.plan.kernels) for v in self.variants
        )

    @property
    def weight_bytes(self) -> int:
        return sum(int(a.nbytes) for a in self.constants.values())

    def __repr__(self) -> str:
        where = f" from {self.path!r}" if self.path else ""
        return f"<Artifact {self.name!r}{where}: {len(self.variants)} variant(s), {len(self.constants)} constants>"


def read_artifact(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview,
    *,
    verify_weights: bool = True,
    trusted_keys: KeySource | Sequence[KeySource] | None = None,
    require_signature: bool | None = None,
) -> Artifact:
    """Read and verify an artifact from a path (memory-mapped) or from bytes; raises ArtifactError.

    ``verify_weights=False`` skips only the data segments' checksums (everything else is still checked),
    so describing a large file does not read its weights; such an artifact says so in
    ``weights_verified`` and must not be run.

    ``trusted_keys`` (Ed25519 public keys: paths to PEM or OpenSSH ``.pub`` files, their bytes, or key
    objects) makes the file's signature required and checked: a file that is unsigned, signed by another
    key, or changed after signing raises SignatureError (an ArtifactError). ``require_signature=False``
    with keys accepts unsigned files but still checks signed ones. No keys: signed files load like
    unsigned ones. Verifying a signature reads every byte, so it needs ``verify_weights``.
    """
    policy = _signature_policy(trusted_keys, require_signature, verify_weights)
    buf, path = _open(source)
    label = f"invalid artifact {path!r}" if path else "invalid artifact"
    try:
        return _read(buf, path, verify_weights, policy)
    except ArtifactError as e:
        raise type(e)(f"{label}: {e}") from None
    except Exception as e:
        # The structure is verified before any accessor runs, so this is a check missing somewhere; still
        # only ever ArtifactError for the caller (the mutation tests treat this message as a failure).
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


def check_signature(
    artifact: Artifact,
    trusted_keys: KeySource | Sequence[KeySource] | None = None,
    require_signature: bool | None = None,
) -> None:
    """For an Artifact already read: raise SignatureError unless it was read under keys that meet this
    ``trusted_keys``/``require_signature`` (see read_artifact)."""
    policy = _signature_policy(trusted_keys, require_signature, True)
    if policy is not None:
        policy.check_artifact(artifact.signed_by, artifact.signature_verified)


def _signature_policy(
    trusted_keys: Any, require_signature: bool | None, verify_weights: bool
) -> SignaturePolicy | None:
    if trusted_keys is None and not require_signature:
        return None
    from aotc.artifact.keys import SignaturePolicy

    if not verify_weights:
        raise AotcError("verifying a signature reads every byte: trusted_keys needs verify_weights=True")
    return SignaturePolicy.of(trusted_keys, require_signature)


def _read(buf: Buffer, path: str | None, verify_weights: bool, policy: SignaturePolicy | None) -> Artifact:
    """The signature (when a policy asks) is checked first, then its digests hash on threads while the file
    is read; when the read fails, bytes changed after signing are the better explanation, so they win."""
    view = memoryview(buf)
    check = policy.start(view) if policy is not None else None
    try:
        # A verified signature covers every byte the checksums cover, with digests an attacker cannot recompute:
        # with one in flight the XXH3 segment checksums and the FlatBuffer's checksum are redundant, so they are
        # skipped. Nothing is returned before check.join() has compared every chunk with what was signed.
        art = _read_verified(view, buf, path, verify_weights and check is None, check is None)
    except Exception:
        if check is not None:
            check.join()
        raise
    if check is None:
        return art
    check.join()
    return replace(art, weights_verified=True, signature_verified=True)


def _read_verified(
    view: memoryview, buf: Buffer, path: str | None, verify_weights: bool, verify_checksum: bool = True
) -> Artifact:
    file_size = len(view)
    pre = unpack_preamble(view)
    if pre.format_version == SIGNED_FORMAT_VERSION:
        # the block is checked for damage here; its signature only when trusted keys are given (_read)
        signed_by = block_after(view, pre.file_length).fingerprint
        view = view[: pre.file_length]
    else:
        signed_by = None
    size = len(view)
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
    if verify_checksum and checksum(fb) != pre.flatbuffer_checksum:
        raise ArtifactError("FlatBuffer is corrupted (checksum mismatch)")
    # Every offset, length and table is sound before a generated accessor follows one.
    verify_flatbuffer(fb)

    dec = Decoder(fb, pre.schema_version)
    if dec.schema_version() != pre.schema_version:
        raise ArtifactError(
            f"schema version {dec.schema_version()} in the FlatBuffer != {pre.schema_version} in the preamble"
        )
    segments = dec.segments()
    starts = place_segments(view, fb_end, segments)
    hasher = SegmentHasher(view, starts, segments, pre.schema_version) if verify_weights else None
    try:
        art = _decode(dec, buf, pre, starts, segments, file_size, path)
    except BaseException:
        if hasher is not None:
            hasher.cancel()
        raise
    if hasher is not None:
        hasher.join()
    return replace(art, weights_verified=verify_weights, signed_by=signed_by)


def _decode(
    dec: Decoder, buf: Buffer, pre: Any, starts: list[int], segments: Sequence[SegmentInfo], size: int, path: str | None
) -> Artifact:
    infos = dec.constants(len(segments))
    if len(infos) != len(segments):
        raise ArtifactError(f"{len(segments) - len(infos)} data segment(s) belong to no constant")
    arrays = [(c.name, _constant_array(buf, starts[c.segment], segments[c.segment], c)) for c in infos]
    plans = PlanDecoder(dec.root, dec.count, pre.schema_version)

    tables = dec.variants()
    graphs = tuple(_graph(dec, g, arrays, f"variant {i}", True) for i, (g, _) in enumerate(tables))
    if not graphs:
        raise ArtifactError("artifact holds no variants")
    variants = tuple(
        Variant(g, plans.schedule(s, g, f"variant {i} schedule")) for i, ((_, s), g) in enumerate(zip(tables, graphs))
    )
    plans.finish()
    for i, g in enumerate(graphs[1:], 1):
        problem = interface_mismatch(graphs[0], g)
        if problem:
            raise ArtifactError(f"variant {i} does not match variant 0: {problem}")
    name = dec.model_name()
    if name != graphs[0].name:
        raise ArtifactError(f"model name {name!r} is not variant 0's name {graphs[0].name!r}")
    src = dec.source()
    source = _graph(dec, src, arrays, "source graph", False) if src is not None else None
    if (STATE_FEATURE in plans.features) != bool(graphs[0].states):
        raise ArtifactError(
            f"the features {list(plans.features)} {'do not name' if graphs[0].states else 'name'} {STATE_FEATURE!r}, "
            f"but the variants have {len(graphs[0].states)} states"
        )
    if source is not None and source.states != graphs[0].states:
        raise ArtifactError("the source graph's states are not the variants'")
    meta = dec.meta()
    digest = meta.pop(SOURCE_DIGEST_KEY, None)  # the writer's, not the caller's: Artifact.source_bound says it
    weights = None
    if digest is not None and source is not None:
        checksums = {c.name: segments[c.segment].checksum for c in infos}
        weights = source_weights(source, graphs, checksums)
    if problem := source_problem(source, digest, pre.schema_version, weights):
        raise ArtifactError(problem)
    if src is not None and pre.schema_version >= 3 and src.Schedule() is not None:
        raise ArtifactError("the source graph has a schedule (only variants have launch plans)")
    dec.check_all_used()
    held = {k for g in (*graphs, *([source] if source is not None else [])) for k in g.constants}
    for cname, _ in arrays:
        if cname not in held:
            raise ArtifactError(f"constant {cname!r} belongs to no graph")
    return Artifact(
        variants=variants,
        source=source,
        meta=meta,
        name=name,
        schema_version=pre.schema_version,
        format_version=pre.format_version,
        producer_version=dec.producer_version(),
        constants=MappingProxyType(dict(arrays)),
        file_size=size,
        path=path,
        kernels=MappingProxyType(plans.binaries),
        features=plans.features,
        kernel_features=plans.kernel_features,
        unusable_kernel_features=plans.unusable,
        cuda_driver_floor=plans.driver_floor,
        onnx=dec.onnx(),
        source_bound=digest is not None,
    )


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
    problem = graph_problem(g)
    if problem:
        raise ArtifactError(f"{what}: {problem}")
    return g
