"""`aotc compile --cuda-driver-floor` picks the ptxas and PTX version of each target, the artifact records the
floor and the toolchain, and `aotc inspect` shows both (text and --json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from aotc_cli.main import cli

pytest.importorskip("triton")

MODEL = """
from aotc import Dim, TensorSpec, nn

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
inputs = {"x": TensorSpec((Dim("batch", min=1, max=8), 16), "float32")}
"""


def _compile(tmp_path: Path, *flags: str) -> tuple[int, str, Path]:
    src, out = tmp_path / "small.py", tmp_path / "small.aotc"
    src.write_text(MODEL)
    result = CliRunner().invoke(cli, ["compile", str(src), "-o", str(out), "--target", "sm_90", *flags])
    return result.exit_code, result.output, out


def test_the_default_floor_is_recorded_and_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path / "cache"))
    code, output, out = _compile(tmp_path)
    assert code == 0, output
    text = CliRunner().invoke(cli, ["inspect", str(out)]).output
    assert "driver     loads on CUDA drivers 12.4 and newer" in text
    assert "sm_90 cubin PTX 8.4 (ptxas 12." in text and "portable PTX 8.4" in text
    info = json.loads(CliRunner().invoke(cli, ["inspect", str(out), "--json"]).output)
    assert info["toolchain"]["cuda_driver_floor"] == "12.4"
    assert info["toolchain"]["images"]["sm_90 cubin"][0]["ptx"] == "8.4"


def test_another_floor_changes_the_ptx_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path / "cache"))
    code, output, out = _compile(tmp_path, "--cuda-driver-floor", "12.1")
    assert code == 0, output
    info = json.loads(CliRunner().invoke(cli, ["inspect", str(out), "--json"]).output)
    assert info["toolchain"]["cuda_driver_floor"] == "12.1"
    assert {i["ptx"] for imgs in info["toolchain"]["images"].values() for i in imgs} == {"8.1"}


@pytest.mark.parametrize(
    ("value", "message"),
    [("twelve", "MAJOR.MINOR such as '12.4', got 'twelve'"), ("11.8", "below the oldest aotc can build for")],
)
def test_a_bad_floor_is_a_user_error(tmp_path: Path, value: str, message: str) -> None:
    code, output, _ = _compile(tmp_path, "--cuda-driver-floor", value)
    assert code == 1 and "--cuda-driver-floor" in output and message in output, output
