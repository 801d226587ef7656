"""ONNX GridSample (2-D; opset 16's mode names and opset 20's) -> aotc's grid sampling, against onnxruntime at two
sizes of dynamic batch, input and grid dims from one artifact, every mode x padding x align_corners, grid points
outside [-1, 1] included."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_onnx_import import model_of

from aotc.compiler import compile_graph
from aotc.errors import UnsupportedError
from aotc.onnx import import_onnx

ort = pytest.importorskip("onnxruntime")
F = TensorProto.FLOAT
DIMS = {"n": (1, 4), "h": (2, 16), "w": (2, 16), "ho": (1, 8), "wo": (1, 8)}


def grid_model(opset: int, **attrs: object) -> object:
    nodes = [helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)]
    x = helper.make_tensor_value_info("x", F, ["n", 2, "h", "w"])
    grid = helper.make_tensor_value_info("grid", F, ["n", "ho", "wo", 2])
    return model_of(nodes, [x, grid], [helper.make_tensor_value_info("y", F, None)], opset=opset)


MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic")}
CASES = [
    (opset, mode, padding, align)
    for opset in MODES
    for mode, padding, align in itertools.product(MODES[opset], ("zeros", "border", "reflection"), (0, 1))
]


@pytest.mark.parametrize(("opset", "mode", "padding", "align"), CASES)
def test_grid_sample_matches_onnxruntime(opset: int, mode: str, padding: str, align: int) -> None:
    model = grid_model(opset, mode=mode, padding_mode=padding, align_corners=align)
    compiled = compile_graph(import_onnx(model, dims=DIMS), options=None)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for n, hw, out in ((2, (5, 6), (3, 4)), (1, (4, 9), (2, 5))):
        x = rng.standard_normal((n, 2, *hw)).astype(np.float32)
        grid = rng.uniform(-1.7, 1.7, (n, *out, 2)).astype(np.float32)
        grid[0, 0, :3] = [[-1, -1], [1, 1], [3.3, -4.6]]
        (got,), (want,) = compiled.run({"x": x, "grid": grid}), session.run(None, {"x": x, "grid": grid})
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"at n={n} {hw} -> {out}")


def test_an_unknown_mode_is_refused_naming_the_node() -> None:
    model = grid_model(20, mode="area")
    with pytest.raises(UnsupportedError, match=r"GridSample.*mode 'area' is not supported"):
        import_onnx(model, dims=DIMS)
