"""``aotc compile FILE.onnx`` and ``aotc export-onnx`` through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner, Result
from onnx import TensorProto, helper, numpy_helper

import aotc
from aotc_cli.errors import EXIT_USER
from aotc_cli.main import cli

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
WEIGHT = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)


def invoke(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def onnx_file(tmp_path: Path) -> Path:
    """y = relu(x @ W) with x of shape (batch, 8), batch a dim_param."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(WEIGHT, "W")],
    )
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model)
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    return path


def test_compile_onnx_with_dim_ranges(onnx_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "tiny.aotc"
    result = invoke("compile", onnx_file, "--dim", "batch=1:16", "-o", out)
    assert result.exit_code == 0, result.output
    assert "batch  in [1, 16]" in invoke("inspect", out).stdout
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run = invoke("run", out, "--input", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "y.npz")
    assert run.exit_code == 0, run.output
    with np.load(tmp_path / "y.npz") as saved:
        np.testing.assert_allclose(saved["y"], np.maximum(x @ WEIGHT, 0), rtol=1e-5, atol=1e-6)
    too_big = invoke("run", out, "--random", "--dim", "batch=17")
    assert too_big.exit_code == EXIT_USER and "--dim batch=17 is outside the range of batch: [1, 16]" in too_big.stderr


def test_a_dim_without_a_range_warns_once_and_inspect_names_the_dim_the_arena_grows_with(tmp_path: Path) -> None:
    """relu(softmax(x[batch, seq, 16] @ W) @ W): the matmul-softmax-matmul fuses into one kernel whose output, batch*seq
    rows of 16 floats, lives in the arena until the relu reads it."""
    w = np.eye(16, dtype=np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"]),
        helper.make_node("Softmax", ["a"], ["b"], axis=-1),
        helper.make_node("MatMul", ["b", "W"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])],
        [numpy_helper.from_array(w, "W")],
    )
    path = tmp_path / "rows.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    out = tmp_path / "rows.aotc"
    result = invoke("compile", path, "--dim", "batch=1:8", "-o", out)
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [
        "warning: graph input dim 'seq' has no range: it defaults to [1, 65536], which sizes the memory plan for "
        "65536; give its real range with --dim seq=MIN:MAX (import_onnx(..., dims={'seq': (MIN, MAX)}))"
    ]
    text = invoke("inspect", out).stdout
    # seq dominates: 65536 rows of 16 floats (4 MiB) per buffer against batch's 8
    (line,) = [x for x in text.splitlines() if "with one dim at its maximum" in x]
    assert line.index("seq=65536") < line.index("batch=8"), line
    info = json.loads(invoke("inspect", out, "--json").stdout)
    assert list(info["arena_by_dim"]) == ["seq", "batch"] and info["arena_by_dim"]["seq"] >= 65536 * 16 * 4
    quiet = invoke("compile", path, "--dim", "batch=1:8", "--dim", "seq=1:128", "-o", out)
    assert quiet.exit_code == 0 and "warning:" not in quiet.stderr, quiet.output


def test_compile_onnx_rejects_unknown_dim(onnx_file: Path, tmp_path: Path) -> None:
    result = invoke("compile", onnx_file, "--dim", "seq=1:8", "-o", tmp_path / "t.aotc")
    assert result.exit_code == EXIT_USER
    assert "no dynamic dim 'seq'" in result.stderr and "batch" in result.stderr


def test_compile_invalid_onnx_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x08\x07junk" * 50)
    result = invoke("compile", path, "-o", tmp_path / "j.aotc")
    assert result.exit_code == EXIT_USER and "Traceback" not in result.stderr
    assert "junk.onnx" in result.stderr


def test_malformed_onnx_graph_is_a_user_error(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")  # initializer 'w' is missing
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "missing.onnx"
    onnx.save(model, path)
    result = invoke("compile", path, "-o", tmp_path / "m.aotc")
    assert result.exit_code == EXIT_USER and "Traceback" not in result.stderr
    assert "\nerror: " in "\n" + result.stderr and "'w'" in result.stderr and "proj" in result.stderr


def test_export_onnx_from_model_file_and_artifact(tmp_path: Path) -> None:
    art = tmp_path / "mlp.aotc"
    assert invoke("compile", MODELS_DIR / "mlp.py", "-o", art).exit_code == 0
    x = np.random.default_rng(2).standard_normal((3, 32)).astype(np.float32)
    expected = aotc.load(art, device="cpu")(x=x)
    for source, name in ((MODELS_DIR / "mlp.py", "from_file.onnx"), (art, "from_artifact.onnx")):
        out = tmp_path / name
        result = invoke("export-onnx", source, "-o", out)
        assert result.exit_code == 0, result.output
        onnx.checker.check_model(onnx.load(out))
        session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        (got,) = session.run(None, {"x": x})
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # and back: the exported file compiles again, keeping the batch dim dynamic
    back = tmp_path / "back.aotc"
    assert invoke("compile", tmp_path / "from_artifact.onnx", "-o", back).exit_code == 0
    np.testing.assert_allclose(aotc.load(back, device="cpu").run({"x": x})[0], expected, rtol=1e-4, atol=1e-5)
