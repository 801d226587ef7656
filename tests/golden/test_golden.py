"""Golden artifacts written by earlier aotc versions still load and compute what they computed then."""

from __future__ import annotations

import dataclasses
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
    got = exe.session().run(feeds) if exe.stateful else exe.run(feeds)  # from v10 the file keeps a state
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert len(flatten_tree(exe.output_tree)) == len(want)

    art = exe.artifact
    assert art.schema_version == int(re.match(r"v(\d+)_", path.name).group(1))
    if art.source is not None:  # the high-level graph (kept for ONNX export) computes the same
        arrays = [feeds[n] for n in art.source.input_names[: art.source.num_feeds]]
        env = Binder(art.source).bind(arrays)
        states = [np.broadcast_to(s.init, s.shape(env)).copy() for s in exe.state_specs]
        for w, g in zip(want, run_graph(art.source, arrays + states, env)):
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


def test_each_version_keeps_its_segment_checksum() -> None:
    """Version 1 files hash segments with blake2b-256, version 2 with XXH3-128; both load and agree."""
    from aotc.artifact.decode import Decoder
    from aotc.artifact.layout import PREAMBLE_SIZE, segment_checksum

    arts = {}
    for version, size in ((1, 32), (2, 16)):
        data = (HERE / f"v{version}_mlp.aotc").read_bytes()
        fb_len = int.from_bytes(data[24:32], "little")
        segments = Decoder(data[PREAMBLE_SIZE : PREAMBLE_SIZE + fb_len], version).segments()
        assert {len(s.checksum) for s in segments} == {size}
        arts[version] = read_artifact(data)
        first = arts[version].constants[sorted(arts[version].constants)[0]]
        assert len(segment_checksum(first.tobytes(), version)) == size
    assert sorted(arts[1].constants) == sorted(arts[2].constants)
    for name, arr in arts[1].constants.items():
        assert arr.tobytes() == arts[2].constants[name].tobytes()


def test_v3_kernels_load_and_run_under_the_interpreter() -> None:
    """The schema 3 golden file holds the launch plan and sm_80 cubins + PTX; its stored kernels, run by the
    Triton interpreter, compute what the file's graph computed when it was written."""
    pytest.importorskip("triton")
    art = read_artifact(HERE / "v3_mlp.aotc")
    assert art.kernel_features == ("kernels", "binaries") and art.features == ("graph",)
    (schedule,) = (v.plan for v in art.variants)
    assert schedule is not None and {k.name for k in schedule.kernels} == set(art.kernels)
    assert all(b.archs == ("sm_80",) and b.ptx_meta.arch == "sm_80" for b in art.kernels.values())
    assert any(k.checks for k in schedule.kernels)  # the embedding's index check
    expected = np.load(HERE / "v3_mlp.npz")
    feeds = {k[3:]: expected[k] for k in expected.files if k.startswith("in_")}
    got = aotc.runtime.load(art, device="interpret").run(feeds)
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, expected[f"out_{i}"], rtol=1e-4, atol=1e-5)
    d = describe(art)
    assert [k["name"] for k in d["kernels"]] == list(dict.fromkeys(k.name for k in schedule.kernels))
    assert all(k["targets"] == ["sm_80"] and k["num_warps"] >= 1 for k in d["kernels"])
    assert d["arena_bytes"] > 0


