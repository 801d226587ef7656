"""The real models shipped in onnx's test data (onnx/backend/test/data/light), for the tests that run them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def data_input(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    """The one graph input that is not an initializer (IR version 3 lists initializers as inputs too)."""
    inits = {t.name for t in model.graph.initializer}
    (vi,) = [i for i in model.graph.input if i.name not in inits]
    return vi


def runner_input(model: onnx.ModelProto) -> np.ndarray:
    vi = data_input(model)
    shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def with_random_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """Every ConstantOfShape weight fill replaced by random values; the Softmax input exposed as an output."""
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    kept = []
    for node in m.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in inits[node.input[0]])
            if len(shape) >= 2:  # conv / gemm weights: He-scaled, mixed sign
                w = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
            else:  # biases and batch-norm parameters (variances must stay positive)
                w = rng.uniform(0.5, 1.5, shape)
            m.graph.initializer.append(numpy_helper.from_array(w.astype(np.float32), node.output[0]))
        else:
            kept.append(node)
    del m.graph.node[:]
    m.graph.node.extend(kept)
    for softmax in [n for n in m.graph.node if n.op_type == "Softmax"]:
        m.graph.output.append(helper.make_empty_tensor_value_info(softmax.input[0]))
    return m
