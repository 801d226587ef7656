"""The GPU check's helpers that only run on the lent machine: the wheel installer's choice of what the image
lacks, and the report's serving section (issue 17's two aims read off bench_serve.py's rows)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wheels_the_image_lacks_are_chosen(tmp_path: Path) -> None:
    gpu_wheels = _script("gpu_wheels")
    for name in ("numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl", "aotc_no_such_dist-1.0-py3-none-any.whl",
                 "Python_Rapidjson_Not_Here-1.25-cp312-cp312-manylinux_2_28_x86_64.whl", "notes.txt"):  # fmt: skip
        (tmp_path / name).write_bytes(b"")
    chosen = [Path(p).name for p in gpu_wheels.missing(tmp_path)]
    assert chosen == ["Python_Rapidjson_Not_Here-1.25-cp312-cp312-manylinux_2_28_x86_64.whl",
                      "aotc_no_such_dist-1.0-py3-none-any.whl"]  # fmt: skip


def _row(mode: str, concurrency: int, rps: float, p50: float, direct_p50: float | None) -> dict[str, object]:
    return dict(bench="serve", model="bert", device="cuda", mode=mode, concurrency=concurrency, requests=100,
                req_per_s=rps, p50_ms=p50, p99_ms=p50 * 2, cpu_ms_per_req=0.5, direct_p50_ms=direct_p50)  # fmt: skip


def test_serving_section_reads_the_aims() -> None:
    gpu_report = _script("gpu_report")
    lines = gpu_report.serve_section(
        [
            _row("direct", 1, 5000.0, 0.2, None),
            _row("serve, batching off", 1, 1000.0, 0.9, 0.2),
            _row("direct", 64, 9000.0, 7.0, None),
            _row("serve, batching off", 64, 1200.0, 50.0, 7.0),
            _row("serve, batching on", 64, 4200.0, 15.0, 7.0),
        ]
    )
    text = "\n".join(lines)
    assert "- bert: the server adds 0.70 ms p50 at concurrency 1 (aim <= 1 ms)" in text
    assert "- bert: batching gives 3.50x the throughput at concurrency 64 (aim >= 3x, BERT)" in text
    assert gpu_report.serve_section([]) == []


def test_tune_section_reads_the_results(tmp_path: Path) -> None:
    import json

    gpu_report = _script("gpu_report")
    assert gpu_report.tune_section(tmp_path / "none.json") == []
    cand = [{"name": "h", "tiles": {"block_m": 64}, "heuristic": True, "ms": [2.0, 2.2]},
            {"name": "c", "tiles": {"block_m": 128}, "heuristic": False, "ms": [1.0, 1.1]},
            {"name": "x", "tiles": {"block_m": 16}, "heuristic": False, "error": "load: refused"}]  # fmt: skip
    path = tmp_path / "tune_results.json"
    path.write_text(json.dumps({"gpu": {"name": "NVIDIA H200", "sm_count": 132}, "elapsed_s": 70.5,
                                "keys": [{"label": "mm", "candidates": cand}]}))  # fmt: skip
    text = "\n".join(gpu_report.tune_section(path))
    assert "## Tune (NVIDIA H200, 132 SMs, 70.5 s)" in text
    assert "| mm | 2 | 1 | 2.1 | 1.05 | 2 | block_m=128 |" in text