def test_v4_arch_launches_load_and_run_under_the_interpreter() -> None:
    """The schema 4 golden file holds sm_80 and sm_90 cubins and an sm_90 arch launch of a launch: a GPU of
    capability 9.0 launches the arch launch's code, 8.x the launch's own; both compute the stored outputs."""
    pytest.importorskip("triton")
    art = read_artifact(HERE / "v4_mlp.aotc")
    assert art.kernel_features == ("kernels", "binaries", "arch_variants")
    (schedule,) = (v.plan for v in art.variants)
    (launch,) = [k for k in schedule.kernels if k.arch_launches]
    (arch_launch,) = launch.arch_launches
    assert arch_launch.arch == "sm_90" and art.kernels[arch_launch.kernel.name].archs == ("sm_90",)
    assert art.kernels[launch.name].archs == ("sm_80", "sm_90")
    assert schedule.for_capability((9, 0)).kernels != schedule.kernels
    assert schedule.for_capability((8, 6)) is schedule or schedule.for_capability((8, 6)).kernels == schedule.kernels
    expected = np.load(HERE / "v4_mlp.npz")
    feeds = {k[3:]: expected[k] for k in expected.files if k.startswith("in_")}
    for s in (schedule, schedule.for_capability((9, 0))):
        plain = dataclasses.replace(art, variants=(art.variants[0].replace(plan=s),))
        got = aotc.runtime.load(plain, device="interpret").run(feeds)
        for i, g in enumerate(got):
            np.testing.assert_allclose(g, expected[f"out_{i}"], rtol=1e-4, atol=1e-5)
    d = describe(art)
    rows = {k["name"]: k for k in d["kernels"]}
    row = rows[arch_launch.kernel.name]
    assert row["arch_launch_of"] == launch.name and row["targets"] == ["sm_90"]


def test_files_before_v3_have_no_kernels() -> None:
    for version in (1, 2):
        art = read_artifact(HERE / f"v{version}_mlp.aotc")
        assert tuple(v.plan for v in art.variants) == (None,) and dict(art.kernels) == {}
        assert art.features == ("graph",) and art.kernel_features == ()
        assert describe(art)["kernels"] == [] and describe(art)["arena_bytes"] is None


def test_every_golden_file_runs_on_onnxruntime_and_v7_on_stores_an_onnx_model() -> None:
    """The cpu backend writes its onnxruntime model from the file's variant graph, so files from before schema 7
    (no stored model) run on onnxruntime too; what a v7 file stores is for tools and ``aotc inspect``."""
    pytest.importorskip("onnxruntime")
    from aotc.runtime.backends.onnxrt import OrtBackend, OrtProgram

    for path in GOLDEN:
        exe = aotc.runtime.load(path, device="cpu")
        assert isinstance(exe._backend, OrtBackend), path.name
        assert all(isinstance(program, OrtProgram) for _, program in exe._variants), path.name
        stored = exe.artifact.onnx is not None
        assert stored == (exe.artifact.schema_version >= 7), path.name
        assert describe(exe.artifact)["onnx"]["stored"] is stored


def test_v10_keeps_its_state_across_calls_on_every_backend() -> None:
    """The v10 file's state starts at its broadcast initial value, each call writes the row its input names, and a
    later call sees the earlier calls' rows; the references, onnxruntime and the interpreted kernels agree."""
    path = HERE / "v10_mlp.aotc"
    feeds = {k[3:]: v for k, v in np.load(path.with_suffix(".npz")).items() if k.startswith("in_")}
    art = read_artifact(path)
    (state,) = art.variants[0].graph.states
    assert state.name == "memory" and art.features == ("graph", "state")
    assert describe(art)["states"] == [
        {"name": "memory", "dtype": "float32", "shape": ["4", "16"], "init": "memory.init", "bytes": 256, "writers": 1}
    ]
    results = {}
    for device in ("reference", "cpu", "interpret"):
        s = aotc.runtime.load(art, device=device).session()
        first = s.run(feeds)[4]
        again = s.run({**feeds, "slot": np.array([0])})[4]
        results[device] = (first, again, s.state("memory"))
    init = np.broadcast_to(art.constants["memory.init"], (4, 16))
    first, again, memory = results["reference"]
    row = first - init.sum(0) + init[2]  # what the first call wrote into row 2
    np.testing.assert_allclose(memory[2], row, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(memory[0], row, rtol=1e-5, atol=1e-6)  # the second call wrote the same row at 0
    np.testing.assert_allclose(memory[[1, 3]], init[[1, 3]])
    np.testing.assert_allclose(again, memory.sum(0), rtol=1e-5, atol=1e-6)
    for device, got in results.items():
        for g, w in zip(got, results["reference"]):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=device)
