"""``--compile-only`` fills the kernel cache on a machine with neither a GPU nor torch, and a second run (as
the timed run on the GPU would) finds every kernel there: it compiles nothing new."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The benchmark run as a script with torch made unimportable: --compile-only must never need it.
NO_TORCH = "import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def _compile_only(script: str, cache: Path, *args: str) -> tuple[str, int]:
    env = {**os.environ, "AOTC_CACHE_DIR": str(cache)}
    env.pop("AOTC_TARGETS", None)
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(ROOT / "benchmarks" / script), "--compile-only", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"(\d+) kernel binaries compiled, (\d+) found in the cache", done.stdout)
    assert found, done.stdout
    return done.stdout, int(found.group(1))


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "kernels").glob("*/*.json"))


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("bench_kernels.py", ("--small", "--targets", "sm_80", "overhead", "gpt2")),
        ("bench_cuda.py", ("--targets", "sm_80", "mlp")),
    ],
)
def test_compile_only_fills_the_cache_and_a_second_run_compiles_nothing(
    script: str, args: tuple[str, ...], tmp_path: Path
) -> None:
    pytest.importorskip("triton")
    cache = tmp_path / "aotc-cache"
    out, compiled = _compile_only(script, cache, *args)
    entries = _entries(cache)
    assert compiled > 0 and len(entries) == compiled, out
    assert "compile only, for sm_80 (triton " in out
    again, compiled_again = _compile_only(script, cache, *args)
    assert compiled_again == 0, again  # all hits: what the GPU run, with this cache carried, will see
    assert f"0 kernel binaries compiled, {compiled} found in the cache" in again
    assert _entries(cache) == entries


def test_compile_only_refuses_targets_no_gpu_run_uses() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_kernels.py"), "--compile-only", "--targets", "sm_90"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "not what a timed run compiles for on any GPU" in done.stderr
