"""Scatter kernels under the interpreter against the cpu backend: a copy of ``data`` (launch 1), then the updates
written into it in place (launch 2); see aotc/kernels/scatter.py.

ScatterND and ScatterElements shapes of the ONNX node suite, negative ids, every reduction (with repeated
coordinates, except for ``none``, where ONNX leaves them undefined), out-of-range ids raising ExecError, how the
two launches fuse with producers and consumers, and a whole small model compiled and run on ``interpret``.
Float reductions use integer-valued data, so every order of combining gives the reference's result exactly.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import aotc
from aotc.artifact.plan_checks import check_schedule
from aotc.compiler import compile_graph
from aotc.errors import ExecError
from aotc.ir import DType, Op, Symbol, TensorType
from aotc.ir.evaluate import GraphRunner
from aotc.ir.schedule import ArgKind
from aotc.ir.symbolic import sym
from aotc.ir.symbolic_values import evaluate
from aotc.ir.variant import Variant
from aotc.kernels.scheduler import schedule_graph
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from aotc.onnx import import_onnx
from aotc.runtime.backends.interpret import InterpretBackend
from aotc.runtime.backends.triton_interp import launch
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check, compile_renamed_for_sm80, in_fresh_process, run_schedule

F32, F16, BF16, I32, I64, BOOL = DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.int64, DType.bool
NP = {F32: np.float32, F16: np.float16, BF16: ml_dtypes.bfloat16, I32: np.int32, I64: np.int64, BOOL: np.bool_}
EXACT = (0.0, 0.0)


def _scatter_graph(data: tuple, idx: tuple, dtype: DType = F32, reduction: str = "none", idx_dtype: DType = I64):
    upd = idx[:-1] + data[idx[-1] :]

    def body(b, d, i, u):
        return [b.op(Op.SCATTER, d, i, u, reduction=reduction)]

    inputs = {"data": TensorType(dtype, data), "indices": TensorType(idx_dtype, idx), "updates": TensorType(dtype, upd)}
    return make_graph(inputs, body)


def _values(shape: tuple, dtype: DType, rng: np.random.Generator) -> np.ndarray:
    if dtype is BOOL:
        return rng.random(shape) < 0.5
    return rng.integers(-4, 5, shape).astype(NP[dtype])  # integer-valued: exact in every dtype


def _feeds(data: tuple, ids: np.ndarray, dtype: DType, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    upd = ids.shape[:-1] + data[ids.shape[-1] :]
    return [_values(data, dtype, rng), ids, _values(upd, dtype, rng)]


def _two_launches(s):
    copy, writes = s.kernels
    assert "scatter_copy" in copy.name and "scatter" in writes.name and "atomic" not in copy.source
    assert copy.outputs == writes.outputs and writes.outputs[0] in writes.inputs  # updated in place
    return copy, writes


def test_scatternd_writes_whole_slices() -> None:
    """ONNX test_scatternd: rows 0 and 2 of a [4, 4, 4] replaced, one written from the end."""
    ids = np.array([[0], [-2]], np.int64)
    g = _scatter_graph((4, 4, 4), (2, 1))
    s = check(g, _feeds((4, 4, 4), ids, F32), tol=EXACT)
    _, writes = _two_launches(s)
    ((lo, hi),) = [(c.low, c.high) for c in writes.checks]
    assert (lo, hi) == (-4, 4) and writes.checks[0].input == "indices" and s.flags == 1


@pytest.mark.parametrize("dtype", [F32, F16, BF16, I32, I64, BOOL], ids=lambda d: d.value)
def test_scatternd_element_indices_in_every_dtype(dtype: DType) -> None:
    """Full coordinates (k = rank), int32 ids, some negative."""
    ids = np.array([[0, 1], [2, -1], [-3, 0], [1, 2]], np.int32)
    g = _scatter_graph((3, 3), (4, 2), dtype, idx_dtype=I32)
    check(g, _feeds((3, 3), ids, dtype), tol=EXACT)


def test_extra_leading_index_dims_and_partial_coordinates() -> None:
    ids = np.array([[[0, 1], [2, 0]], [[-1, -1], [1, 1]]], np.int64)  # [2, 2, 2]: pairs into [3, 2, 5]
    g = _scatter_graph((3, 2, 5), (2, 2, 2))
    check(g, _feeds((3, 2, 5), ids, F32), tol=EXACT)


@pytest.mark.parametrize("reduction", ["none", "mul"])
def test_a_single_update_is_one_id_for_every_lane(reduction: str) -> None:
    """indices [1, 1] into [3]: the id and the update are scalars, broadcast over the program's lanes."""
    g = _scatter_graph((3,), (1, 1), reduction=reduction)
    for i in (-1, 2):
        check(g, _feeds((3,), np.array([[i]], np.int64), F32), tol=EXACT)


