"""Golden artifacts written by earlier aotc versions still load and compute what they computed then."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import aotc.runtime
from aotc.artifact import SCHEMA_VERSION, describe, read_artifact
from aotc.ir.evaluate import run_graph
from aotc.ir.graph import flatten_tree
from aotc.runtime.guards import Binder

HERE = Path(__file__).resolve().parent
GOLDEN = sorted(HERE.glob("v*_*.aotc"))


def test_every_schema_version_has_a_golden_file() -> None:
    versions = {int(re.match(r"v(\d+)_", p.name).group(1)) for p in GOLDEN}
    assert versions == set(range(1, SCHEMA_VERSION + 1)), "run tests/golden/make_golden.py after bumping SCHEMA_VERSION"


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden_file_runs(path: Path) -> None:
    expected = np.load(path.with_suffix(".npz"))
    feeds = {k[3:]: expected[k] for k in expected.files if k.startswith("in_")}
    want = [expected[f"out_{i}"] for i in range(sum(k.startswith("out_") for k in expected.files))]

    exe = aotc.runtime.load(path, device="cpu")
    got = exe.run(feeds)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert len(flatten_tree(exe.output_tree)) == len(want)

    art = exe.artifact
    assert art.schema_version == int(re.match(r"v(\d+)_", path.name).group(1))
    if art.source is not None:  # the high-level graph (kept for ONNX export) computes the same
        arrays = [feeds[n] for n in art.source.input_names]
        env = Binder(art.source).bind(arrays)
        for w, g in zip(want, run_graph(art.source, arrays, env)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_v1_contents() -> None:
    art = read_artifact(HERE / "v1_mlp.aotc")
    d = describe(art)
    assert d["schema_version"] == 1 and d["model_name"] == "golden_mlp"
    assert [i["name"] for i in d["inputs"]] == ["x", "ids"]
    assert d["symbols"] == [
        {"name": "batch", "min": 1, "max": 8, "multiple_of": 1},
        {"name": "seq", "min": 2, "max": 64, "multiple_of": 2},
    ]
    assert d["guards"] == [{"guard": "seq <= 48", "loc": "model.py:12"}]
    assert d["constants"] == 7 and art.meta["golden"] is True
    assert set(d["source"]["op_counts"]) >= {"embedding", "layer_norm", "linear", "gelu", "softmax", "slice"}
    y, rest = aotc.runtime.load(art)(
        **{k[3:]: v for k, v in np.load(HERE / "v1_mlp.npz").items() if k.startswith("in_")}
    )
    assert set(y) == {"y", "probs"} and isinstance(rest, list) and len(rest) == 2
