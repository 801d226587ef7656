"""Gather index rules: PyTorch's [0, n) by default, ONNX's [-n, n) with negative_indices=True; a bad id is an
ExecError naming the op's location, the graph input the ids come from and the valid range."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.errors import ExecError, ShapeError
from aotc.ir import Builder, DType, Graph, Symbol, TensorType, sym
from aotc.ir.evaluate import GraphRunner, run_graph
from aotc.ir.gather_ids import IndexRangeError, checked_indices, index_error_message, index_range, index_source
from aotc.ir.ops import OPS, Op
from aotc.ir.shapes import ShapeCtx
from aotc.ir.types import Attrs
from aotc.lowering.decompose import decompose

F32, I32, I64 = DType.float32, DType.int32, DType.int64
TABLE = np.arange(20, dtype=np.float32).reshape(5, 4)
BIG = np.iinfo(np.int64).max
SMALL = np.iinfo(np.int64).min


@pytest.mark.parametrize("ids", [[0], [4], [0, 4, 2], []])
def test_strict_rule_takes_zero_to_n(ids: list[int]) -> None:
    idx = np.array(ids, np.int64)
    (got,) = OPS[Op.GATHER].ref([TABLE, idx], Attrs(axis=0))
    np.testing.assert_array_equal(got, TABLE[idx])


@pytest.mark.parametrize(
    ("ids", "bad", "pos"), [([-1], -1, (0,)), ([5], 5, (0,)), ([1, BIG], BIG, (1,)), ([2, 3, SMALL], SMALL, (2,))]
)
def test_strict_rule_refuses_negative_and_too_large(ids: list[int], bad: int, pos: tuple[int, ...]) -> None:
    with pytest.raises(IndexRangeError) as info:
        OPS[Op.GATHER].ref([TABLE, np.array(ids, np.int64)], Attrs(axis=0))
    assert (info.value.value, info.value.low, info.value.high, info.value.position) == (bad, 0, 5, pos)


def test_onnx_rule_wraps_negative_ids_and_refuses_below_minus_n() -> None:
    attrs = Attrs(axis=0, negative_indices=True)
    (got,) = OPS[Op.GATHER].ref([TABLE, np.array([-1, -5, 0, 4], np.int32)], attrs)
    np.testing.assert_array_equal(got, TABLE[[4, 0, 0, 4]])
    for bad in (-6, 5, SMALL, BIG):
        with pytest.raises(IndexRangeError, match=rf"index {bad} .* outside the valid range \[-5, 5\)"):
            OPS[Op.GATHER].ref([TABLE, np.array([0, bad], np.int64)], attrs)


def test_embedding_reference_and_decomposition_keep_the_rule() -> None:
    ids = np.array([[-1, 2]], np.int64)
    with pytest.raises(IndexRangeError):
        OPS[Op.EMBEDDING].ref([TABLE, ids], Attrs())
    (got,) = OPS[Op.EMBEDDING].ref([TABLE, ids], Attrs(negative_indices=True))
    np.testing.assert_array_equal(got, TABLE[[[4, 2]]])
    for extra in ({}, {"negative_indices": True}):
        b = Builder(ShapeCtx({}))
        w, i = b.new_value(TensorType(F32, (5, 4))), b.new_value(TensorType(I64, (1, 2)))
        y = b.op(Op.EMBEDDING, w, i, **extra)
        lowered = decompose(Graph((w, i), ("w", "i"), tuple(b.nodes), (y,), 0))
        (gather,) = lowered.nodes
        assert gather.op is Op.GATHER and gather.attrs == Attrs(axis=0, **extra)


def test_rule_attr_must_be_a_bool() -> None:
    types = [TensorType(F32, (5, 4)), TensorType(I64, (2,))]
    for op, attrs in ((Op.GATHER, {"axis": 0}), (Op.EMBEDDING, {})):
        with pytest.raises(ShapeError, match="negative_indices"):
            OPS[op].infer(types, Attrs(attrs, negative_indices=1), ShapeCtx({}))


def test_checked_indices_passes_good_ids_through_unchanged() -> None:
    idx = np.array([0, 3], np.int32)
    assert checked_indices(idx, 5, negative_indices=False) is idx
    assert checked_indices(idx, 5, negative_indices=True) is idx  # nothing to wrap: no copy


def test_message_wording() -> None:
    assert (
        index_error_message("gather at model.py:12", 0, 512, "input_ids", -1, (0, 3))
        == "gather at model.py:12: index -1 in input 'input_ids' (at [0, 3]) is outside the valid range [0, 512)"
    )
    # a kernel's error flag knows neither the value nor where it sits
    low, high = index_range(sym("vocab"), negative_indices=True)
    assert (
        index_error_message("gather", low, high, "ids")
        == "gather: an index in input 'ids' is outside the valid range [-vocab, vocab)"
    )
    assert index_error_message("gather", 0, 5, None, 7) == (
        "gather: index 7 (computed inside the model) is outside the valid range [0, 5)"
    )


def _graph(build, ids_type: TensorType) -> Graph:
    b = Builder(ShapeCtx({"s": (1, 8)}), loc="model.py:12")
    ids = b.new_value(ids_type)
    table = b.new_value(TensorType(F32, (5, 4)))
    y = b.op(Op.GATHER, table, build(b, ids), axis=0)
    return Graph((ids, table), ("input_ids", "table"), tuple(b.nodes), (y,), 0, (Symbol("s", 1, 8),))


def test_runner_names_the_input_the_ids_come_from() -> None:
    g = _graph(lambda b, ids: b.cast(ids, I64), TensorType(I32, (2, sym("s"))))
    runner = GraphRunner(g)
    ids = np.array([[0, 1, 2], [3, 5, 4]], np.int32)
    with pytest.raises(ExecError) as info:
        runner.run([ids, TABLE], {"s": 3})
    assert str(info.value) == (
        "gather at model.py:12: index 5 in input 'input_ids' (at [1, 1]) is outside the valid range [0, 5)"
    )
    # the runner holds no state from the failed call
    (y,) = runner.run([ids.clip(0, 4), TABLE], {"s": 3})
    np.testing.assert_array_equal(y, TABLE[ids.clip(0, 4)])


def test_runner_drops_the_position_after_a_reshape_and_the_name_after_arithmetic() -> None:
    moved = _graph(lambda b, ids: b.reshape(ids, (6,)), TensorType(I64, (2, 3)))
    with pytest.raises(ExecError, match=r"^gather at model.py:12: index -1 in input 'input_ids' is outside"):
        run_graph(moved, [np.array([[0, 1, 2], [3, -1, 4]]), TABLE], {})
    computed = _graph(lambda b, ids: b.op(Op.ADD, ids, b.full(3, I64)), TensorType(I64, (2,)))
    with pytest.raises(ExecError, match=r"^gather at model.py:12: index 6 \(computed inside the model\)"):
        run_graph(computed, [np.array([0, 3]), TABLE], {})
    narrowed = _graph(lambda b, ids: b.cast(ids, I32), TensorType(I64, (2,)))
    assert index_source(narrowed, narrowed.nodes[-1]) == (None, False)  # int64 -> int32 may change an id
