"""The ``aotc`` command end to end on every example model (CliRunner), plus the installed script
run for real in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

import aotc
from aotc_cli.errors import EXIT_USER
from aotc_cli.loader import load_model
from aotc_cli.main import cli

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
# A model that keeps state (gpt2_decode.py) has its own CLI test, tests/cli/test_cli_generate.py.
MODEL_FILES = sorted(p for p in MODELS_DIR.glob("*.py") if "self.state(" not in p.read_text())


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def ok(*args: Any) -> Result:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every example model compiled once through the CLI."""
    out_dir = tmp_path_factory.mktemp("artifacts")
    paths = {}
    for file in MODEL_FILES:
        out = out_dir / f"{file.stem}.aotc"
        result = ok("compile", file, "-o", out)
        assert f"wrote {out}" in result.stdout
        paths[file.stem] = out
    return paths


def test_every_model_file_is_covered() -> None:
    assert {f.stem for f in MODEL_FILES} == {"mlp", "gpt2", "bert", "lstm_ensemble", "cnn"}


@pytest.mark.parametrize("name", [f.stem for f in MODEL_FILES])
def test_run_random_and_inspect(name: str, artifacts: dict[str, Path]) -> None:
    path = artifacts[name]
    run = ok("run", path, "--random")
    assert "output" in run.stdout and "float32" in run.stdout
    text = ok("inspect", path).stdout
    info = json.loads(ok("inspect", path, "--json").stdout)
    assert isinstance(info, dict) and info
    _, inputs = load_model(MODELS_DIR / f"{name}.py")
    for input_name in inputs:
        assert input_name in text and input_name in json.dumps(info)


def test_run_random_respects_dims_and_writes_npz(artifacts: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.npz"
    result = ok("run", artifacts["gpt2"], "--random", "--dim", "batch=2", "--dim", "seq=5", "--seed", "3", "-o", out)
    assert "batch=2" in result.stdout and "seq=5" in result.stdout
    with np.load(out) as saved:
        logits = saved["output"]
    assert logits.shape == (2, 5, 512) and logits.dtype == np.float32
    again = tmp_path / "again.npz"
    ok("run", artifacts["gpt2"], "--random", "--dim", "batch=2", "--dim", "seq=5", "--seed", "3", "-o", again)
    with np.load(again) as saved:
        np.testing.assert_array_equal(saved["output"], logits)


def test_run_with_input_files_matches_python_api(artifacts: dict[str, Path], tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 512, (2, 6)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 4:] = 0
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "mask.npy", mask)
    out = tmp_path / "bert.npz"
    ok(
        "run",
        artifacts["bert"],
        "--input",
        f"input_ids={tmp_path / 'ids.npy'}",
        "--input",
        f"attention_mask={tmp_path / 'mask.npy'}",
        "-o",
        out,
    )
    expected = aotc.load(artifacts["bert"], device="cpu")(input_ids=ids, attention_mask=mask)
    with np.load(out) as saved:
        assert set(saved.files) == {"last_hidden_state", "pooler_output"}
        for key in saved.files:
            np.testing.assert_array_equal(saved[key], expected[key])


def test_run_partly_from_file_binds_dims(artifacts: dict[str, Path], tmp_path: Path) -> None:
    np.save(tmp_path / "ids.npy", np.zeros((3, 9), np.int64))
    result = ok("run", artifacts["bert"], "--input", f"input_ids={tmp_path / 'ids.npy'}", "--random")
    assert "batch=3" in result.stdout and "seq=9" in result.stdout


def test_run_errors(artifacts: dict[str, Path], tmp_path: Path) -> None:
    gpt2 = artifacts["gpt2"]
    missing = invoke("run", gpt2)
    assert missing.exit_code == EXIT_USER and "--random" in missing.stderr
    unknown_dim = invoke("run", gpt2, "--random", "--dim", "heads=2")
    assert unknown_dim.exit_code == EXIT_USER and "unknown dim 'heads'" in unknown_dim.stderr
    assert "batch" in unknown_dim.stderr and "seq" in unknown_dim.stderr
    too_long = invoke("run", gpt2, "--random", "--dim", "seq=4096")
    assert too_long.exit_code == EXIT_USER and "--dim seq=4096 is outside the range of seq: [1, 128]" in too_long.stderr
    unknown_input = invoke("run", gpt2, "--input", f"tokens={tmp_path / 'x.npy'}")
    assert unknown_input.exit_code == EXIT_USER and "unknown input 'tokens'" in unknown_input.stderr
    bad_npy = tmp_path / "bad.npy"
    bad_npy.write_text("not numpy")
    unreadable = invoke("run", gpt2, "--input", f"input_ids={bad_npy}")
    assert unreadable.exit_code == EXIT_USER and "cannot read" in unreadable.stderr


def test_truncated_artifact_is_an_artifact_error(artifacts: dict[str, Path], tmp_path: Path) -> None:
    data = artifacts["mlp"].read_bytes()
    cut = tmp_path / "cut.aotc"
    cut.write_bytes(data[: len(data) // 2])
    flipped = tmp_path / "flipped.aotc"
    flipped.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    for path in (cut, flipped):
        result = invoke("inspect", path)
        assert result.exit_code == EXIT_USER and result.stderr.startswith("error: invalid artifact")
        assert "Traceback" not in result.stderr


def test_default_output_path_and_dump_ir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ok("compile", MODELS_DIR / "mlp.py", "--dump-ir", "ir")
    assert (tmp_path / "mlp.aotc").is_file()
    dumps = sorted(p.name for p in (tmp_path / "ir").iterdir())
    assert dumps and any("decompose" in d for d in dumps)


def test_model_flag_with_inputs_pair_and_builder(tmp_path: Path) -> None:
    path = tmp_path / "two.py"
    path.write_text(
        "from aotc import Dim, TensorSpec\n"
        "def double(x):\n    return x * 2.0\n"
        "double_inputs = {'x': TensorSpec((Dim('n', min=1, max=8),), 'float32')}\n"
        "def make_square():\n    return (lambda x: x * x), {'x': TensorSpec((3,), 'float32')}\n"
    )
    for name, expect in (("double", [2.0, 4.0]), ("make_square", [1.0, 4.0, 9.0])):
        out = tmp_path / f"{name}.aotc"
        ok("compile", path, "--model", name, "-o", out)
        x = np.arange(1, len(expect) + 1, dtype=np.float32)
        np.testing.assert_array_equal(aotc.load(out, device="cpu")(x=x), np.array(expect, np.float32))


def test_installed_script_in_a_subprocess(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("aotc")
    assert script.is_file(), "the aotc console script is not installed next to this Python"
    out = tmp_path / "mlp.aotc"
    subprocess.run([script, "compile", MODELS_DIR / "mlp.py", "-o", out], check=True, capture_output=True)
    run = subprocess.run([script, "run", out, "--random", "--dim", "batch=3"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "(3, 10)" in run.stdout
    info = subprocess.run([script, "inspect", out, "--json"], capture_output=True, text=True, check=True)
    assert "x" in json.loads(info.stdout)["inputs"].__repr__()
    missing = subprocess.run([script, "run", tmp_path / "nope.aotc"], capture_output=True, text=True)
    assert missing.returncode == EXIT_USER
    assert missing.stderr.strip().splitlines() == [f"error: no such file: {tmp_path / 'nope.aotc'}"]
