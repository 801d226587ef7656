"""The profiles the GPU check prints for every aim missed (benchmarks/kernel_profile.py): the slowest kernels of
a call with their share and achieved rate, read back from a results file, in report.md, and the dry run's path
over the instant fake driver.

data/kernel_profile_results.jsonl holds rows in the format bench_kernels records (its figures are shaped after
the H200's run 2, written by hand: no GPU run has recorded profiles yet): GPT-2 at 8x1024 missed with a profile,
GPT-2 at 1x128 met, the 8192^3 matmul missed with no profile (a file from before profiles), an attention error
row, and the overhead case missed on its own metric.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import kernel_profile  # noqa: E402

from aotc.runtime.backends.cuda.profile import KernelTime  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "data" / "kernel_profile_results.jsonl"


def _recorded() -> list[dict]:
    return [json.loads(line) for line in RESULTS.read_text().splitlines()]


def test_summarize_groups_one_code_and_ranks_by_time() -> None:
    mm = [KernelTime("k2_matmul", "matmul", 0.5, 4_000_000, 2 * 64 * 64 * 64, (64, 64, 64)) for _ in range(3)]
    ln = [KernelTime("k1_layernorm", "reduction", 0.2, 1_000_000, 0, None) for _ in range(4)]
    head = KernelTime("k9_lm_head", "matmul", 0.1, 8_000_000, 10**9, (8, 1000, 64))
    out = kernel_profile.summarize([*mm, *ln, head])
    total = 3 * 0.5 + 4 * 0.2 + 0.1
    assert [p["kernel"] for p in out] == ["k2_matmul", "k1_layernorm", "k9_lm_head"]
    assert [p["launches"] for p in out] == [3, 4, 1]
    assert out[0]["ms"] == pytest.approx(1.5) and out[0]["share"] == pytest.approx(1.5 / total)
    assert sum(p["share"] for p in out) == pytest.approx(1.0)
    assert out[0]["tflops"] == pytest.approx(3 * 2 * 64**3 / 1.5 / 1e9)
    assert out[1]["tflops"] is None and out[1]["gbps"] == pytest.approx(4 * 1_000_000 / 0.8 / 1e6)
    assert out[0]["mnk"] == [64, 64, 64]
    # only the slowest ``top``; shares stay shares of every kernel's time
    (first,) = kernel_profile.summarize([*mm, *ln, head], top=1)
    assert first["kernel"] == "k2_matmul" and first["share"] == pytest.approx(1.5 / total)
    assert kernel_profile.summarize([]) == []


def test_report_lists_every_missed_aim_and_only_those() -> None:
    rows = _recorded()
    lines = kernel_profile.report_lines(rows)
    heads = [line for line in lines if not line.startswith("    ")]
    missed = [r for r in rows if r["meets"] is False]
    assert len(heads) == len(missed)
    for head, row in zip(heads, missed):
        assert head.startswith(f"{row['case']} [") and row["aim_text"] in head
    gpt2 = next(r for r in rows if r["meets"] is False and r["case"] == "gpt2_small_bf16")
    at = lines.index(next(h for h in heads if h.startswith("gpt2_small_bf16 [batch=8 seq=1024]")))
    assert f"ratio {gpt2['ratio']:.3g}" in lines[at] and f"its kernels {gpt2['kernels_ms']:.3f} ms" in lines[at]
    body = lines[at + 1 : at + 1 + len(gpt2["profile"])]
    for line, p in zip(body, gpt2["profile"]):
        assert f"{p['share']:.1%}" in line and p["kernel"] in line and f"x{p['launches']}" in line
        rate = f"{p['tflops']:.3g} TFLOP/s" if p["tflops"] is not None else f"{p['gbps']:.3g} GB/s"
        assert rate in line
    assert "M=8192 N=50257 K=768" in body[0]
    # a row from before profiles says so; the overhead row reads its own metric; met and error rows do not print
    at = lines.index(next(h for h in heads if h.startswith("matmul_square")))
    assert lines[at + 1] == "    (no per-kernel profile recorded)"
    assert any("overhead_us 35.2" in h for h in heads)
    assert not any("batch=1 seq=128" in h or "attention_d128" in h for h in heads)
    met = [r for r in rows if r["meets"] is True]
    assert kernel_profile.report_lines(met) == [f"every aim measured was met ({len(met)} rows)"]


def test_the_command_and_report_md_print_the_same_profiles(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert kernel_profile.main([str(RESULTS)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1:] == kernel_profile.report_lines(_recorded())
    spec = importlib.util.spec_from_file_location("gpu_report", ROOT / "scripts" / "gpu_report.py")
    assert spec is not None and spec.loader is not None
    gpu_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_report)
    shutil.copy(RESULTS, tmp_path / "results.jsonl")
    text = gpu_report.report(tmp_path)
    section = text.split("## Profiles of the aims missed", 1)[1].split("```")[1].strip().splitlines()
    assert section == kernel_profile.report_lines(_recorded())


def test_the_dry_run_profiles_on_the_fake_driver(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("triton")
    out = tmp_path / "results.jsonl"
    assert kernel_profile.main(["--fake", "overhead", "--jsonl", str(out)]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    (p,) = row["profile"]  # the Linear's one matmul launch, at the fake's 0.25 ms
    assert p["kind"] == "matmul" and p["ms"] == 0.25 and p["share"] == 1.0 and p["mnk"] == [1, 256, 256]
    assert p["tflops"] == pytest.approx(2 * 256 * 256 / 0.25 / 1e9)
    assert p["kernel"] in capsys.readouterr().out
