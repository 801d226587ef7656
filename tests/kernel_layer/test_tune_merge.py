"""Merging tune results into the tuned table (aotc/kernels/tuned/merge.py, scripts/tune_merge.py) with synthetic
results: top configs by the mean of their two timings, the heuristic's ms, a re-merge replacing its entry, bad
candidates dropped; and the merged file is one the compiler reads back (exact match, no warning)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from aotc.errors import AotcError
from aotc.kernels.tuned import EXACT, choose
from aotc.kernels.tuned.merge import empty_table, merge
from tests.kernel_layer.test_tuned_table import CHAIN, key_of, lowered_linear

ROOT = Path(__file__).resolve().parents[2]


def tiles(bm, bn, bk=16, warps=4, stages=3):
    return {"block_m": bm, "block_n": bn, "block_k": bk, "group_m": 8, "num_warps": warps, "num_stages": stages}


def results(ms_by_tiles, gpu="NVIDIA H200", chain=CHAIN):
    key = key_of(lowered_linear())
    cands = [{"name": f"c{i}", "tiles": t, "heuristic": i == 0, "ms": ms}
             for i, (t, ms) in enumerate(ms_by_tiles)]  # fmt: skip
    return {"format": 1, "arch": "sm_90", "toolchain": chain, "gpu": {"name": gpu, "sm_count": 132, "arch": "sm_90"},
            "keys": [{"id": "key0", "label": "mm", "kernel": key, "candidates": cands}]}  # fmt: skip


SYNTHETIC = [
    (tiles(64, 64), [1.0, 1.2]),  # the heuristic: 1.1
    (tiles(16, 32), [0.5, 0.7]),  # 0.6: fastest
    (tiles(32, 32), [0.9, 0.7]),  # 0.8
    (tiles(16, 64), [0.75, 0.75]),  # 0.75
    (tiles(64, 32), [0.1]),  # timed once: ignored
    (tiles(48, 32), [0.05, 0.05]),  # not a legal tile: dropped
    (tiles(32, 64), [0.95, 0.95]),  # 0.95: not in the top 3
]


def test_merge_keeps_the_top_three_and_the_heuristic():
    table = empty_table("sm_90")
    lines = merge(table, results(SYNTHETIC))
    (entry,) = table["entries"]
    assert [c["tiles"] for c in entry["configs"]] == [tiles(16, 32), tiles(16, 64), tiles(32, 32)]
    assert [c["ms"] for c in entry["configs"]] == [0.6, 0.75, 0.8]
    assert entry["heuristic"] == {"tiles": tiles(64, 64), "ms": 1.1}
    assert entry["gpu"] == {"name": "NVIDIA H200", "sm_count": 132} and entry["toolchain"] == CHAIN
    assert any("c5 dropped" in line and "power of two" in line for line in lines)
    assert any("1.83x the heuristic" in line for line in lines)


def test_remerge_replaces_same_gpu_and_toolchain_only():
    table = empty_table("sm_90")
    merge(table, results(SYNTHETIC))
    faster = copy.deepcopy(SYNTHETIC)
    faster[2] = (tiles(32, 32), [0.3, 0.3])
    lines = merge(table, results(faster))
    assert len(table["entries"]) == 1 and table["entries"][0]["configs"][0]["tiles"] == tiles(32, 32)
    assert "(replaced)" in lines[-1]
    merge(table, results(SYNTHETIC, gpu="NVIDIA H100 80GB HBM3"))
    merge(table, results(SYNTHETIC, chain={"triton": "3.6.0", "ptxas": "12.8", "ptx_version": 87}))
    assert len(table["entries"]) == 3


def test_nothing_timed_twice_is_not_merged():
    table = empty_table("sm_90")
    lines = merge(table, results([(tiles(64, 64), [1.0]), (tiles(16, 32), [])]))
    assert table["entries"] == [] and "nothing timed twice" in lines[0]


def test_arch_mismatch_is_refused():
    with pytest.raises(AotcError, match="sm_90, the table is sm_80"):
        merge(empty_table("sm_80"), results(SYNTHETIC))


def test_command_writes_a_table_the_compiler_reads(tmp_path, monkeypatch):
    res = tmp_path / "tune_results.json"
    res.write_text(json.dumps(results(SYNTHETIC)))
    table = tmp_path / "sm_90.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "tune_merge.py"), str(res), "--table", str(table)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "1 entries" in done.stdout
    monkeypatch.setenv("AOTC_TUNED_DIR", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = choose("matmul", key_of(lowered_linear()), "sm_90", CHAIN)
    assert got.source == EXACT and (got.tiles.block_m, got.tiles.block_n) == (16, 32)
    assert (got.ms, got.heuristic_ms) == (0.6, 1.1)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**results(SYNTHETIC), "gpu": {"name": "x", "sm_count": 0}}))
    done = subprocess.run([*cmd[:2], str(bad), "--table", str(table)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "positive sm_count" in done.stderr
