"""ONNX MaxPool / AveragePool with ``ceil_mode=1``, over static and dynamic spatial dims, against torch's pooling
(the semantics exporters map to it: the last partial window counts unless it starts in the right padding; an
average counts the pads when count_include_pad, never what that window reaches past them)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_onnx_import import model_of

from aotc.compiler import compile_graph
from aotc.onnx import import_onnx

torch = pytest.importorskip("torch")
F = torch.nn.functional


def pool_model(op: str, shape: list, **attrs: object) -> object:
    node = helper.make_node(op, ["x"], ["y"], ceil_mode=1, **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    return model_of([node], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])


CASES = {
    "max_k3_s2_p1": ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                     lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True)),
    "avg_including_pads": ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                               count_include_pad=1),
                           lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True)),
    "avg_excluding_pads": ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                           lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    "avg_unpadded": ("AveragePool", dict(kernel_shape=[2, 3], strides=[2, 2]),
                     lambda x: F.avg_pool2d(x, (2, 3), 2, 0, ceil_mode=True)),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_ceil_mode_over_dynamic_height_and_width_matches_torch(case: str) -> None:
    op, attrs, fn = CASES[case]
    dims = {"n": (1, 4), "h": (4, 32), "w": (4, 32)}
    compiled = compile_graph(import_onnx(pool_model(op, ["n", 2, "h", "w"], **attrs), dims=dims))
    rng = np.random.default_rng(0)
    for shape in ((2, 2, 7, 8), (1, 2, 10, 9)):
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = compiled.run({"x": x})
        want = fn(torch.from_numpy(x)).numpy()
        assert got.shape == want.shape, shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_dilated_ceil_mode_max_pool_whose_last_window_starts_in_the_padding() -> None:
    """Static 7x7, kernel 2 dilated 2 (span 3), stride 3, pads 1: torch drops the third window of each axis."""
    model = pool_model("MaxPool", [1, 2, 7, 7], kernel_shape=[2, 2], strides=[3, 3], pads=[1, 1, 1, 1],
                       dilations=[2, 2])  # fmt: skip
    x = np.random.default_rng(1).standard_normal((1, 2, 7, 7)).astype(np.float32)
    (got,) = compile_graph(import_onnx(model)).run({"x": x})
    want = F.max_pool2d(torch.from_numpy(x), 2, 3, 1, dilation=2, ceil_mode=True).numpy()
    assert got.shape == want.shape == (1, 2, 3, 3)
    np.testing.assert_allclose(got, want)


def test_ceil_mode_where_the_dropped_window_depends_on_a_dynamic_size() -> None:
    """Kernel 3, stride 3, pads 1 over h: torch (and ONNX) drop the ceil window at h = 8, keep it at 7 and 10."""
    model = pool_model("MaxPool", ["n", 2, "h", 8], kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1])
    compiled = compile_graph(import_onnx(model, dims={"n": (1, 4), "h": (4, 32)}))
    rng = np.random.default_rng(3)
    for h in (7, 8, 10):
        x = rng.standard_normal((1, 2, h, 8)).astype(np.float32)
        (got,) = compiled.run({"x": x})
        want = F.max_pool2d(torch.from_numpy(x), 3, 3, 1, ceil_mode=True).numpy()
        assert got.shape == want.shape, h
        np.testing.assert_allclose(got, want)


def test_a_ceil_mode_pool_exports_as_its_decomposition_and_onnxruntime_matches_torch() -> None:
    ort = pytest.importorskip("onnxruntime")
    from aotc.onnx import export_graph

    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    graph = import_onnx(pool_model("AveragePool", ["n", 2, 7, 8], **attrs), dims={"n": (1, 4)})
    assert graph.op_counts().get("avg_pool2d") == 1  # the high-level op, kept whole until lowering
    model = export_graph(graph)
    assert "AveragePool" not in {n.op_type for n in model.graph.node}
    x = np.random.default_rng(2).standard_normal((3, 2, 7, 8)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    want = F.avg_pool2d(torch.from_numpy(x), 3, 2, 1, ceil_mode=True).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
