"""An imported ONNX Gather follows ONNX: ids in [-n, n), a negative one counting from the end, as onnxruntime
computes; an id outside that range is an ExecError naming the input and the range (onnxruntime also refuses it)."""

from __future__ import annotations

import contextlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aotc.runtime
from aotc.compiler import compile_graph
from aotc.errors import ExecError
from aotc.ir.ops import Op
from aotc.onnx import import_onnx

ort = pytest.importorskip("onnxruntime")
TABLE = np.arange(20, dtype=np.float32).reshape(5, 4)


def gather_model(axis: int) -> onnx.ModelProto:
    data = numpy_helper.from_array(TABLE if axis == 0 else np.ascontiguousarray(TABLE.T), "table")
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=axis)
    graph = helper.make_graph([node], "g", [ids], [out], [data])
    opsets = [helper.make_opsetid("", 13)]
    model = helper.make_model(graph, opset_imports=opsets)
    with contextlib.suppress(ValueError):
        model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


@pytest.fixture(scope="module", params=[0, 1], ids=["axis0", "axis1"])
def pair(request: pytest.FixtureRequest) -> tuple[aotc.runtime.Executable, object]:
    model = gather_model(request.param)
    graph = import_onnx(model, dims={"n": (1, 8)})
    gathers = [n for n in graph.nodes if n.op is Op.GATHER]
    assert gathers and all(n.attrs["negative_indices"] is True for n in gathers)
    exe = aotc.runtime.load(compile_graph(graph).artifact_bytes, device="cpu")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return exe, sess


@pytest.mark.parametrize("ids", [[0, 4], [-1], [-5, -1, 0, 4, 2]])
def test_valid_ids_match_onnxruntime(pair, ids: list[int]) -> None:
    exe, sess = pair
    feeds = {"ids": np.array(ids, np.int64)}
    np.testing.assert_array_equal(exe.run(feeds)[0], sess.run(None, feeds)[0])


@pytest.mark.parametrize("bad", [-6, 5, np.iinfo(np.int64).min, np.iinfo(np.int64).max])
def test_ids_outside_minus_n_to_n_raise_like_onnxruntime(pair, bad: int) -> None:
    exe, sess = pair
    feeds = {"ids": np.array([1, bad], np.int64)}
    with pytest.raises(
        ExecError, match=rf"index {bad} in input 'ids' \(at \[1\]\) is outside the valid range \[-5, 5\)"
    ):
        exe.run(feeds)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error types vary by version
        sess.run(None, feeds)
    np.testing.assert_array_equal(exe.run({"ids": np.array([-2])})[0], sess.run(None, {"ids": np.array([-2])})[0])
