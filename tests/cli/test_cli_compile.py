"""Compile-stage reporting, and export of an artifact that kept no high-level graph."""

from __future__ import annotations

import time
from pathlib import Path

from click.testing import CliRunner

from aotc.artifact.writer import write_artifact
from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.types import TensorType
from aotc.lowering.pipeline import lower
from aotc.progress import StageTimer
from aotc_cli.errors import EXIT_USER
from aotc_cli.main import cli

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


def test_stage_timer_reports_only_slow_stages() -> None:
    lines: list[str] = []
    timer = StageTimer(threshold_s=0.05, echo=lines.append)
    timer("fast")
    timer("slow")
    time.sleep(0.06)
    with timer.stage("also fast"):
        pass
    timer.finish()
    assert len(lines) == 1 and lines[0].startswith("  slow... done (")
    assert set(timer.times) == {"fast", "slow", "also fast"} and timer.times["slow"] >= 0.05


def test_verbose_compile_lists_every_lowering_stage(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["compile", str(MODELS_DIR / "mlp.py"), "-o", str(tmp_path / "m.aotc"), "-v"])
    assert result.exit_code == 0, result.output
    for stage in ("load model file", "trace", "decompose", "dce", "write artifact"):
        assert f"  {stage}... done (" in result.stderr
    quiet = CliRunner().invoke(cli, ["compile", str(MODELS_DIR / "mlp.py"), "-o", str(tmp_path / "m.aotc")])
    assert quiet.stderr == "" and quiet.stdout.startswith(f"wrote {tmp_path / 'm.aotc'} (")


def test_export_needs_the_high_level_graph(tmp_path: Path) -> None:
    b = Builder()
    x = b.new_value(TensorType(DType.float32, (4,)))
    y = b.op(Op.RELU, x)
    graph = Graph((x,), ("x",), tuple(b.nodes), (y,), name="bare")
    path = tmp_path / "bare.aotc"
    path.write_bytes(write_artifact([lower(graph)], source=None, meta={}))
    result = CliRunner().invoke(cli, ["export-onnx", str(path), "-o", str(tmp_path / "bare.onnx")])
    assert result.exit_code == EXIT_USER
    assert "holds no high-level graph" in result.stderr
