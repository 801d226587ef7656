"""ONNX Resize of dynamic height and width (``h//4`` in a detection or segmentation head, an FPN's x2 upsample):
the forms exporters write, against onnxruntime at two sizes from one artifact; the rest refused naming the dim."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_onnx_import import model_of

from aotc.compiler import compile_graph
from aotc.errors import UnsupportedError
from aotc.onnx import import_onnx

ort = pytest.importorskip("onnxruntime")
F = TensorProto.FLOAT


def resize_model(scales: list[float], **attrs: object) -> object:
    inits = [numpy_helper.from_array(np.asarray(scales, np.float32), "scales")]
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)]
    x = helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"])
    return model_of(nodes, [x], [helper.make_tensor_value_info("y", F, None)], inits, opset=13)


FORMS = {
    "nearest_asymmetric_floor_x2": ([1, 1, 2, 2], dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                                                       nearest_mode="floor")),
    "linear_half_pixel_x2": ([1, 1, 2, 2], dict(mode="linear", coordinate_transformation_mode="half_pixel")),
    "linear_pytorch_half_pixel_x4_w": ([1, 1, 1, 4], dict(mode="linear",
                                                          coordinate_transformation_mode="pytorch_half_pixel")),
    "linear_align_corners_x2": ([1, 1, 2, 2], dict(mode="linear", coordinate_transformation_mode="align_corners")),
    "cubic_half_pixel_x2": ([1, 1, 2, 2], dict(mode="cubic", cubic_coeff_a=-0.75,
                                               coordinate_transformation_mode="half_pixel")),
    "cubic_align_corners_x2": ([1, 1, 2, 2], dict(mode="cubic", cubic_coeff_a=-0.75,
                                                  coordinate_transformation_mode="align_corners")),
    "linear_half_pixel_down_half": ([1, 1, 0.5, 0.5], dict(mode="linear",
                                                           coordinate_transformation_mode="half_pixel")),
}  # fmt: skip


@pytest.mark.parametrize("form", list(FORMS))
def test_resize_of_dynamic_height_and_width_matches_onnxruntime(form: str) -> None:
    scales, attrs = FORMS[form]
    model = resize_model(scales, **attrs)
    compiled = compile_graph(import_onnx(model, dims={"n": (1, 4), "h": (2, 32), "w": (2, 32)}))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for shape in ((2, 3, 5, 7), (1, 3, 8, 4)):
        x = rng.standard_normal(shape).astype(np.float32)
        (got,), (want,) = compiled.run({"x": x}), session.run(None, {"x": x})
        assert got.shape == want.shape, shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("scales", "attrs", "match"),
    [
        ([1, 1, 3, 3], dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
         "needs a power-of-two scale"),
        ([1, 1, 2, 2], dict(mode="nearest"), "mode 'nearest' and coordinate_transformation_mode 'half_pixel'"),
        ([1, 1, 2, 2], dict(mode="cubic", coordinate_transformation_mode="asymmetric"), "mode 'cubic'"),
    ],
)  # fmt: skip
def test_other_forms_over_a_dynamic_dim_are_refused_naming_it(scales: list, attrs: dict, match: str) -> None:
    with pytest.raises(UnsupportedError, match=rf"Resize.*resizing dynamic dim h \(axis 2\).*{match}"):
        import_onnx(resize_model(scales, **attrs), dims={"n": (1, 4), "h": (2, 32), "w": (2, 32)})
