"""The GPU check's tune step on the fake driver: scripts/tune_run.py (its Python entry) loads each candidate of a
bundle, launches it with CUDA events on rotating buffer sets, times each twice and writes the results JSON; and
the merge of synthetic results into a table the compiler then reads (aotc/kernels/tuned/merge.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_cuda import FakeDriver

from aotc.kernels.tuned.bundle import key_cases, write_bundle
from aotc.runtime.backends.cuda import tune_run
from tests.kernel_layer.test_tune_bundle import _fake_compiled, matmul_graph

ROOT = Path(__file__).resolve().parents[2]


def small_bundle(tmp_path, limit=3):
    cases = key_cases(matmul_graph(), {"rows": 40}, "mm")
    cases[0].candidates = cases[0].candidates[:limit]
    path = tmp_path / "bundle.zip"
    write_bundle(path, cases, "sm_90", _fake_compiled(cases), {"triton": "3.9.0", "ptxas": "12.9", "ptx_version": 84},
                 {}, sources=True)  # fmt: skip
    return path, cases


def test_step_entry_times_every_candidate_twice_on_the_fake_driver(tmp_path):
    path, cases = small_bundle(tmp_path)
    out = tmp_path / "out" / "tune_results.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "tune_run.py"), str(path), "--out", str(out), "--fake",
           "--max-reps", "1", "--budget", "60"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 candidates timed twice, 0 failed" in done.stdout
    result = json.loads(out.read_text())
    assert result["gpu"]["sm_count"] == 132 and result["gpu"]["arch"] == "sm_90"
    assert result["toolchain"]["triton"] == "3.9.0" and len(result["clocks"]) == 1 + tune_run.ROUNDS
    (key,) = result["keys"]
    assert key["kernel"] == cases[0].key
    assert [c["name"] for c in key["candidates"]] == [c.name for c in cases[0].candidates]
    for c in key["candidates"]:
        assert len(c["ms"]) == 2 and all(ms > 0 for ms in c["ms"]) and c["reps"] == 1


def test_rotating_buffers_and_interleaving(tmp_path):
    path, cases = small_bundle(tmp_path, limit=2)
    drv = FakeDriver()
    kernels = {c.name: c.kernel for c in cases[0].candidates}
    seen = []

    def hook(binary):
        drv.register_kernel(kernels[binary.name], binary)

    original = drv._read_params

    def spy(f, params):
        values = original(f, params)
        seen.append((f.name, values[0]))  # the first pointer: which buffer set this launch reads
        return values

    drv._read_params = spy
    result = tune_run.run_bundle(path, drv, budget_s=30, log=lambda *_: None, max_reps=1, on_binary=hook)
    assert all(len(c["ms"]) == 2 for c in result["keys"][0]["candidates"])
    names = [n for n, _ in seen]
    # per round, blocks interleave the candidates (a, b, a, b, ...), the second round backwards
    timed = names[3:]  # after each candidate's warm-up and the heuristic's probe
    assert timed[: 2 * tune_run.BLOCKS] == [cases[0].candidates[0].name, cases[0].candidates[1].name] * tune_run.BLOCKS
    assert len({p for _, p in seen}) == tune_run.ROTATE  # every buffer set is read
    assert drv.live()["allocations"] == 0 and drv.live()["modules"] == 0  # all freed and unloaded


def test_a_bundle_that_is_not_one_is_refused(tmp_path):
    bad = tmp_path / "b.zip"
    import zipfile

    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("index.json", json.dumps({"format": 7}))
    from aotc.errors import AotcError

    with pytest.raises(AotcError, match="format 7, expected 1"):
        tune_run.run_bundle(bad, FakeDriver())
