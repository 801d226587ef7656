"""The ONNX light_* CNNs shipped with the onnx package, scheduled and run under the Triton interpreter against
the cpu backend (with random weights: their own ConstantOfShape fills make every logit equal, where float32
rounding order alone flips the softmax). Tolerance: rtol 1e-3 plus 1e-5 of the output's largest magnitude.
Minutes of interpreter time: slow (-m slow or AOTC_RUN_SLOW=1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_light import LIGHT, with_random_weights

from aotc.ir.evaluate import GraphRunner
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from aotc.onnx import import_onnx
from tests.kernel_layer.kernel_kit import run_schedule

NAMES = [
    "squeezenet",
    "shufflenet",
    "inception_v1",
    "inception_v2",
    "bvlc_alexnet",
    "resnet50",
    "densenet121",
    "vgg19",
    "zfnet512",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_light_model_under_the_interpreter(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.onnx"
    onnx.save(with_random_weights(onnx.load(LIGHT / f"light_{name}.onnx"), 0), path)
    g = lower(import_onnx(path), CompileOptions())
    x = np.random.default_rng(0).standard_normal(tuple(g.inputs[0].type.shape)).astype(np.float32)
    got = run_schedule(g, [x], {})
    want = GraphRunner(g).run([x], {})
    for a, b in zip(got, want):
        # float32 sums in another order: errors scale with the layer's magnitude (resnet50's logits reach 1e5)
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5 * float(np.abs(b).max()))
