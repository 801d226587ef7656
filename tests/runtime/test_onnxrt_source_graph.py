"""device='cpu' runs the model's source graph (its high-level ops, as onnxruntime's kernels and fusions know them)
when the file binds it to its variants with the source graph's digest, and the primitive variant graph otherwise;
a source graph changed without the rest of the file is refused by the reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aotc
import aotc.artifact.writer as writer
from aotc import Dim, TensorSpec, nn
from aotc.artifact import read_artifact, write_artifact
from aotc.artifact.checks import SOURCE_DIGEST_KEY
from aotc.errors import ArtifactError
from aotc.ir.ops import Op
from aotc.lowering.options import CompileOptions

pytest.importorskip("onnxruntime")

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


class Pooled(nn.Module):
    """A convolution, batch norm, ReLU and max pool: ops the primitive graph writes as strided slices and
    elementwise math, and the source graph as onnxruntime's Conv, BatchNormalization, Relu and MaxPool."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.pool = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(self.bn(self.conv(x)).relu())


@pytest.fixture(scope="module")
def pooled() -> bytes:
    model = Pooled()
    rng = np.random.default_rng(0)
    model.load_state_dict({k: rng.uniform(0.5, 1.5, v.shape).astype(np.float32) for k, v in model.state_dict().items()})
    spec = {"x": TensorSpec((Dim("batch", min=1, max=4), 3, 8, 8), "float32")}
    return aotc.compile(model, spec, options=CompileOptions(kernels=False, targets=())).artifact_bytes


def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}


def test_a_bound_source_graph_is_what_onnxruntime_runs(pooled: bytes) -> None:
    art = read_artifact(pooled)
    assert art.source_bound and SOURCE_DIGEST_KEY not in art.meta  # the reader's, not the caller's meta
    assert {n.op for n in art.source.nodes} >= {Op.MAX_POOL2D, Op.BATCH_NORM}
    exe = aotc.load(art, device="cpu")
    assert exe._backend._source is art.source
    assert exe._backend._sessions[id(art.source)] is not None  # one session, over the source graph
    assert id(art.variants[0].graph) not in exe._backend._sessions
    np.testing.assert_allclose(exe(**feeds()), aotc.load(art, device="reference")(**feeds()), rtol=1e-5, atol=1e-5)


def test_a_source_graph_changed_without_its_digest_is_refused(pooled: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that edits the source graph (a ReLU made a sigmoid) and reseals the file but keeps the digest the
    variants were written against."""
    art = read_artifact(pooled)
    real = writer.graph_digest
    edited = art.source.replace(
        nodes=tuple(n.replace(op=Op.SIGMOID) if n.op is Op.RELU else n for n in art.source.nodes)
    )
    assert edited.nodes != art.source.nodes
    monkeypatch.setattr(writer, "graph_digest", lambda graph, weights: real(art.source, weights))
    data = write_artifact(list(art.variants), source=edited, meta=art.meta)
    with pytest.raises(ArtifactError, match="the source graph does not match its digest"):
        read_artifact(data)


def test_a_file_without_the_binding_runs_its_variant_graphs() -> None:
    """Files from before the binding (the golden schema 7 file) run each variant's primitive graph."""
    art = read_artifact(GOLDEN / "v7_mlp.aotc")
    assert art.source is not None and not art.source_bound
    exe = aotc.load(art, device="cpu")
    assert exe._backend._source is None
    assert exe._backend._sessions[id(art.variants[0].graph)] is not None


def test_a_schema_8_source_graph_without_its_digest_is_refused(pooled: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every schema 8 writer binds the source graph, so a file that has one and no digest was made otherwise."""
    art = read_artifact(pooled)
    monkeypatch.setattr(writer, "SOURCE_DIGEST_KEY", "something.else")  # the digest written under another key
    data = write_artifact(list(art.variants), source=art.source, meta=art.meta)
    with pytest.raises(ArtifactError, match="the source graph has no digest"):
        read_artifact(data)
