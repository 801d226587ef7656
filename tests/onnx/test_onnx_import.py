"""Import: dim_params become symbols, shape computations stay symbolic, bad input gets one clear error."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import AotcError, ModelError, ShapeError, UnsupportedError
from aotc.ir.evaluate import run_graph
from aotc.onnx import import_onnx
from aotc.onnx._common import DEFAULT_DIM_RANGE
from aotc.onnx.importer import DefaultRangeWarning
from aotc.onnx_backend import compile_graph

ort = pytest.importorskip("onnxruntime")
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model_of(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, inits or [])
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets)
    # The oldest IR version the opset allows, so every onnxruntime the tests may meet can load it
    # (an opset newer than this onnx package has none: those models keep the default).
    with contextlib.suppress(ValueError):
        model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


def c64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def transformer_like() -> onnx.ModelProto:
    """What torch.onnx.export writes for attention: reshape targets computed from Shape at run time."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "zero"], ["b"], axis=0),
        n("Gather", ["shape", "one"], ["t"], axis=0),
        n("Unsqueeze", ["b", "ax0"], ["b1"]),
        n("Unsqueeze", ["t", "ax0"], ["t1"]),
        n("Concat", ["b1", "t1", "heads", "minus1"], ["split_shape"], axis=0),
        n("MatMul", ["x", "wq"], ["q0"]),
        n("Reshape", ["q0", "split_shape"], ["q1"]),
        n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        n("Transpose", ["q1"], ["kt"], perm=[0, 2, 3, 1]),
        n("MatMul", ["q", "kt"], ["s0"]),
        n("Div", ["s0", "sqrt_d"], ["s"]),
        n("Range", ["zero", "t", "one"], ["pos"]),
        n("Unsqueeze", ["pos", "ax0"], ["pos_row"]),
        n("Unsqueeze", ["pos", "ax1"], ["pos_col"]),
        n("Less", ["pos_row", "pos_col"], ["future"]),
        n("Where", ["future", "neg_inf", "s"], ["masked"]),
        n("Softmax", ["masked"], ["p"], axis=-1),
        n("MatMul", ["p", "q"], ["o0"]),
        n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
        n("Concat", ["b1", "t1", "minus1"], ["merge_shape"], axis=0),
        n("Reshape", ["o1", "merge_shape"], ["o"]),
        n("ConstantOfShape", ["shape"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        n("Add", ["o", "ones"], ["y"]),
        n("Slice", ["y", "ax1", "t1", "ax1"], ["tail"]),
        n("Size", ["x"], ["numel"]),
    ]
    inits = [
        numpy_helper.from_array((rng.standard_normal((8, 8)) * 0.3).astype(np.float32), "wq"),
        numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
        numpy_helper.from_array(np.asarray(1, np.int64), "one"),
        c64("ax0", [0]),
        c64("ax1", [1]),
        c64("heads", [2]),
        c64("minus1", [-1]),
        numpy_helper.from_array(np.asarray(2.0, np.float32), "sqrt_d"),
        numpy_helper.from_array(np.asarray(-np.inf, np.float32), "neg_inf"),
    ]
    x = helper.make_tensor_value_info("x", F, ["batch", "seq", 8])
    outs = [
        helper.make_tensor_value_info("y", F, None),
        helper.make_tensor_value_info("tail", F, None),
        helper.make_tensor_value_info("numel", I64, None),
    ]
    return model_of(nodes, [x], outs, inits)


def test_dynamic_shape_chains_match_onnxruntime(tmp_path: Path) -> None:
    model = transformer_like()
    graph = import_onnx(model, dims={"batch": (1, 4), "seq": (2, 50)})
    assert graph.ranges == {"batch": (1, 4), "seq": (2, 50)}
    assert not {"shape", "gather", "concat"} & set(graph.op_counts())  # the shape arithmetic was folded
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    run = compile_graph(graph)  # the lowered graph, as the cpu backend runs it
    rng = np.random.default_rng(1)
    for b, t in ((1, 3), (3, 11)):
        x = rng.standard_normal((b, t, 8)).astype(np.float32)
        want = sess.run(None, {"x": x})
        for got in (run_graph(graph, [x], {"batch": b, "seq": t}), run([x])):
            for w, g in zip(want, got):
                assert w.shape == g.shape and w.dtype == g.dtype
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_torch_expand_pattern_decides_comparisons_over_dims() -> None:
    """torch's expand() export: Where(Equal(shape, -1), 1, shape) with shape from Shape(x) at run time."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("ConstantOfShape", ["rank"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.int64))),
        n("Mul", ["ones", "minus1"], ["neg"]),
        n("Equal", ["s", "neg"], ["is_neg"]),
        n("Where", ["is_neg", "ones", "s"], ["target"]),
        n("Expand", ["bias", "target"], ["b"]),
        n("Add", ["x", "b"], ["y"]),
    ]
    inits = [c64("rank", [2]), c64("minus1", [-1]), numpy_helper.from_array(np.arange(3, dtype=np.float32), "bias")]
    x = helper.make_tensor_value_info("x", F, ["n", 3])
    graph = import_onnx(model_of(nodes, [x], [helper.make_tensor_value_info("y", F, None)], inits))
    assert set(graph.op_counts()) <= {"add", "constant", "broadcast"}
    xv = np.ones((4, 3), np.float32)
    np.testing.assert_array_equal(run_graph(graph, [xv], {"n": 4})[0], xv + np.arange(3))


def test_dims_without_range_get_the_default_and_unnamed_dims_get_symbols() -> None:
    x = helper.make_tensor_value_info("in:0", F, ["n", None, 3])
    model = model_of([helper.make_node("Relu", ["in:0"], ["y"])], [x], [helper.make_tensor_value_info("y", F, None)])
    with pytest.warns(DefaultRangeWarning) as warned:
        graph = import_onnx(model)
    # once per dim, naming it and the flag that sets its range
    assert [str(w.message).split(" has no range")[0] for w in warned] == [
        "graph input dim 'n'",
        "an unnamed dim (in:0_1)",
    ]
    assert "--dim n=MIN:MAX" in str(warned[0].message)
    assert "--dim in_0_1=MIN:MAX" in str(warned[1].message)
    assert graph.input_names == ("in:0",)  # kept exactly; the unnamed dim's symbol is made an identifier
    assert [s.name for s in graph.symbols] == ["n", "in_0_1"]
    assert all((s.min, s.max) == DEFAULT_DIM_RANGE for s in graph.symbols)
    assert graph.inputs[0].type.shape[2] == 3


def test_output_structure_is_a_dict_of_onnx_output_names() -> None:
    x = helper.make_tensor_value_info("x", F, [2])
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["x"], ["b"])]
    graph = import_onnx(model_of(nodes, [x], [helper.make_tensor_value_info(n, F, None) for n in ("b", "a")]))
    assert graph.output_tree == {"dict": [["b", 0], ["a", 1]]}


def test_constant_inputs_fix_a_shape_fed_as_input() -> None:
    x = helper.make_tensor_value_info("x", F, [2, 6])
    s = helper.make_tensor_value_info("s", I64, [2])
    model = model_of(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], [x, s], [helper.make_tensor_value_info("y", F, None)]
    )
    with pytest.raises(UnsupportedError, match="must be known at compile time"):
        import_onnx(model)
    graph = import_onnx(model, constant_inputs={"s": np.array([3, -1])})
    assert graph.outputs[0].type.shape == (3, 4)


def test_if_with_a_known_condition_is_inlined() -> None:
    x = helper.make_tensor_value_info("x", F, ["n"])
    then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, None)]
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ReduceProd", ["s"], ["numel"], keepdims=0),
        helper.make_node("Greater", ["numel", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
    ]
    model = model_of(nodes, [x], [helper.make_tensor_value_info("y", F, None)], [c64("zero", [0])])
    graph = import_onnx(model)  # n >= 1 by its default range, so numel > 0 is known
    np.testing.assert_array_equal(run_graph(graph, [np.array([1.0, -2.0], np.float32)], {"n": 2})[0], [-1.0, 2.0])


# -- bad input: one clear error each ------------------------------------------------------------------------


def relu_model(opset: int = 17) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, ["n"])
    return model_of(
        [helper.make_node("Relu", ["x"], ["y"], name="act")],
        [x],
        [helper.make_tensor_value_info("y", F, None)],
        opset=opset,
    )


@pytest.mark.parametrize(
    "payload", [b"", b"definitely not a protobuf \xff\xfe", b"\x08\x07junk" * 50, b"ir_version: 7"]
)
def test_not_a_model_file(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(payload)
    with pytest.raises(ModelError, match=r"bad\.onnx"):
        import_onnx(path)


def test_missing_file_and_wrong_argument_type(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no such ONNX file"):
        import_onnx(tmp_path / "missing.onnx")
    with pytest.raises(ModelError, match="no such ONNX file"):
        import_onnx(tmp_path)
    with pytest.raises(ModelError, match="expected an ONNX file path"):
        import_onnx(42)


def test_too_old_and_too_new_opsets() -> None:
    with pytest.raises(UnsupportedError, match=r"opset 5 is too old.*changed since: Relu"):
        import_onnx(relu_model(opset=5))
    b = helper.make_tensor_value_info("b", TensorProto.BOOL, [2])
    unchanged = model_of(
        [helper.make_node("Not", ["b"], ["y"])],
        [b],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, None)],
        opset=1,
    )
    assert import_onnx(unchanged).op_counts() == {"not": 1}  # Not-1 still means what it meant
    with pytest.raises(UnsupportedError, match="newer than this onnx package"):
        import_onnx(relu_model(opset=onnx.defs.onnx_opset_version() + 1))


def test_undefined_input_or_missing_initializer() -> None:
    x = helper.make_tensor_value_info("x", F, [2, 3])
    model = model_of(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")], [x], [helper.make_tensor_value_info("y", F, None)]
    )
    with pytest.raises(ModelError, match=r"MatMul node 'proj': input 'w' is not defined"):
        import_onnx(model)
    no_output = model_of([], [x], [helper.make_tensor_value_info("y", F, None)])
    with pytest.raises(ModelError, match="graph output 'y' is not produced"):
        import_onnx(no_output)


def test_unknown_op_names_op_type_and_node() -> None:
    x = helper.make_tensor_value_info("x", F, [2])
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Frobnicate", ["h"], ["y"], name="mystery")]
    with pytest.raises(UnsupportedError, match=r"'Frobnicate'.*'mystery'"):
        import_onnx(model_of(nodes, [x], [helper.make_tensor_value_info("y", F, None)]))
    custom = [helper.make_node("Gelu", ["x"], ["y"], name="g", domain="com.microsoft")]
    m = model_of(custom, [x], [helper.make_tensor_value_info("y", F, None)])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedError, match=r"com\.microsoft::Gelu"):
        import_onnx(m)


def test_unsupported_dtype_and_unranked_input() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2])
    with pytest.raises(UnsupportedError, match="graph input 'x' has element type double"):
        import_onnx(
            model_of(
                [helper.make_node("Neg", ["x"], ["y"])],
                [x],
                [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
            )
        )
    u = helper.make_tensor_value_info("u", F, None)
    with pytest.raises(UnsupportedError, match="has no shape"):
        import_onnx(
            model_of([helper.make_node("Neg", ["u"], ["y"])], [u], [helper.make_tensor_value_info("y", F, None)])
        )


def test_bad_dim_ranges() -> None:
    with pytest.raises(ShapeError, match="no dynamic dim 'seq'; its dims are: n"):
        import_onnx(relu_model(), dims={"seq": (1, 8)})
    with pytest.raises(ShapeError, match="must satisfy 0 <= min <= max"):
        import_onnx(relu_model(), dims={"n": (9, 2)})


def test_inconsistent_shapes_are_a_shape_error() -> None:
    a = helper.make_tensor_value_info("a", F, [2, 3])
    b = helper.make_tensor_value_info("b", F, [4, 5])
    model = model_of(
        [helper.make_node("Add", ["a", "b"], ["y"], name="sum")], [a, b], [helper.make_tensor_value_info("y", F, None)]
    )
    with pytest.raises(ShapeError, match="Add node 'sum'"):
        import_onnx(model)


def test_mismatched_dim_params_become_a_guard() -> None:
    a = helper.make_tensor_value_info("a", F, ["n"])
    b = helper.make_tensor_value_info("b", F, ["m"])
    model = model_of(
        [helper.make_node("Add", ["a", "b"], ["y"], name="sum")], [a, b], [helper.make_tensor_value_info("y", F, None)]
    )
    graph = import_onnx(model)
    assert [str(g) for g in graph.guards] == ["n == m (from onnx node 'sum' (Add))"]


def test_every_error_is_an_aotc_error(tmp_path: Path) -> None:
    path = tmp_path / "x.onnx"
    path.write_text("hello")
    with pytest.raises(AotcError):
        import_onnx(path)


def test_bitwise_ops_match_onnxruntime_and_logical_ops_take_bool_only() -> None:
    i32, b = TensorProto.INT32, TensorProto.BOOL
    ins = [helper.make_tensor_value_info(n, i32, ["n"]) for n in ("a", "c")]
    nodes = [helper.make_node(f"Bitwise{o}", ["a", "c"], [o.lower()]) for o in ("And", "Or", "Xor")]
    nodes.append(helper.make_node("BitwiseNot", ["a"], ["not"]))
    outs = [helper.make_tensor_value_info(n, i32, None) for n in ("and", "or", "xor", "not")]
    model = model_of(nodes, ins, outs, opset=18)
    graph = import_onnx(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a = np.array([-(2**31), -7, -1, 0, 5, 2**31 - 1], np.int32)
    c = np.array([-1, 3, 2**31 - 1, -1, -4, -(2**31)], np.int32)
    for got, want in zip(run_graph(graph, [a, c], {"n": 6}), sess.run(None, {"a": a, "c": c}), strict=True):
        assert got.dtype == want.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    for op, dtype, want in (("And", i32, "needs bool inputs, got int32"), ("BitwiseOr", b, "integer inputs, got bool")):
        xs = [helper.make_tensor_value_info(n, dtype, [2]) for n in ("x", "y")]
        bad = model_of(
            [helper.make_node(op, ["x", "y"], ["z"], name="m")],
            xs,
            [helper.make_tensor_value_info("z", dtype, None)],
            opset=18,
        )
        with pytest.raises(UnsupportedError, match=want):
            import_onnx(bad)
