"""`aotc inspect` shows what the matmul padding pass padded: the compile records its --explain 'padded:' lines
in the artifact's meta, and inspect prints them under 'matmul padding' (and in --json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from aotc_cli.main import cli

# Linear(1000, 999) + bias + relu, then Linear(999, 1000): N 999 -> 1000 on the first, K 999 -> 1000 on the second.
MODEL = """
from aotc import Dim, TensorSpec, nn

model = nn.Sequential(nn.Linear(1000, 999), nn.ReLU(), nn.Linear(999, 1000))
inputs = {"x": TensorSpec((Dim("batch", min=1, max=64), 1000), "float32")}
"""


@pytest.fixture(autouse=True)
def _no_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    # The padding is a lowering decision: kernels add nothing to what inspect shows of it.
    monkeypatch.setenv("AOTC_NO_KERNELS", "1")


def _compile(tmp_path: Path, *flags: str) -> tuple[Path, str]:
    """The artifact's path, and what `compile --explain` printed."""
    src, out = tmp_path / "linear.py", tmp_path / "linear.aotc"
    src.write_text(MODEL)
    result = CliRunner().invoke(cli, ["compile", str(src), "-o", str(out), "--explain", *flags])
    assert result.exit_code == 0, result.output
    return out, result.stdout


def _inspect(path: Path, *flags: str) -> str:
    result = CliRunner().invoke(cli, ["inspect", str(path), *flags])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_inspect_shows_the_padded_matmuls(tmp_path: Path) -> None:
    path, explained = _compile(tmp_path)
    padded = [line.strip().removeprefix("- ") for line in explained.splitlines() if "- padded: " in line]
    assert len(padded) == 2 and "N 999 -> 1000" in padded[0] and "K 999 -> 1000" in padded[1]
    text = _inspect(path).splitlines()
    at = text.index("matmul padding")
    assert [line.strip() for line in text[at + 1 : at + 3]] == padded
    assert "padded_matmuls" not in "\n".join(text)  # shown once, under its heading, not again as meta JSON
    assert json.loads(_inspect(path, "--json"))["meta"]["padded_matmuls"] == padded


def test_no_matmul_padding_shows_none(tmp_path: Path) -> None:
    path, explained = _compile(tmp_path, "--no-matmul-padding")
    assert "padded: " not in explained
    text = _inspect(path)
    assert "matmul padding" not in text and "padded: " not in text
    assert "padded_matmuls" not in json.loads(_inspect(path, "--json"))["meta"]
