"""Ops exported models need: shape-dependent inputs that are symbolic expressions of dims (a constant sliced to
``seq``, pads from a transposed shape, an exact quotient of dims), ScatterND / ScatterElements, and Atan / Asin /
Acos. Each model is compared with onnxruntime at two values of its dynamic dims, from one compiled artifact."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_onnx_import import model_of

from aotc.compiler import compile_graph
from aotc.errors import ExecError, ShapeError
from aotc.onnx import import_onnx

ort = pytest.importorskip("onnxruntime")
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def c64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def matches_ort(
    model: onnx.ModelProto, feeds_list: list[dict[str, np.ndarray]], rtol: float = 1e-6, dims: dict | None = None
) -> None:
    compiled = compile_graph(import_onnx(model, dims=dims))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        for got, want in zip(compiled.run(feeds), session.run(None, feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)


def test_constant_sliced_to_a_dynamic_length() -> None:
    """BERT's ``position_ids[:, :seq]`` (and a dynamic start): a stored constant, symbolic ends."""
    pos = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(1, 40) / 7, "pos")
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one_s"], ["seq"], axis=0),
        helper.make_node("Unsqueeze", ["seq", "zero"], ["end"]),
        helper.make_node("Slice", ["pos", "zero", "end", "one"], ["head"]),  # pos[:, :seq]
        helper.make_node("Sub", ["forty", "end"], ["start"]),
        helper.make_node("Slice", ["pos", "start", "forty", "one"], ["tail"]),  # pos[:, 40 - seq:]
        helper.make_node("Add", ["x", "head"], ["y0"]),
        helper.make_node("Mul", ["y0", "tail"], ["y"]),
    ]
    inits = [pos, c64("zero", [0]), c64("one", [1]), c64("forty", [40])]
    inits.append(numpy_helper.from_array(np.array(1, np.int64), "one_s"))
    x = helper.make_tensor_value_info("x", F, ["batch", "seq"])
    model = model_of(nodes, [x], [helper.make_tensor_value_info("y", F, None)], inits)
    dims = {"seq": (1, 40)}
    graph = import_onnx(model, dims=dims)
    assert "slice" in graph.op_counts()
    rng = np.random.default_rng(0)
    matches_ort(model, [{"x": rng.standard_normal(s).astype(np.float32)} for s in ((2, 7), (1, 40))], dims=dims)


