"""``aotc compile --autotune`` on a machine with no GPU, and its --tune-dim checks: one clear line each,
no traceback, no artifact written."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from aotc_cli.main import cli

MODELS = Path(__file__).resolve().parents[2] / "models"


def _compile(tmp_path: Path, *args: str):
    out = tmp_path / "m.aotc"
    result = CliRunner().invoke(cli, ["compile", str(MODELS / "mlp.py"), "-o", str(out), *args])
    assert result.exit_code != 0 and not out.exists(), result.output
    assert "Traceback" not in result.output, result.output
    return result.output


def test_tune_dim_without_autotune_sizes_the_table_lookup(tmp_path: Path) -> None:
    out = tmp_path / "m.aotc"
    result = CliRunner().invoke(
        cli, ["compile", str(MODELS / "mlp.py"), "-o", str(out), "--target", "none", "--tune-dim", "batch=8"]
    )
    assert result.exit_code == 0 and out.exists(), result.output


def test_autotune_without_a_gpu_says_what_it_needs(tmp_path: Path) -> None:
    out = _compile(tmp_path, "--autotune", "--target", "sm_80")
    assert "--autotune measures kernels on an NVIDIA GPU" in out and "compile without it" in out


def test_tune_dim_checks(tmp_path: Path) -> None:
    # without --autotune, the shape the tuned table's lookup sizes for: the model's dims are checked all the same
    assert "the model has no dim of that name" in _compile(tmp_path, "--target", "none", "--tune-dim", "nope=8")
    assert "expected NAME=VALUE" in _compile(tmp_path, "--autotune", "--target", "sm_80", "--tune-dim", "batch")
    assert "is given twice" in _compile(
        tmp_path, "--autotune", "--target", "sm_80", "--tune-dim", "batch=2", "--tune-dim", "batch=3"
    )
    assert "drop --target none" in _compile(tmp_path, "--autotune", "--target", "none")
