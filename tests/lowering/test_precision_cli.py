"""`aotc compile --precision` and `--no-matmul-padding`: the flags reach the compile options and the artifact."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from aotc.artifact.reader import read_artifact
from aotc_cli.main import cli

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(autouse=True)
def _no_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    # These tests are about lowering; generated kernels are tested in tests/kernel_layer.
    monkeypatch.setenv("AOTC_NO_KERNELS", "1")


def _compile(tmp_path: Path, *flags: str) -> Result:
    return CliRunner().invoke(cli, ["compile", str(MODELS / "mlp.py"), "-o", str(tmp_path / "m.aotc"), *flags])


def test_precision_flag_stores_half_weights(tmp_path: Path) -> None:
    full = _compile(tmp_path)
    assert full.exit_code == 0, full.output
    full_art = read_artifact(tmp_path / "m.aotc")
    half = _compile(tmp_path, "--precision", "bf16")
    assert half.exit_code == 0, half.output
    art = read_artifact(tmp_path / "m.aotc")
    assert art.meta["options"]["precision"] == "bf16" and full_art.meta["options"]["precision"] == "fp32"
    assert {a.dtype.name for a in art.constants.values() if a.ndim == 2} == {"bfloat16"}
    assert art.weight_bytes < 0.6 * full_art.weight_bytes


def test_bad_precision_is_a_usage_error(tmp_path: Path) -> None:
    result = _compile(tmp_path, "--precision", "int8")
    assert result.exit_code == 2
    assert "'int8' is not one of 'fp32', 'tf32', 'tf32x3', 'bf16', 'fp16'" in result.output
    assert not (tmp_path / "m.aotc").exists()


ODD_MODEL = """
import numpy as np
from aotc import Dim, TensorSpec, nn

model = nn.Linear(1001, 999)
model.load_state_dict({"weight": np.ones((999, 1001), np.float32), "bias": np.zeros(999, np.float32)})
inputs = {"x": TensorSpec((Dim("batch", min=1, max=64), 1001), "float32")}
"""


def test_no_matmul_padding_flag(tmp_path: Path) -> None:
    src = tmp_path / "odd.py"
    src.write_text(ODD_MODEL)
    shapes = {}
    for flags in ((), ("--no-matmul-padding",)):
        result = CliRunner().invoke(cli, ["compile", str(src), "-o", str(tmp_path / "odd.aotc"), *flags])
        assert result.exit_code == 0, result.output
        art = read_artifact(tmp_path / "odd.aotc")
        assert art.meta["options"]["matmul_padding"] is not bool(flags)
        shapes[flags] = art.constants["weight"].shape
    # K 1001 -> 1004; N stays 999: the Linear's result (its bias add) is the model output, stored unpadded.
    assert shapes == {(): (999, 1004), ("--no-matmul-padding",): (999, 1001)}
