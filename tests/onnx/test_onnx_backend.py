"""The onnx.backend adapter, the node-test script (quick subset) and the lazy ``aotc.onnx`` package."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import GuardError, UnsupportedError
from aotc.onnx_backend import AotcBackend, SpecializingRep

ROOT = Path(__file__).resolve().parents[2]
F = TensorProto.FLOAT


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("onnx_node_tests", ROOT / "scripts" / "onnx_node_tests.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def gemm_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    nodes = [helper.make_node("Gemm", ["x", "w"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["n", 3])],
        [helper.make_tensor_value_info("y", F, ["n", 4])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_prepare_and_run_with_list_dict_or_array() -> None:
    rep = AotcBackend.prepare(gemm_model())
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    want = np.maximum(x @ (np.arange(12, dtype=np.float32).reshape(4, 3) / 10).T, 0)
    for inputs in ([x], {"x": x}, x):
        (y,) = rep.run(inputs)
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(GuardError, match="input 'x' has dtype int64"):
        rep.run([x.astype(np.int64)])
    with pytest.raises(GuardError, match="outside"):
        rep.run([np.zeros((0, 3), np.float32)])
    assert AotcBackend.supports_device("CPU") and not AotcBackend.supports_device("CUDA")


def test_run_node() -> None:
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)
    x = np.array([[-2.0, 3.0]], np.float32)
    (y,) = AotcBackend.run_node(node, [x])
    np.testing.assert_allclose(y, [[-0.2, 3.0]], rtol=1e-6)


def test_shape_inputs_specialize_per_value() -> None:
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "r",
        [helper.make_tensor_value_info("x", F, [2, 6]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", F, None)],
    )
    rep = AotcBackend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]))
    assert isinstance(rep, SpecializingRep)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    assert rep.run([x, np.array([3, 4])])[0].shape == (3, 4)
    assert rep.run([x, np.array([-1, 2])])[0].shape == (6, 2)
    np.testing.assert_array_equal(rep.run({"x": x, "shape": np.array([12, 1])})[0], x.reshape(12, 1))


def test_a_length_computed_from_a_small_input_specializes_on_that_input() -> None:
    """Range's limit is floor(size / 2) computed from a float input: the backend fixes ``size`` per call; a large
    input feeding a compile-time value is never specialized on."""
    nodes = [
        helper.make_node("Div", ["size", "two"], ["half"]),
        helper.make_node("Floor", ["half"], ["fl"]),
        helper.make_node("Cast", ["fl"], ["n"], to=TensorProto.INT64),
        helper.make_node("Range", ["zero", "n", "one"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]

    def model(size_shape: list[int]) -> onnx.ModelProto:
        graph = helper.make_graph(
            nodes,
            "w",
            [helper.make_tensor_value_info("size", F, size_shape)],
            [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
            inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    rep = AotcBackend.prepare(model([]))
    assert isinstance(rep, SpecializingRep)
    np.testing.assert_array_equal(rep.run([np.array(7.0, np.float32)])[0], np.arange(3))
    np.testing.assert_array_equal(rep.run([np.array(10.0, np.float32)])[0], np.arange(5))
    with pytest.raises(UnsupportedError, match=r"Range node .* must be known at compile time"):
        AotcBackend.prepare(model([1000]))


def test_node_test_subset_passes(tmp_path: Path) -> None:
    script = load_script()
    results = script.run(script.SUBSET_MODULES)
    failed = [f"{r.name}: {r.reason}" for r in results if r.status == "failed"]
    assert not failed, "\n".join(failed)
    counts = {s: sum(r.status == s for r in results) for s in ("passed", "skipped")}
    assert counts["passed"] >= 350, counts
    # a skip is always aotc refusing the model up front (UnsupportedError), with the reason
    assert all(r.reason for r in results if r.status == "skipped")
    report = script.report(results, verbose=False)
    assert "TOTAL" in report and "Conv" in report
    out = tmp_path / "r.json"
    assert script.main(["--subset", "--ops", "Relu,Softmax", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["summary"]) == {"Relu", "Softmax"} and data["summary"]["Softmax"]["failed"] == 0


def test_aotc_onnx_imports_without_onnx_and_explains_when_used() -> None:
    code = (
        "import sys; sys.modules['onnx'] = None\n"
        "import aotc.onnx\n"
        "try:\n"
        "    aotc.onnx.import_onnx\n"
        "except aotc.UnsupportedError as e:\n"
        "    print('refused:', e)\n"
        "try:\n"
        "    aotc.export_onnx\n"
        "except aotc.UnsupportedError as e:\n"
        "    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.count("refused: ONNX support needs the 'onnx' package") == 2
