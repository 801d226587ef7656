"""Writes artifacts: verified graphs into a FlatBuffer, constants into 4096-aligned data segments."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc import __version__
from aotc.artifact.checks import (
    SOURCE_DIGEST_KEY,
    check_output_tree,
    graph_problem,
    interface_mismatch,
    source_weights,
)
from aotc.artifact.encode import ConstantEntry, Header, SegmentEntry, encode_artifact
from aotc.artifact.layout import (
    FORMAT_VERSION,
    PREAMBLE_SIZE,
    SCHEMA_VERSION,
    Preamble,
    align_up,
    checksum,
    segment_checksum,
)
from aotc.artifact.plan_encode import plan_kernels
from aotc.errors import ArtifactError, ShapeError
from aotc.ir.digest import graph_digest
from aotc.ir.dtypes import DType, dtype_of
from aotc.ir.graph import Graph
from aotc.ir.launch import KernelBinary
from aotc.ir.variant import Variant
from aotc.ir.verify import verify


@dataclass(frozen=True)
class _Plan:
    """Everything that goes into the file, in order: the head (preamble + FlatBuffer) and the segments."""

    head: bytes
    segments: tuple[tuple[int, memoryview], ...]  # (offset, bytes)
    file_length: int

    def chunks(self) -> Iterator[bytes | memoryview]:
        yield self.head
        pos = len(self.head)
        for offset, data in self.segments:
            if offset > pos:
                yield bytes(offset - pos)
            yield data
            pos = offset + len(data)


def write_artifact(
    variants: Sequence[Variant | Graph],
    *,
    source: Graph | None = None,
    meta: Mapping[str, Any] | None = None,
    binaries: Sequence[KernelBinary] = (),
    onnx: bytes | None = None,
) -> bytes:
    """The artifact for ``variants`` (of one model: each a lowered, primitive-only graph and its launch plan; a bare
    Graph is a variant with no plan, cpu only) as bytes.

    ``source`` is the model's high-level graph, kept for ONNX export. ``meta`` must be JSON-able.
    ``binaries`` are the compiled kernels (one per distinct kernel name, or none when compiled with no targets).
    ``onnx`` is the high-level graph as ONNX for tools (aotc/onnx/runtime_model.py), its weights named after
    constants. Raises VerifyError for an invalid graph and ArtifactError for anything that can't be stored,
    including a plan that does not fit its variant (plan_checks.py).
    """
    return b"".join(_plan(variants, source, meta, binaries, onnx).chunks())


def save_artifact(
    path: str | os.PathLike[str],
    variants: Sequence[Variant | Graph],
    *,
    source: Graph | None = None,
    meta: Mapping[str, Any] | None = None,
    binaries: Sequence[KernelBinary] = (),
    onnx: bytes | None = None,
) -> None:
    """Write the artifact to ``path`` (see write_artifact), streaming the segments (no copy of the
    weights in memory). The file appears atomically: it is written next to ``path`` and renamed into place.
    """
    plan = _plan(variants, source, meta, binaries, onnx)
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            for chunk in plan.chunks():
                f.write(chunk)
        os.replace(tmp, path)
    except OSError as e:
        raise ArtifactError(f"cannot write artifact {path}: {e}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# -- planning ------------------------------------------------------------------------------------


def _plan(
    given: Sequence[Variant | Graph],
    source: Graph | None,
    meta: Mapping[str, Any] | None,
    binaries: Sequence[KernelBinary],
    onnx: bytes | None = None,
) -> _Plan:
    variants = _check_variants(given, source)
    kernels = plan_kernels(variants, binaries)
    graphs = [v.graph for v in variants]
    arrays = _collect_constants([*graphs, *([source] if source is not None else [])])
    names = list(arrays)
    datas = [_bytes_of(arrays[n]) for n in names]
    checksums = [segment_checksum(d) for d in datas]
    constants = [
        ConstantEntry(n, dtype_of(arrays[n].dtype), tuple(int(d) for d in arrays[n].shape), i)
        for i, n in enumerate(names)
    ]
    if source is not None:  # the source graph bound to the variants (checks.source_problem)
        weights = source_weights(source, graphs, dict(zip(names, checksums)))
        meta = {**(meta or {}), SOURCE_DIGEST_KEY: graph_digest(source, weights)}
    header = Header(SCHEMA_VERSION, __version__, variants[0].name, _meta_json(meta))

    # Segment offsets count from the data start, the first 4096 boundary after the FlatBuffer, so
    # they are known before the FlatBuffer is built and one pass settles the layout.
    offsets = _segment_offsets([len(d) for d in datas])
    segments = [SegmentEntry(o, len(d), c) for o, d, c in zip(offsets, datas, checksums)]
    fb = encode_artifact(header, variants, source, constants, segments, plan=kernels, onnx=onnx)
    data_start = align_up(PREAMBLE_SIZE + len(fb))
    placed = tuple((data_start + o, d) for o, d in zip(offsets, datas))
    end = placed[-1][0] + len(placed[-1][1]) if placed else PREAMBLE_SIZE + len(fb)
    preamble = Preamble(FORMAT_VERSION, SCHEMA_VERSION, PREAMBLE_SIZE, len(fb), end, checksum(fb))
    return _Plan(preamble.pack() + fb, placed, end)


def _segment_offsets(lengths: Sequence[int]) -> list[int]:
    """Each segment at the next multiple of 4096 after the previous one, from the data start."""
    out, pos = [], 0
    for n in lengths:
        pos = align_up(pos)
        out.append(pos)
        pos += n
    return out


def _check_variants(given: Sequence[Variant | Graph], source: Graph | None) -> list[Variant]:
    if isinstance(given, (Graph, Variant)) or not isinstance(given, Sequence) or not given:
        raise ArtifactError("write_artifact needs a non-empty sequence of variants (Variant, or a Graph with no plan)")
    variants = [Variant(v) if isinstance(v, Graph) else v for v in given]
    for i, g in enumerate([*(v.graph if isinstance(v, Variant) else v for v in variants), source]):
        if g is None:
            continue
        if not isinstance(g, Graph):
            raise ArtifactError(f"expected a Variant or a Graph, got {type(g).__name__}")
        what = "source graph" if i == len(variants) else f"variant {i}"
        verify(g, stage=f"artifact writer ({what})", primitive_only=i < len(variants))
        check_output_tree(g.output_tree, g.num_results, ArtifactError, what)
        problem = graph_problem(g)
        if problem:
            raise ArtifactError(f"{what}: {problem}")
    first = variants[0].graph
    for i, v in enumerate(variants[1:], 1):
        problem = interface_mismatch(first, v.graph)
        if problem:
            raise ArtifactError(f"variant {i} does not match variant 0: {problem}")
    return variants


def _collect_constants(graphs: Sequence[Graph]) -> dict[str, np.ndarray]:
    """One table of constants shared by name across graphs; a name must mean the same array everywhere."""
    out: dict[str, np.ndarray] = {}
    for g in graphs:
        for name, arr in g.constants.items():
            if not isinstance(name, str) or not isinstance(arr, np.ndarray):
                raise ArtifactError(f"graph {g.name!r} constant {name!r} must be a numpy array under a str name")
            try:
                dtype_of(arr.dtype)
            except ShapeError as e:
                raise ArtifactError(f"constant {name!r}: {e}") from None
            prev = out.get(name)
            if prev is None:
                out[name] = arr
            elif prev is not arr and not _same_array(prev, arr):
                raise ArtifactError(f"constant {name!r} holds different arrays in different graphs")
    return out


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bytes(_bytes_of(a)) == bytes(_bytes_of(b))


def _bytes_of(arr: np.ndarray) -> memoryview:
    """The array's bytes, little-endian in C order, without a copy when it already is."""
    dt: DType = dtype_of(arr.dtype)
    data = np.ascontiguousarray(arr, dtype=dt.np.newbyteorder("<"))
    return memoryview(data.reshape(-1).view(np.uint8))


def _meta_json(meta: Mapping[str, Any] | None) -> str:
    if meta is not None and not isinstance(meta, Mapping):
        raise ArtifactError(f"meta must be a mapping, got {type(meta).__name__}")
    try:
        return json.dumps(dict(meta or {}), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise ArtifactError(f"meta is not JSON-serializable: {e}") from None
