"""``aotc`` checks what it can before doing slow or large work: --dim values against their ranges and the guards
before any input is built, output paths before the model runs, files that are directories, and model files that
call sys.exit. Each failure is one line on stderr and exit 1."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result
from graph_kit import make_graph

import aotc_cli.feeds
from aotc.artifact.writer import write_artifact
from aotc.ir import DType, Guard, Op, Symbol, TensorType, sym
from aotc.lowering.pipeline import lower
from aotc.runtime.executable import Executable
from aotc_cli.errors import EXIT_USER
from aotc_cli.feeds import random_array
from aotc_cli.main import cli

MODEL = (
    "from aotc import TensorSpec\n\ndef model(x):\n    return x * 2.0\n\ninputs = {'x': TensorSpec((3,), 'float32')}\n"
)


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def user_error(result: Result, *needles: str) -> None:
    assert result.exit_code == EXIT_USER, (result.exit_code, result.output)
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    """tokens (batch, seq) int64 and x (batch, seq, 4) float16, batch in [1, 64], seq in [2, 32] even, seq >= 4."""
    batch, seq = sym("batch"), sym("seq")

    def body(b, tokens, x):
        return [b.op(Op.ADD, b.cast(tokens, DType.float16), x)]

    graph = make_graph(
        {"tokens": TensorType(DType.int64, (batch, seq, 4)), "x": TensorType(DType.float16, (batch, seq, 4))},
        body,
        symbols=(Symbol("batch", 1, 64), Symbol("seq", 2, 32, multiple_of=2)),
        guards=(Guard(seq, ">=", 4, "model.py:3"),),
    )
    path = tmp_path / "m.aotc"
    path.write_bytes(write_artifact([lower(graph)], source=graph))
    return path


@pytest.fixture
def no_inputs_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any) -> None:
        raise AssertionError("a random input was built before the dims were checked")

    monkeypatch.setattr(aotc_cli.feeds, "random_array", refuse)


@pytest.mark.parametrize(
    ("dim", "message"),
    [
        ("batch=1000000000000", "--dim batch=1000000000000 is outside the range of batch: [1, 64]"),
        ("batch=-1", "--dim batch=-1 is outside the range of batch: [1, 64]"),
        ("batch=0", "--dim batch=0 is outside the range of batch: [1, 64]"),
        ("batch=" + "9" * 30, f"--dim batch={'9' * 30} is outside the range of batch: [1, 64]"),
        ("seq=7", "--dim seq=7 is not a multiple of 2; seq takes [2, 32], a multiple of 2"),
        ("seq=34", "--dim seq=34 is outside the range of seq: [2, 32], a multiple of 2"),
    ],
)
def test_bad_dim_values_exit_1_with_the_range(artifact: Path, no_inputs_built: None, dim: str, message: str) -> None:
    user_error(invoke("run", artifact, "--random", "--dim", dim), message)


def test_guards_are_checked_before_inputs_are_built(artifact: Path, no_inputs_built: None) -> None:
    result = invoke("run", artifact, "--random", "--dim", "seq=2")
    user_error(result, "error: input 'tokens' dim 1 (seq) = 2 breaks guard seq >= 4 (recorded at model.py:3)")


def test_input_files_are_checked_with_the_guards_before_random_inputs(
    artifact: Path, no_inputs_built: None, tmp_path: Path
) -> None:
    np.save(tmp_path / "t.npy", np.zeros((2, 6), np.int64))
    result = invoke("run", artifact, "--random", "--input", f"tokens={tmp_path / 't.npy'}")
    user_error(result, "input 'tokens' has shape (2, 6) (rank 2), expected rank 3: (batch, seq, 4)")


def test_inputs_too_large_for_memory_are_a_user_error(artifact: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def out_of_memory(*_args: Any) -> None:
        raise MemoryError

    monkeypatch.setattr(aotc_cli.feeds, "random_array", out_of_memory)
    result = invoke("run", artifact, "--random", "--dim", "batch=64", "--dim", "seq=32")
    user_error(result, "random input 'tokens' of shape (64, 32, 4) (int64) needs 64.0 KiB", "smaller --dim values")


@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.int64, DType.bool])
def test_random_inputs_are_drawn_in_their_dtype_without_a_float64_copy(dtype: DType) -> None:
    shape = (1 << 21,)  # 2 Mi elements: a float64 temporary would be 16 MiB
    tracemalloc.start()
    try:
        a = random_array(np.random.default_rng(0), dtype, shape)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert a.dtype == dtype.np and a.shape == shape
    # a float64 temporary alone would be 16 MiB; a float32 chunk and its cast buffer fit in 8 MiB
    assert peak <= a.nbytes + (8 << 20), f"peak {peak} bytes for a {a.nbytes}-byte {dtype.value} input"
    if dtype.is_float:
        assert abs(float(a.astype(np.float32).std()) - 1.0) < 0.01 and np.isfinite(a.astype(np.float32)).all()


# -- output paths -------------------------------------------------------------------------------------------------


@pytest.fixture
def never_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any) -> None:
        raise AssertionError("the model ran although the output path is bad")

    monkeypatch.setattr(Executable, "run", refuse)


@pytest.mark.parametrize(
    ("out", "message"),
    [("missing/out.npz", "-o {out}: folder {parent} does not exist"), (".", "-o {out} is a directory")],
)
def test_run_checks_the_output_path_first(
    artifact: Path, never_run: None, tmp_path: Path, out: str, message: str
) -> None:
    target = tmp_path / out
    result = invoke("run", artifact, "--random", "-o", target)
    user_error(result, message.format(out=target, parent=target.parent))


def test_run_writes_exactly_the_path_given(artifact: Path, tmp_path: Path) -> None:
    target = tmp_path / "outputs"  # no .npz suffix: np.savez alone would write outputs.npz
    result = invoke("run", artifact, "--random", "-o", target)
    assert result.exit_code == 0, result.output
    with np.load(target) as saved:
        assert saved["0"].shape == (8, 8, 4) and saved["0"].dtype == np.float16


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_folder(artifact: Path, never_run: None, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    user_error(invoke("run", artifact, "--random", "-o", locked / "o.npz"), "is not writable")


def test_compile_and_export_check_the_output_path_before_loading_the_model(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    model = tmp_path / "m.py"
    model.write_text(f"open({str(marker)!r}, 'w').close()\n" + MODEL)
    bad = tmp_path / "missing" / "out"
    user_error(invoke("compile", model, "-o", bad), f"-o {bad}: folder {bad.parent} does not exist")
    user_error(invoke("export-onnx", model, "-o", tmp_path), f"-o {tmp_path} is a directory")
    assert not marker.exists()


# -- files that are directories, model files that exit ------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["run"],
        ["compile"],
        ["inspect"],
        ["export-onnx", "-o", "x.onnx"],
        ["run", "ARTIFACT", "--random", "--input", "tokens="],
    ],
)
def test_a_directory_where_a_file_is_expected(command: list[str], artifact: Path, tmp_path: Path) -> None:
    args = [str(artifact) if c == "ARTIFACT" else c for c in command]
    if args[-1].endswith("="):
        args[-1] += str(tmp_path)
        expected = f"--input tokens: {tmp_path} is a directory, expected a file"
    else:
        args.append(str(tmp_path))
        expected = f"error: {tmp_path} is a directory, expected a file"
    user_error(invoke(*args), expected)


@pytest.mark.parametrize(
    ("source", "call"),
    [
        ("import sys\nsys.exit(7)\n", "importing m.py called sys.exit(7) (at {path}:2)"),
        ("import sys\ndef build():\n    sys.exit()\n", "build() called sys.exit(None) (at {path}:3)"),
        (
            MODEL.replace("return x * 2.0", "raise SystemExit('bye')"),
            "tracing the model called sys.exit('bye') (at {path}:4)",
        ),
    ],
)
def test_a_model_file_that_exits_is_a_user_error(tmp_path: Path, source: str, call: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    result = invoke("compile", path, "-o", tmp_path / "m.aotc")
    user_error(result, call.format(path=path), "a model file must define the model, not exit")