@pytest.mark.parametrize("reduction", ["none", "add", "mul"])
def test_constant_ids_and_updates(reduction: str) -> None:
    """Ids and updates that are FULL constants are literals in the kernel: broadcast over the lanes."""

    def body(b, x):
        ids, upd = b.full(-3, I64, (2, 1)), b.full(2.0, F32, (2, 3))
        return [b.op(Op.SCATTER, x, ids, upd, reduction=reduction)]

    g = make_graph({"x": TensorType(F32, (4, 3))}, body)
    check(g, [np.arange(12, dtype=np.float32).reshape(4, 3)], tol=EXACT)


def test_one_id_broadcast_to_every_update() -> None:
    """ids = broadcast of a [1, 1] input: each lane's id is the same scalar load."""

    def body(b, x, i, u):
        return [b.op(Op.SCATTER, x, b.op(Op.BROADCAST, i, shape=(2, 1)), u, reduction="add")]

    g = make_graph({"x": TensorType(F32, (4, 3)), "i": TensorType(I64, (1, 1)), "u": TensorType(F32, (2, 3))}, body)
    x, u = np.zeros((4, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    check(g, [x, np.array([[-2]], np.int64), u], tol=EXACT)
    with pytest.raises(ExecError, match="scatter"):
        run_schedule(g, [x, np.array([[4]], np.int64), u], {})


def test_nothing_to_write_is_a_copy() -> None:
    g = _scatter_graph((3, 4), (0, 2))
    check(g, _feeds((3, 4), np.zeros((0, 2), np.int64), F32), tol=EXACT)


def _onnx_scatter(op: str, data: tuple, idx: tuple, dtype: int = TensorProto.FLOAT, **attrs) -> bytes:
    upd = idx if op == "ScatterElements" else idx[:-1] + data[idx[-1] :]
    node = helper.make_node(op, ["data", "indices", "updates"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "scatter",
        [
            helper.make_tensor_value_info("data", dtype, data),
            helper.make_tensor_value_info("indices", TensorProto.INT64, idx),
            helper.make_tensor_value_info("updates", dtype, upd),
        ],
        [helper.make_tensor_value_info("y", dtype, data)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


@pytest.mark.parametrize(
    "data, ids, axis",
    [
        ((3, 3), [[1, 0, 2], [0, 2, 1]], 0),  # test_scatter_elements_without_axis
        ((1, 5), [[1, 3]], 1),  # test_scatter_elements_with_axis
        ((1, 5), [[1, -3]], 1),  # test_scatter_elements_with_negative_indices
        ((2, 3, 4), [[[3, -1], [0, 2]]], 2),  # a 3-d slab on the last axis
    ],
)
def test_scatter_elements_through_the_onnx_importer(data: tuple, ids: list, axis: int) -> None:
    """ScatterElements imports as a scatter whose other coordinates are iotas: index math in launch 2."""
    idx = np.array(ids, np.int64)
    g = lower(import_onnx(_onnx_scatter("ScatterElements", data, idx.shape, axis=axis)), CompileOptions())
    rng = np.random.default_rng(0)
    s = check(g, [_values(data, F32, rng), idx, _values(idx.shape, F32, rng)], tol=EXACT)
    _, writes = _two_launches(s)
    assert {"iota", "concat"} <= set(writes.fused)


# -- reductions ----------------------------------------------------------------------------------

DUPLICATES = np.array([[1], [3], [1], [-5], [1], [0]], np.int64)  # row 1 three times, 0 twice (0 and -5)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [F32, F16, BF16, I32, I64], ids=lambda d: d.value)
def test_reductions_combine_repeated_coordinates(reduction: str, dtype: DType) -> None:
    g = _scatter_graph((5, 3), (6, 1), dtype, reduction)
    s = check(g, _feeds((5, 3), DUPLICATES, dtype, seed=1), tol=EXACT)
    _, writes = _two_launches(s)
    native = (reduction == "add" and dtype in (F32, I32, I64)) or (reduction in ("max", "min") and dtype in (I32, I64))
    assert ("tl.atomic_cas" in writes.source) != native
    assert (f"tl.atomic_{reduction}" in writes.source) == native


@pytest.mark.parametrize("reduction", ["max", "min"])
def test_float_max_and_min_propagate_nan_from_data_and_updates(reduction: str) -> None:
    g = _scatter_graph((4, 2), (5, 1), F32, reduction)
    data = np.array([[np.nan, 1.0], [2.0, -0.5], [-np.inf, 3.0], [0.0, 1.0]], np.float32)
    ids = np.array([[0], [1], [1], [2], [3]], np.int64)
    upd = np.array([[5.0, 2.0], [np.nan, 1.0], [7.0, -9.0], [np.inf, np.nan], [-1.0, 1.0]], np.float32)
    check(g, [data, ids, upd], tol=EXACT)
    want = GraphRunner(g).run([data, ids, upd], {})[0]
    assert np.isnan(want[[0, 1, 2], [0, 0, 1]]).all()  # the cases above do reach NaN


def test_integer_add_and_mul_wrap_as_numpy() -> None:
    g = _scatter_graph((3,), (4, 1), I32, "mul")
    big = np.array([70000, 70000, -3, 5], np.int32)
    check(g, [np.array([1, 2, 3], np.int32), np.array([[0], [0], [1], [-1]], np.int64), big])
    g = _scatter_graph((2,), (3, 1), I64, "add")
    near = np.array([2**62, 2**62, -1], np.int64)
    check(g, [np.array([2**62, 0], np.int64), np.array([[0], [0], [1]], np.int64), near])


# -- bad ids ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("coord, bad", [(0, 4), (0, -5), (0, 2**40), (0, -(2**40)), (1, 3), (1, -4)])
def test_out_of_range_id_raises_and_the_next_call_works(coord: int, bad: int) -> None:
    """Coordinates into [4, 3] lie in [-4, 4) and [-3, 3)."""
    g = _scatter_graph((4, 3), (3, 2), reduction="add")
    program = InterpretBackend().prepare(Variant(g, schedule_graph(g)), {})
    good = np.array([[0, 1], [3, -1], [-4, 2]], np.int64)
    feeds = _feeds((4, 3), good, F32)
    ids = good.copy()
    ids[1, coord] = bad
    with pytest.raises(ExecError, match=r"scatter: an index in input 'indices' is outside the valid range"):
        program.run([feeds[0], ids, feeds[2]], {})
    (got,) = program.run(feeds, {})
    np.testing.assert_array_equal(got, GraphRunner(g).run(feeds, {})[0])


def test_a_bad_id_sets_its_flag_and_writes_nothing() -> None:
    """Launch 2 alone: the bad update is dropped (not written at the clamped coordinate 0), the others land."""
    g = _scatter_graph((4, 3), (3, 1))
    s = schedule_graph(g)
    _, writes = _two_launches(s)
    data, ids, upd = _feeds((4, 3), np.array([[1], [7], [2]], np.int64), F32)
    out, flags = data.copy(), np.zeros(s.flags, np.int32)
    buffers = {**{v.id: x for v, x in zip(g.inputs, (data, ids, upd))}, writes.outputs[0]: out}
    args = [
        buffers[a.value] if a.kind is ArgKind.BUFFER else flags if a.kind is ArgKind.FLAG else evaluate(a.size, {})
        for a in writes.args
    ]
    launch(writes, tuple(evaluate(d, {}) for d in writes.grid), args)
    want = data.copy()
    want[[1, 2]] = upd[[0, 2]]
    np.testing.assert_array_equal(out, want)
    assert flags.tolist() == [1]


# -- fusion with producers and consumers ----------------------------------------------------------


def test_producers_fuse_into_each_launch_and_consumers_follow_the_writes() -> None:
    """data = 2x (into the copy), updates = exp(u) and ids = a cast (into the writes), out + 1 and a
    transposed output read the finished value."""
    n = Symbol("n", 1, 64)

    def body(b, x, i, u):
        out = b.op(Op.SCATTER, b.op(Op.ADD, x, x), b.cast(i, I64), b.op(Op.EXP, u), reduction="none")
        return [b.op(Op.ADD, out, b.full(1.0, F32)), b.permute(out, (1, 0))]

    inputs = {"x": TensorType(F32, (sym("n"), 3)), "i": TensorType(I32, (2, 1)), "u": TensorType(F32, (2, 3))}
    g = make_graph(inputs, body, symbols=(n,))
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal((6, 3)).astype(np.float32), np.array([[4], [-6]], np.int32)]
    s = check(g, [*feeds, rng.standard_normal((2, 3)).astype(np.float32)], {"n": 6})
    copy, writes, *readers = s.kernels
    assert "add" in copy.fused and {"exp", "cast"} <= set(writes.fused)
    scatter_out = copy.outputs[0]
    assert len(readers) == 2 and all(scatter_out in k.inputs for k in readers)
    assert any("its own kernel writes it" in d for d in s.declined)  # the transpose cannot be the copy's
    (buf,) = [b for b in s.buffers if b.value == scatter_out]
    assert (buf.first, buf.last) == (0, 3)
    check_schedule(g, s, "scatter plan")


def test_chained_scatters_and_an_output_reshape() -> None:
    """A mask built by successive writes (Swin's shifted-window mask), returned through a reshape (a View)."""

    def body(b, i1, i2):
        mask = b.full(0.0, F32, (4, 4))
        mask = b.op(Op.SCATTER, mask, i1, b.full(1.0, F32, (2, 4)))
        mask = b.op(Op.SCATTER, mask, i2, b.full(2.0, F32, (2,)))
        return [b.reshape(mask, (16,))]

    g = make_graph({"i1": TensorType(I64, (2, 1)), "i2": TensorType(I64, (2, 2))}, body)
    s = check(g, [np.array([[1], [3]], np.int64), np.array([[3, 0], [0, -1]], np.int64)], tol=EXACT)
    assert len(s.kernels) == 4 and len(s.views) == 1 and s.flags == 3
    check_schedule(g, s, "chained scatters")


def test_a_reduced_operand_is_stored_first() -> None:
    def body(b, x, i):
        return [b.op(Op.SCATTER, x, i, b.op(Op.REDUCE_SUM, x, axes=(0,), keepdim=True), reduction="add")]

    g = make_graph({"x": TensorType(F32, (3, 4)), "i": TensorType(I64, (1, 1))}, body)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    s = check(g, [x, np.array([[2]], np.int64)], tol=EXACT)
    assert [k.kind.value for k in s.kernels] == ["reduction", "scatter_copy", "scatter"]
    assert any("computed with a reduction" in d for d in s.declined)


# -- a whole model -------------------------------------------------------------------------------------


def _model() -> bytes:
    """y = relu(ScatterND(x * 2, ids, u, add) + b) @ w over a dynamic batch; ids pick rows of x."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, (4, 3), rng.standard_normal(12).astype(np.float32).tolist())
    two = helper.make_tensor("two", TensorProto.FLOAT, (), [2.0])
    bias = helper.make_tensor("bias", TensorProto.FLOAT, (4,), [0.5, -0.5, 1.0, 0.0])
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["x2"]),
        helper.make_node("ScatterND", ["x2", "ids", "u"], ["s"], reduction="add"),
        helper.make_node("Add", ["s", "bias"], ["sb"]),
        helper.make_node("Relu", ["sb"], ["r"]),
        helper.make_node("MatMul", ["r", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "scatter_model",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ("batch", 4)),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ("k", 1)),
            helper.make_tensor_value_info("u", TensorProto.FLOAT, ("k", 4)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ("batch", 3))],
        initializer=[w, two, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def test_a_model_with_a_scatter_compiles_to_kernels_and_runs_on_interpret() -> None:
    compiled = compile_graph(import_onnx(_model(), dims={"batch": (1, 8), "k": (1, 8)}))
    assert compiled.kernels.note == "" and compiled.schedule is not None
    assert any("scatter" in k.fused for k in compiled.schedule.kernels)
    interp = aotc.load(compiled.artifact_bytes, device="interpret")
    cpu = aotc.load(compiled.artifact_bytes, device="cpu")
    rng = np.random.default_rng(1)
    for batch, ids in ((3, [[0], [2], [0], [-1]]), (5, [[4]])):
        idx = np.array(ids, np.int64)
        feeds = {
            "x": rng.standard_normal((batch, 4)).astype(np.float32),
            "ids": idx,
            "u": rng.standard_normal((len(ids), 4)).astype(np.float32),
        }
        (got,), (want,) = interp.run(feeds), cpu.run(feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ExecError, match="scatter"):
        interp.run({**feeds, "ids": np.array([[5]], np.int64)})


# -- ahead-of-time compile ------------------------------------------------------------------------------

COMPILED = [("none", F32), ("none", BOOL), ("add", F32), ("max", I64), ("mul", BF16), ("max", F32)]


def compile_scatter_kernels() -> None:
    """Each form of the writes (store, atomics, compare-and-swap on 16 and 32 bits) compiles for sm_80."""
    compile_renamed_for_sm80(
        [
            (f"{reduction}_{dtype.value}", _scatter_graph((5, 3), (6, 1), dtype, reduction))
            for reduction, dtype in COMPILED
        ]
    )


def test_scatter_kernels_compile_for_sm80() -> None:
    in_fresh_process("from tests.kernel_layer.test_scatter import compile_scatter_kernels\ncompile_scatter_kernels()")
