"""Error paths of the ``aotc`` command: one clear line on stderr and the documented exit code."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import aotc_cli.compile_cmd
from aotc_cli.errors import EXIT_INTERNAL, EXIT_USAGE, EXIT_USER
from aotc_cli.main import cli


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_one_line_error(result: Result, code: int, *needles: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr
    assert result.stdout == ""


def test_help_lists_commands() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("compile", "run", "inspect", "export-onnx"):
        assert command in result.stdout


@pytest.mark.parametrize("command", [["compile"], ["run"], ["inspect"], ["export-onnx", "-o", "x.onnx"]])
def test_missing_file_is_a_user_error(command: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "missing.py"
    result = invoke(*command, missing)
    assert_one_line_error(result, EXIT_USER, "no such file", "missing.py")


def test_unknown_option_is_a_usage_error() -> None:
    result = invoke("compile", "--frobnicate", "x.py")
    assert result.exit_code == EXIT_USAGE


@pytest.mark.parametrize("dim", ["seq", "seq=", "=3", "seq=abc", "seq=1:x", "seq=5:2", "seq=-1:4", "seq=1:" + "9" * 30])
def test_malformed_dim_is_a_usage_error(dim: str, tmp_path: Path) -> None:
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"")
    result = invoke("compile", onnx_file, "--dim", dim)
    assert result.exit_code == EXIT_USAGE
    assert "--dim" in result.stderr


def test_repeated_dim_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("run", tmp_path / "a.aotc", "--dim", "seq=3", "--dim", "seq=4")
    assert result.exit_code == EXIT_USAGE


def test_wrong_file_kind(tmp_path: Path) -> None:
    path = tmp_path / "model.txt"
    path.write_text("hello")
    assert_one_line_error(invoke("compile", path), EXIT_USER, "expected a Python model file")


def test_file_without_model_or_build(tmp_path: Path) -> None:
    path = tmp_path / "empty.py"
    path.write_text("x = 1\n")
    assert_one_line_error(invoke("compile", path), EXIT_USER, "defines neither build() nor `model` and `inputs`")


def test_file_with_model_but_no_inputs(tmp_path: Path) -> None:
    path = tmp_path / "half.py"
    path.write_text("def model(x):\n    return x\n")
    assert_one_line_error(invoke("compile", path), EXIT_USER, "no `inputs`")


def test_exception_while_importing_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import math\n\nraise ValueError('bad config')\n")
    assert_one_line_error(invoke("compile", path), EXIT_USER, "ValueError: bad config", "broken.py:3")


def test_syntax_error_in_model_file(tmp_path: Path) -> None:
    path = tmp_path / "syntax.py"
    path.write_text("def build(:\n")
    assert_one_line_error(invoke("compile", path), EXIT_USER, "syntax error", "syntax.py:1")


def test_build_with_wrong_return(tmp_path: Path) -> None:
    path = tmp_path / "wrong.py"
    path.write_text("def build():\n    return 42\n")
    assert_one_line_error(invoke("compile", path), EXIT_USER, "must return (model, inputs)")


def test_build_with_required_arguments(tmp_path: Path) -> None:
    path = tmp_path / "args.py"
    path.write_text("def build(width):\n    return None, {}\n")
    assert_one_line_error(invoke("compile", path), EXIT_USER, "no required arguments", "width")


def test_model_flag_names_missing_attribute(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def build():\n    return None, {}\n")
    assert_one_line_error(invoke("compile", path, "--model", "encoder"), EXIT_USER, "no attribute `encoder`")


def test_dim_option_is_for_onnx_only(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("x = 1\n")
    assert_one_line_error(invoke("compile", path, "--dim", "batch=1:4"), EXIT_USER, "--dim applies to ONNX files")


def test_internal_error_exit_code_and_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*_args: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(aotc_cli.compile_cmd, "load_model", explode)
    path = tmp_path / "m.py"
    path.write_text("x = 1\n")
    result = invoke("compile", path)
    assert result.exit_code == EXIT_INTERNAL
    assert "internal error: RuntimeError: kaboom" in result.stderr
    assert "--debug" in result.stderr and "Traceback" not in result.stderr
    for args in (["--debug", "compile", path], ["compile", path, "--debug"]):
        debug = invoke(*args)
        assert debug.exit_code == EXIT_INTERNAL
        assert "Traceback" in debug.stderr and "kaboom" in debug.stderr


def test_debug_shows_traceback_for_user_errors_too(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("raise ValueError('bad config')\n")
    result = invoke("--debug", "compile", path)
    assert result.exit_code == EXIT_USER
    assert "Traceback" in result.stderr and "bad config" in result.stderr


def test_corrupted_artifact_is_an_artifact_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.aotc"
    path.write_bytes(b"this is not an artifact" * 100)
    for command in ("run", "inspect"):
        args = [command, path] + (["--random"] if command == "run" else [])
        assert_one_line_error(invoke(*args), EXIT_USER, "invalid artifact")


def test_exception_in_forward_is_the_users(tmp_path: Path) -> None:
    path = tmp_path / "fwd.py"
    path.write_text(
        "from aotc import Dim, TensorSpec\n"
        "def model(x):\n"
        "    return x.frobnicate()\n"
        "inputs = {'x': TensorSpec((Dim('b', min=1, max=4), 3), 'float32')}\n"
    )
    for command in (["compile", path], ["export-onnx", path, "-o", tmp_path / "f.onnx"]):
        result = invoke(*command)
        assert_one_line_error(result, EXIT_USER, "tracing the model raised AttributeError", "fwd.py:3")


def test_trace_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "shape.py"
    path.write_text(
        "from aotc import Dim, TensorSpec\n"
        "def model(x):\n"
        "    return x.reshape(5, 7)\n"
        "inputs = {'x': TensorSpec((Dim('b', min=1, max=4), 3), 'float32')}\n"
    )
    assert_one_line_error(invoke("compile", path), EXIT_USER, "changes the element count", "shape.py:3")


def test_bad_inputs_value(tmp_path: Path) -> None:
    path = tmp_path / "specs.py"
    path.write_text("def model(x):\n    return x\ninputs = {'x': (4, 3)}\n")
    assert_one_line_error(invoke("compile", path), EXIT_USER, "must be an aotc.TensorSpec")


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ('aotc.Dim("seq", min=10, max=2)', "Dim 'seq' needs 0 <= min <= max, got min=10, max=2"),
        ('aotc.TensorSpec((2, 3), "float33")', "TensorSpec dtype:"),
    ],
)
def test_a_bad_spec_names_the_model_files_line(spec: str, said: str, tmp_path: Path) -> None:
    model = tmp_path / "bad_spec.py"
    model.write_text(
        "import aotc\n\n\ndef f(x):\n    return x\n\n\ndef build():\n"
        f"    spec = {spec}\n"
        '    return f, {"x": aotc.TensorSpec((2, 3))}\n'
    )
    result = invoke("compile", model, "--target", "none", "-o", tmp_path / "m.aotc")
    assert_one_line_error(result, EXIT_USER, f"bad_spec.py:9: {said}")
