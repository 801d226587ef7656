"""The closing line of .ci/run totals pytest's and the ONNX node suite's counts."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ci_totals", ROOT / "scripts" / "ci_totals.py")
ci_totals = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ci_totals)


def test_pytest_summary_is_read_from_the_last_summary_line() -> None:
    text = "....s.F\n3 passed earlier text\nFAILED tests/x.py::t\n1 failed, 1700 passed, 3 skipped, 2 xfailed, 1 error in 70.1s\n"
    counts = ci_totals.pytest_counts(text)
    assert (counts["passed"], counts["failed"], counts["skipped"]) == (1700, 2, 5)


def test_no_summary_is_an_error() -> None:
    with pytest.raises(SystemExit):
        ci_totals.pytest_counts("collected 0 items\n")


def test_totals_add_the_node_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "py.txt").write_text("10 passed, 1 skipped in 1.0s\n")
    summary = {"Add": {"passed": 4, "failed": 0, "skipped": 1}, "Mul": {"passed": 2, "failed": 1, "skipped": 0}}
    (tmp_path / "node.json").write_text(json.dumps({"summary": summary, "results": []}))
    rc = ci_totals.main(["--pytest", str(tmp_path / "py.txt"), "--node-json", str(tmp_path / "node.json")])
    assert capsys.readouterr().out.strip().splitlines()[-1] == "ci: 16 passed, 1 failed, 2 skipped"
    assert rc == 1


def test_ci_run_ends_with_the_totals() -> None:
    lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip()]
    assert "scripts/ci_totals.py" in lines[-1]
