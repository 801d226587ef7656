"""The real models shipped in onnx's test data (onnx/backend/test/data/light) through import -> lower -> run.

Each ``light_<name>.onnx`` comes with ``light_<name>_output_0.pb``: the output for the input
``arange(n).reshape(shape) / n`` (how onnx's backend test runner feeds them). Their weights are ConstantOfShape
fills, so the stored outputs are nearly uniform; a second test swaps the fills for random weights and compares
the logits (the Softmax input) with onnxruntime, which checks every layer for real.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx_light import LIGHT, data_input, runner_input, with_random_weights

from aotc.onnx import import_onnx
from aotc.onnx_backend import compile_graph

SLOW = {"vgg19"}  # about 12 s of numpy convolutions
NAMES = sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx"))
PARAMS = [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in NAMES]


def test_light_models_are_all_found() -> None:
    assert {"resnet50", "densenet121", "inception_v1", "inception_v2", "squeezenet", "vgg19", "shufflenet"} <= set(
        NAMES
    )


@pytest.mark.parametrize("name", PARAMS)
def test_light_model_matches_stored_output(name: str) -> None:
    path = LIGHT / f"light_{name}.onnx"
    model = onnx.load(path)
    expected = numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{name}_output_0.pb")))
    graph = import_onnx(path)
    (got,) = compile_graph(graph)([runner_input(model)])
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize(
    "name",
    ["squeezenet", "shufflenet", "inception_v1", "densenet121", pytest.param("resnet50", marks=pytest.mark.slow)],
)
def test_light_model_with_random_weights_matches_onnxruntime(name: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = with_random_weights(onnx.load(LIGHT / f"light_{name}.onnx"), seed=0)
    x = np.random.default_rng(1).standard_normal(runner_input(model).shape).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {data_input(model).name: x})
    got = compile_graph(import_onnx(model))([x])
    for w, g in zip(want, got):
        assert g.shape == w.shape
        scale = float(np.abs(w).max())
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * scale)
    logits = want[-1]
    assert float(np.std(logits)) > 0.1 * float(np.abs(logits).mean()), "the logits are not degenerate"


@pytest.mark.parametrize("name", ["squeezenet", "inception_v1", "shufflenet"])
def test_imported_model_exports_back_to_an_equivalent_onnx_file(name: str, tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    from aotc.onnx import export_graph

    model = with_random_weights(onnx.load(LIGHT / f"light_{name}.onnx"), seed=2)
    again = export_graph(import_onnx(model), tmp_path / "again.onnx")
    onnx.checker.check_model(again, full_check=True)
    x = np.random.default_rng(3).standard_normal(runner_input(model).shape).astype(np.float32)
    first = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    second = ort.InferenceSession(str(tmp_path / "again.onnx"), providers=["CPUExecutionProvider"])
    for w, g in zip(first.run(None, {data_input(model).name: x}), second.run(None, {second.get_inputs()[0].name: x})):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * float(np.abs(w).max()))
