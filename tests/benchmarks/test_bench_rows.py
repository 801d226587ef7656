"""The benchmarks' rows and targets without a GPU: each row is printed and appended to --jsonl as it is
measured, a failing case writes an error row and the run goes on, and the timed run compiles for exactly the
targets ``--compile-only --targets`` fills the cache for (benchlib.gpu_targets)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_kernels  # noqa: E402
import benchlib  # noqa: E402
import kernel_cases  # noqa: E402
import kernel_timing  # noqa: E402

REQUIRED = ("bench", "case", "shape", "dtype", "aotc_ms", "ref_name", "ref_ms", "ratio", "aim", "aim_text", "meets")


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_gpu_targets_is_the_one_choice_of_targets() -> None:
    assert benchlib.gpu_targets((9, 0)) == ("sm_80", "sm_90")  # an H100: aotc's default targets
    assert benchlib.gpu_targets((8, 0)) == ("sm_80",)
    assert benchlib.gpu_targets((8, 9)) == ("sm_80", "sm_89")
    assert benchlib.targets_from_flag("sm_80,sm_90") == ("sm_80", "sm_90")
    assert benchlib.targets_from_flag("sm_80") == ("sm_80",)
    with pytest.raises(ValueError, match="a sm_90 GPU compiles for sm_80,sm_90"):
        benchlib.targets_from_flag("sm_90")  # no timed run asks for sm_90 alone: its cache would never be hit


def test_recorder_prints_and_appends_each_row_as_it_comes(tmp_path: Path) -> None:
    out = io.StringIO()
    rec = benchlib.Recorder("bench_x", tmp_path / "sub" / "rows.jsonl", out=out)
    rec.context = {"gpu": "fake"}
    rec.add("attention_d64", {"seq": 1024}, dtype="bfloat16", aotc_ms=2.0, ref_name="sdpa", ref_ms=1.9, aim=0.9,
            aim_text="aotc >= 0.90x SDPA's speed", tflops=float("nan"))  # fmt: skip
    assert len(_rows(tmp_path / "sub" / "rows.jsonl")) == 1  # on disk before the next row is measured
    assert "[bench_x] attention_d64 1024 (seq) bfloat16: aotc 2.0000 ms, sdpa 1.9000 ms, ratio 0.95x" in out.getvalue()
    with rec.attempt("attention_d64", {"seq": 4096}, dtype="bfloat16", ref_name="sdpa", aim=0.9):
        raise RuntimeError("CUDA out of memory")
    rec.add("overhead_linear", {"batch": 1}, dtype="float32", aotc_ms=0.03, ref_name="eager", ref_ms=0.02,
            aim=20.0, aim_metric="overhead_us", aim_text="<= 20 us", meets=False, overhead_us=25.0)  # fmt: skip
    rows = _rows(tmp_path / "sub" / "rows.jsonl")
    assert [r["case"] for r in rows] == ["attention_d64", "attention_d64", "overhead_linear"]
    for row in rows:
        assert all(key in row for key in REQUIRED), row
        assert row["gpu"] == "fake" and row["bench"] == "bench_x"
    first, failed, last = rows
    assert first["ratio"] == pytest.approx(0.95) and first["meets"] is True and first["tflops"] is None
    assert failed["error"] == "RuntimeError: CUDA out of memory" and failed["meets"] is None
    assert failed["aotc_ms"] is None and failed["shape"] == {"seq": 4096} and failed["aim"] == 0.9
    assert last["meets"] is False and last["aim_metric"] == "overhead_us"
    assert "FAILED: RuntimeError: CUDA out of memory" in out.getvalue()
    assert "FAILED" in rec.table([("case", "case"), ("aotc ms", "aotc_ms"), ("met", "meets")])


def _fake_gpu(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int]) -> None:
    info = SimpleNamespace(name="Fake GPU", arch=f"sm_{capability[0]}{capability[1]}", capability=capability)
    torch = SimpleNamespace(__version__="0.0-fake")
    monkeypatch.setattr(bench_kernels.bench_cuda, "require_gpu", lambda: (torch, info))
    monkeypatch.setattr(
        bench_kernels.bench_cuda, "run_context", lambda torch, info, targets: {"gpu": info.name, "triton": "x"}
    )


def test_a_failing_case_writes_an_error_row_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_gpu(monkeypatch, (9, 0))
    seen: list[tuple[str, ...]] = []

    def broken(b: kernel_timing.Bench) -> None:
        raise RuntimeError("the attention case broke")

    def matmul(b: kernel_timing.Bench) -> None:
        seen.append(b.targets)
        with b.rec.attempt("matmul_square", {"M": 1}, dtype="bfloat16", ref_name="cublas"):
            raise ValueError("this shape broke")
        b.rec.add("matmul_odd_padded", {"M": 2}, dtype="bfloat16", aotc_ms=1.0, ref_name="cublas", ref_ms=1.2)

    def overhead(b: kernel_timing.Bench) -> None:
        b.rec.add("overhead_linear", {"batch": 1}, dtype="float32", aotc_ms=0.02, ref_name="eager", ref_ms=0.01)

    monkeypatch.setattr(kernel_timing, "BENCHES", {"attention": broken, "matmul": matmul, "overhead": overhead})
    jsonl = tmp_path / "rows.jsonl"
    code = bench_kernels.main(["attention", "matmul", "overhead", "--jsonl", str(jsonl)])
    assert code == 1  # some rows failed
    assert seen == [("sm_80", "sm_90")]  # an sm_90 GPU's timed run compiles for exactly these
    rows = _rows(jsonl)
    assert [(r["case"], bool(r.get("error"))) for r in rows] == [
        ("attention", True), ("matmul_square", True), ("matmul_odd_padded", False), ("overhead_linear", False),
    ]  # fmt: skip
    assert rows[0]["error"] == "RuntimeError: the attention case broke"
    assert rows[1]["error"] == "ValueError: this shape broke"
    assert rows[2]["ratio"] == pytest.approx(1.2)
    out = capsys.readouterr().out
    assert "kernels for sm_80,sm_90" in out and "overhead_linear" in out.split("ratio:")[0]


def test_the_timed_run_takes_no_targets_flag() -> None:
    with pytest.raises(SystemExit) as raised:
        bench_kernels.main(["--targets", "sm_80,sm_90"])
    assert raised.value.code == 2


def test_compile_only_goes_on_past_an_artifact_that_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom() -> Any:
        raise RuntimeError("cannot build this model")

    real = bench_kernels.builds

    def builds(case: str, args: Any) -> list[kernel_cases.Build]:
        return [kernel_cases.Build("broken", boom), *real(case, args)]

    monkeypatch.setattr(bench_kernels, "builds", builds)
    args = bench_kernels.parse(["overhead", "--small"])
    assert bench_kernels.compile_only(args, ()) == 1  # no targets: schedules only, no cubins, no triton
    out = capsys.readouterr().out
    assert "broken: FAILED: RuntimeError: cannot build this model" in out
    assert "overhead_linear (Linear 256 -> 256): k0_matmul_bias (matmul)" in out
    assert "compile only: 1 of 2 artifacts" in out