def test_pads_from_a_transposed_shape_and_an_exact_quotient_of_dims() -> None:
    """Swin's window padding: pads = Reshape(Transpose(Reshape(amounts, [-1, 2]))), a batch recovered as
    (batch*h*w) / (h*w). Both stay shape arithmetic, so nothing here needs a value at run time."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),  # (b, h, w)
        helper.make_node("Slice", ["s", "one", "three"], ["hw"]),
        helper.make_node("Mod", ["hw", "four"], ["m"]),
        helper.make_node("Sub", ["four", "m"], ["r"]),
        helper.make_node("Mod", ["r", "four"], ["amount"]),  # (-h) mod 4, (-w) mod 4
        helper.make_node("Concat", ["zero2", "zero2", "amount"], ["flat"], axis=0),  # [0, 0, 0, 0, ph, pw]
        helper.make_node("Reshape", ["flat", "pair"], ["pairs"]),  # [[0, 0], [0, 0], [ph, pw]]
        helper.make_node("Transpose", ["pairs"], ["t"], perm=[1, 0]),
        helper.make_node("Reshape", ["t", "minus1"], ["pads"]),  # [0, 0, 0, 0, ph, pw] -> begins, ends
        helper.make_node("Pad", ["x", "pads"], ["padded"]),
        helper.make_node("ReduceProd", ["s"], ["total"], keepdims=0),
        helper.make_node("ReduceProd", ["hw"], ["area"], keepdims=0),
        helper.make_node("Div", ["total", "area"], ["b"]),
        helper.make_node("Unsqueeze", ["b", "zero"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["padded", "target"], ["y"]),
    ]
    inits = [c64(n, v) for n, v in [("one", [1]), ("three", [3]), ("four", [4]), ("zero2", [0, 0])]]
    inits += [c64("pair", [3, 2]), c64("minus1", [-1]), c64("zero", [0])]
    x = helper.make_tensor_value_info("x", F, ["b", "h", "w"])
    model = model_of(nodes, [x], [helper.make_tensor_value_info("y", F, None)], inits, opset=17)
    graph = import_onnx(model, dims={"h": (1, 30), "w": (1, 30)})
    assert set(graph.op_counts()) <= {"pad", "reshape"}
    rng = np.random.default_rng(1)
    matches_ort(model, [{"x": rng.standard_normal(s).astype(np.float32)} for s in ((2, 5, 8), (3, 4, 7))])


def test_range_expand_and_constant_of_shape_over_symbolic_values() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one_s"], ["seq"], axis=0),
        helper.make_node("Range", ["zero_s", "seq", "one_s"], ["ar"]),  # arange(seq)
        helper.make_node("Cast", ["ar"], ["arf"], to=F),
        helper.make_node("Expand", ["arf", "s"], ["grid"]),  # (batch, seq)
        helper.make_node("ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Add", ["grid", "ones"], ["g1"]),
        helper.make_node("Mul", ["x", "g1"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("zero_s", 0), ("one_s", 1))]
    x = helper.make_tensor_value_info("x", F, ["batch", "seq"])
    model = model_of(nodes, [x], [helper.make_tensor_value_info("y", F, None)], inits)
    rng = np.random.default_rng(2)
    matches_ort(model, [{"x": rng.standard_normal(s).astype(np.float32)} for s in ((2, 3), (4, 11))])


def scatter_model(op: str, idx_shape: list, upd_shape: list, **attrs: object) -> onnx.ModelProto:
    inputs = [
        helper.make_tensor_value_info("data", F, ["n", 4]),
        helper.make_tensor_value_info("idx", I64, idx_shape),
        helper.make_tensor_value_info("upd", F, upd_shape),
    ]
    node = helper.make_node(op, ["data", "idx", "upd"], ["y"], **attrs)
    return model_of([node], inputs, [helper.make_tensor_value_info("y", F, None)], opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_rows_and_elements(reduction: str) -> None:
    rng = np.random.default_rng(3)
    rows = scatter_model("ScatterND", ["k", 1], ["k", 4], reduction=reduction)
    elems = scatter_model("ScatterND", ["k", 2], ["k"], reduction=reduction)
    for n, k in ((5, 3), (9, 2)):
        data = rng.standard_normal((n, 4)).astype(np.float32)
        # distinct rows (repeats are unspecified without a reduction), half of them counted from the end
        r = rng.permutation(n)[:k]
        r = np.where(rng.random(k) < 0.5, r - n, r).reshape(k, 1)
        matches_ort(rows, [{"data": data, "idx": r, "upd": rng.standard_normal((k, 4)).astype(np.float32)}])
        e = np.stack([rng.permutation(n)[:k], rng.integers(-4, 4, size=k)], axis=-1)
        matches_ort(elems, [{"data": data, "idx": e, "upd": rng.standard_normal(k).astype(np.float32)}])


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("op", ["ScatterElements", "Scatter"])
def test_scatter_elements(op: str, axis: int) -> None:
    opset = 10 if op == "Scatter" else 18
    inputs = [
        helper.make_tensor_value_info("data", F, ["n", 4]),
        helper.make_tensor_value_info("idx", I64, ["n", 3]),
        helper.make_tensor_value_info("upd", F, ["n", 3]),
    ]
    node = helper.make_node(op, ["data", "idx", "upd"], ["y"], axis=axis)
    model = model_of([node], inputs, [helper.make_tensor_value_info("y", F, None)], opset=opset)
    rng = np.random.default_rng(4)
    for n in (3, 6):
        dim = (n, 4)[axis]
        # distinct positions along the axis in each line, so the result is defined without a reduction
        idx = np.argsort(rng.random((n, 3) if axis == 0 else (n, 4)), axis=axis)[:, :3]
        idx = np.where(rng.random(idx.shape) < 0.5, idx - dim, idx).astype(np.int64)
        feeds = {"data": rng.standard_normal((n, 4)).astype(np.float32), "idx": idx}
        feeds["upd"] = rng.standard_normal((n, 3)).astype(np.float32)
        matches_ort(model, [feeds])


@pytest.mark.parametrize(
    ("idx", "bad"),
    [([[5], [0]], 5), ([[0], [-6]], -6), ([[1, 4], [0, 0]], 4), ([[-6, 0], [0, 0]], -6)],
)
def test_scatter_nd_index_out_of_range_is_an_error_naming_the_input(idx: list, bad: int) -> None:
    k = len(idx[0])
    model = scatter_model("ScatterND", [2, k], [2] if k == 2 else [2, 4])
    compiled = compile_graph(import_onnx(model))
    upd = np.ones((2,) if k == 2 else (2, 4), np.float32)
    with pytest.raises(ExecError, match=rf"scatter.*index {bad} in input 'idx'.*outside the valid range"):
        compiled.run({"data": np.zeros((5, 4), np.float32), "idx": np.array(idx, np.int64), "upd": upd})


@pytest.mark.parametrize(("op", "fn", "lo", "hi"), [("Atan", np.arctan, -1e3, 1e3), ("Asin", np.arcsin, -1, 1)])
def test_inverse_trig_is_accurate_in_float32(op: str, fn: np.ufunc, lo: float, hi: float) -> None:
    _check_trig(op, fn, lo, hi)


def test_acos_is_accurate_in_float32() -> None:
    _check_trig("Acos", np.arccos, -1, 1)


def _check_trig(op: str, fn: np.ufunc, lo: float, hi: float) -> None:
    x = helper.make_tensor_value_info("x", F, ["n"])
    model = model_of([helper.make_node(op, ["x"], ["y"])], [x], [helper.make_tensor_value_info("y", F, None)])
    compiled = compile_graph(import_onnx(model, dims={"n": (1, 1 << 20)}))
    grid = np.concatenate([np.linspace(lo, hi, 200_001), np.linspace(-1.5, 1.5, 30_001)])
    edges = [0.0, -0.0, 1.0, -1.0, 0.41421356, 2.4142135, 0.99999994, -0.99999994, 1e-30, np.inf, -np.inf, np.nan]
    x = np.concatenate([grid, edges]).astype(np.float32)
    if op != "Atan":
        x = x[~(np.abs(x) > 1)]  # keeps NaN
    (y,) = compiled.run({"x": x})
    want = fn(x.astype(np.float64))
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-6, equal_nan=True)
    assert y.dtype == np.float32
    if op != "Atan":  # outside [-1, 1] asin and acos are NaN
        assert np.isnan(compiled.run({"x": np.array([1.5, -2.0, 1.0000001], np.float32)})[0]).all()


@pytest.mark.parametrize("op", ["Atan", "Asin", "Acos"])
def test_inverse_trig_in_float16_matches_onnxruntime(op: str) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)
    model = model_of([helper.make_node(op, ["x"], ["y"])], [x], [out])
    rng = np.random.default_rng(5)
    matches_ort(model, [{"x": rng.uniform(-1, 1, size=n).astype(np.float16)} for n in (7, 100)], rtol=2**-9)


def test_scatter_elements_with_more_rows_than_the_data_fails_at_run_time_or_import() -> None:
    def model(idx_rows: object) -> onnx.ModelProto:
        inputs = [
            helper.make_tensor_value_info("data", F, ["n", 4]),
            helper.make_tensor_value_info("idx", I64, [idx_rows, 2]),
            helper.make_tensor_value_info("upd", F, [idx_rows, 2]),
        ]
        node = helper.make_node("ScatterElements", ["data", "idx", "upd"], ["y"], axis=1)
        return model_of([node], inputs, [helper.make_tensor_value_info("y", F, None)])

    compiled = compile_graph(import_onnx(model("k")))  # k <= n can't be known here: checked per call
    feeds = {
        "data": np.zeros((2, 4), np.float32),
        "idx": np.zeros((3, 2), np.int64),
        "upd": np.ones((3, 2), np.float32),
    }
    with pytest.raises(ExecError, match=r"scatter.*index 2 .*outside the valid range \[-2, 2\)"):
        compiled.run(feeds)
    feeds = {
        "data": np.zeros((3, 4), np.float32),
        "idx": np.zeros((3, 2), np.int64),
        "upd": np.ones((3, 2), np.float32),
    }
    assert compiled.run(feeds)[0][:, 0].tolist() == [1, 1, 1]
    static = model(5)
    static.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 3
    with pytest.raises(ShapeError, match=r"indices dim 0 .* exceeds the data's"):
        import_onnx(static)
