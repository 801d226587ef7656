"""benchmarks/bench_kernels.py --check: every benchmark case compiles without a GPU (no cubins) and its schedule
holds what the GPU run measures: one attention kernel per attention artifact, a padded odd matmul (and an
unpadded one when padding is off), a bf16 GPT-2 whose every layer gets the attention kernel, and the overhead
case's Linear as one launch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_kernels.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def test_check_mode_compiles_every_case_and_its_schedule_holds() -> None:
    done = _run("--check")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for name in ("attention_d64:", "attention_d64_causal:", "attention_d128:", "attention_d128_causal:"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert line.count("(attention)") == 1, line
    padded = out.split("matmul_odd_padded", 1)[1].split("matmul_odd_unpadded", 1)
    assert "padded: matmul" in padded[0] and "K 4097 -> 4104" in padded[0]
    assert "padded:" not in padded[1].split("gpt2", 1)[0]
    assert "2 attention" in out and out.rstrip().endswith("check: ok")
    overhead = next(line for line in out.splitlines() if line.startswith("overhead_linear"))
    assert overhead.endswith(": k0_matmul_bias (matmul)"), overhead  # one launch: the bias fused into the matmul


def test_unknown_case_is_refused_by_name() -> None:
    done = _run("--check", "convolution")
    assert done.returncode == 2
    assert "unknown case(s) convolution; choose from attention, matmul, gpt2, overhead" in done.stderr


def test_without_a_gpu_the_timed_run_says_what_is_missing() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the timed run would start")
    done = _run("attention", "--max-seq", "1024")
    assert done.returncode == 2
    assert "needs an NVIDIA GPU" in done.stderr


def test_check_mode_fails_when_attention_is_not_fused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOTC_NO_FUSE_ATTENTION", "1")  # SDPA decomposes: no attention kernel anywhere
    done = _run("--check")
    assert done.returncode == 1
    assert "attention_d64: expected exactly one attention kernel" in done.stderr
    assert "gpt2_bf16: expected 2 attention kernels (one per layer), got 0" in done.stderr
