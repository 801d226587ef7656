"""scripts/ci_triton_floor.sh runs the interpreter tests under pyproject.toml's lowest Triton, and .ci/run counts them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ci_triton_floor.sh"
_spec = importlib.util.spec_from_file_location("ci_totals", ROOT / "scripts" / "ci_totals.py")
ci_totals = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ci_totals)


def test_pyproject_declares_the_one_floor_the_script_pins() -> None:
    # The script reads the first "triton>=X" in pyproject.toml (with sed) and installs triton==X.
    floors = re.findall(r'"triton>=([0-9][0-9.]*)"', (ROOT / "pyproject.toml").read_text())
    assert len(floors) == 1, floors
    assert "triton==$floor" in SCRIPT.read_text()


def test_the_script_names_test_files_that_exist() -> None:
    listed = re.search(r"^tests=\((.*?)^\)", SCRIPT.read_text(), re.S | re.M)
    assert listed is not None
    patterns = listed.group(1).split()
    assert "tests/kernel_layer/test_attention.py" in patterns
    for pattern in patterns:
        assert sorted(ROOT.glob(pattern)), f"{pattern} matches no file"


def test_ci_run_runs_the_floor_and_totals_its_log() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    call = re.search(r'^bash scripts/ci_triton_floor\.sh "(\$logs/[\w.]+)"$', run, re.M)
    assert call is not None
    totals = next(ln for ln in run.splitlines() if ln.startswith("totals=("))
    assert f'--pytest "{call.group(1)}"' in totals


def test_totals_add_two_pytest_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "main.txt").write_text("1700 passed, 3 skipped in 70.1s\n")
    (tmp_path / "floor.txt").write_text("triton 3.6.0, numpy 2.4.6\n....F\n1 failed, 369 passed in 19.6s\n")
    rc = ci_totals.main(["--pytest", str(tmp_path / "main.txt"), "--pytest", str(tmp_path / "floor.txt")])
    assert capsys.readouterr().out.strip() == "ci: 2069 passed, 1 failed, 3 skipped"
    assert rc == 1
