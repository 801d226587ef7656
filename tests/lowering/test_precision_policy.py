"""The mixed-precision pass on small graphs, before and after: which ops run in which dtype, which weights are
stored in half, and that the result is the float32 model's within half-precision rounding."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.errors import ShapeError
from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType
from aotc.ir.evaluate import run_graph
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.types import TensorType
from aotc.ir.verify import verify
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from aotc.lowering.precision import convert_precision, fits, mark_tf32
from tests.graph_kit import const, make_graph

F32, BF16, F16 = DType.float32, DType.bfloat16, DType.float16
RNG = np.random.default_rng(0)
W = (RNG.standard_normal((32, 16)) * 0.2).astype(np.float32)
B = (RNG.standard_normal(32) * 0.1).astype(np.float32)
G = (1 + 0.1 * RNG.standard_normal(32)).astype(np.float32)


def _block() -> Graph:
    """x -> linear -> layer_norm -> softmax, plus a residual of the layer norm output."""

    def body(b: Builder, x):
        h = b.op(Op.LINEAR, x, const(b, "w", W), const(b, "b", B))
        n = b.op(Op.LAYER_NORM, h, const(b, "g", G), eps=1e-5)
        return [b.op(Op.SOFTMAX, b.op(Op.MUL, h, b.full(0.5, F32)), axis=-1), b.op(Op.ADD, n, h)]

    return make_graph({"x": TensorType(F32, (4, 16))}, body, constants={"w": W, "b": B, "g": G})


def _producer(graph: Graph, v):
    return next(n for n in graph.nodes if v in n.outputs)


def _node(graph: Graph, op: Op):
    return next(n for n in graph.nodes if n.op is op)


def test_contractions_go_low_statistics_stay_float32() -> None:
    g = convert_precision(_block(), "bf16")
    verify(g, stage="precision")
    lin = _node(g, Op.LINEAR)
    assert [v.type.dtype for v in lin.inputs] == [BF16, BF16, BF16] and lin.outputs[0].type.dtype is BF16
    assert all(v.type.dtype is F32 for v in _node(g, Op.LAYER_NORM).inputs)
    assert _node(g, Op.SOFTMAX).inputs[0].type.dtype is F32
    # The scalar 0.5 is weakly typed: the multiply runs in bf16, the softmax casts its result up.
    mul = _node(g, Op.MUL)
    assert [v.type.dtype for v in mul.inputs] == [BF16, BF16]
    assert [v.type.dtype for v in g.inputs] == [F32] and [v.type.dtype for v in g.outputs] == [F32, F32]


def test_weights_feeding_contractions_are_stored_low_the_rest_stay_float32() -> None:
    g = convert_precision(_block(), "fp16")
    assert g.constants["w"].dtype == np.float16 and g.constants["b"].dtype == np.float16
    assert g.constants["g"].dtype == np.float32  # read by layer_norm only
    np.testing.assert_array_equal(g.constants["w"], W.astype(np.float16))


@pytest.mark.parametrize(("precision", "u"), [("bf16", 2.0**-8), ("fp16", 2.0**-11)])
def test_result_matches_float32_within_rounding(precision: str, u: float) -> None:
    g = _block()
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    ref = run_graph(lower(g, CompileOptions()), [x], {})
    out = run_graph(lower(g, CompileOptions(precision=precision)), [x], {})
    for y, r in zip(out, ref):
        assert y.dtype == np.float32
        err = np.linalg.norm(y - r) / np.linalg.norm(r)
        assert 0 < err < 8 * u, err


def test_embedding_table_is_stored_low_and_read_up_in_float32() -> None:
    table = RNG.standard_normal((10, 8)).astype(np.float32)

    def body(b: Builder, ids, x):
        e = b.op(Op.EMBEDDING, const(b, "table", table), ids)
        return [b.op(Op.ADD, e, x)]

    g = make_graph(
        {"ids": TensorType(DType.int64, (3,)), "x": TensorType(F32, (3, 8))}, body, constants={"table": table}
    )
    out = convert_precision(g, "bf16")
    assert out.constants["table"].dtype == BF16.np
    emb = _node(out, Op.EMBEDDING)
    assert emb.outputs[0].type.dtype is BF16  # gathers the stored rows ...
    add = _node(out, Op.ADD)
    assert all(v.type.dtype is F32 for v in add.inputs)  # ... and casts them up for the float32 add
    ids, x = np.array([0, 9, 4]), RNG.standard_normal((3, 8)).astype(np.float32)
    (y,) = run_graph(lower(out), [ids, x], {})
    np.testing.assert_array_equal(y, table.astype(BF16.np).astype(np.float32)[ids] + x)


def test_fp16_keeps_out_of_range_values_in_float32() -> None:
    big = np.full((16, 16), 1e6, np.float32)

    def body(b: Builder, x):
        y = b.op(Op.MATMUL, x, const(b, "big", big))
        return [b.op(Op.ADD, y, b.full(-1e9, F32))]

    g = make_graph({"x": TensorType(F32, (2, 16))}, body, constants={"big": big})
    out = convert_precision(g, "fp16")
    verify(out, stage="precision")
    assert out.constants["big"].dtype == np.float32
    assert all(v.type.dtype is F32 for v in _node(out, Op.MATMUL).inputs)
    assert not fits(1e9, F16) and fits(1e9, BF16) and fits(-np.inf, F16)
    # In bf16 the same graph goes low: both values fit.
    bf = convert_precision(g, "bf16")
    assert all(v.type.dtype is BF16 for v in _node(bf, Op.MATMUL).inputs)


def test_scalar_out_of_fp16_range_promotes_to_float32() -> None:
    def body(b: Builder, x, y):
        s = b.op(Op.MATMUL, x, y)
        return [b.op(Op.ADD, s, b.full(-1e9, F32))]

    t = TensorType(F32, (4, 4))
    out = convert_precision(make_graph({"x": t, "y": t}, body), "fp16")
    add = _node(out, Op.ADD)
    assert all(v.type.dtype is F32 for v in add.inputs)
    assert _producer(out, add.inputs[1]).attrs["value"] == -1e9


def test_explicit_casts_and_integer_ops_are_kept() -> None:
    def body(b: Builder, x, i):
        h = b.op(Op.MATMUL, x, x)
        return [b.cast(h, F32), b.op(Op.MATMUL, i, i)]

    g = make_graph({"x": TensorType(F32, (4, 4)), "i": TensorType(DType.int32, (4, 4))}, body)
    out = convert_precision(g, "bf16")
    verify(out, stage="precision")
    mms = [n for n in out.nodes if n.op is Op.MATMUL]
    assert [n.outputs[0].type.dtype for n in mms] == [BF16, DType.int32]
    assert [v.type.dtype for v in out.outputs] == [F32, DType.int32]


def test_fp32_and_tf32_leave_the_graph_alone() -> None:
    g = _block()
    assert convert_precision(g, "fp32") is g and convert_precision(g, "tf32") is g


def test_mark_tf32_only_marks_float32_contractions() -> None:
    def body(b: Builder, x, h):
        return [b.op(Op.MATMUL, x, x), b.op(Op.MATMUL, h, h)]

    g = make_graph({"x": TensorType(F32, (4, 4)), "h": TensorType(F16, (4, 4))}, body)
    out = mark_tf32(g)
    verify(out, stage="tf32")
    assert [n.attrs.get("allow_tf32", False) for n in out.nodes] == [True, False]
    x, h = RNG.standard_normal((4, 4)).astype(np.float32), RNG.standard_normal((4, 4)).astype(np.float16)
    for a, b in zip(run_graph(out, [x, h], {}), run_graph(g, [x, h], {})):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("dtype", "value", "message"), [(F32, 1, "must be a bool"), (F16, True, "float32 inputs")])
def test_allow_tf32_attr_is_checked(dtype: DType, value: object, message: str) -> None:
    b = Builder()
    x = b.new_value(TensorType(dtype, (2, 2)))
    with pytest.raises(ShapeError, match=message):
        b.op(Op.MATMUL, x, x, allow_tf32=value)
