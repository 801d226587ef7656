"""Gather/embedding kernels: an indexed load fused into its pointwise kernel, bounds-checked.

An id outside the valid range sets the kernel's error flag and is never read; the call then fails with
ExecError naming the input. aotc graphs take [0, n); a GATHER with ``negative_indices`` (ONNX) takes [-n, n).
"""

from __future__ import annotations

import numpy as np
import pytest

from aotc.errors import ExecError
from aotc.ir import DType, Op, Symbol, TensorType
from aotc.ir.gather_ids import NEGATIVE_INDICES
from aotc.ir.symbolic import sym
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check, run_schedule

F32, I64 = DType.float32, DType.int64
SEQ = Symbol("seq", 1, 16)


def _embedding(negative: bool = False):
    def body(b, table, ids, pos):
        attrs = {NEGATIVE_INDICES: True} if negative else {}
        tok = b.op(Op.GATHER, table, ids, axis=0, **attrs)
        where = b.op(Op.GATHER, pos, b.op(Op.IOTA, shape=(sym("seq"),), axis=0, dtype=I64), axis=0)
        return [b.op(Op.ADD, tok, where)]

    inputs = {
        "table": TensorType(F32, (10, 4)),
        "ids": TensorType(I64, (2, sym("seq"))),
        "pos": TensorType(F32, (16, 4)),
    }
    return make_graph(inputs, body, symbols=(SEQ,))


def _feeds(ids: np.ndarray) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((10, 4)).astype(np.float32), ids, rng.standard_normal((16, 4)).astype(np.float32)]


def test_first_and_last_valid_ids_and_fusion() -> None:
    g = _embedding()
    ids = np.array([[0, 9, 3], [9, 0, 0]], np.int64)
    s = check(g, _feeds(ids), {"seq": 3})
    (k,) = s.kernels  # token gather + position gather + add: one kernel
    assert k.fused.count("gather") == 2 and len(k.checks) == 2 and s.flags == 2
    assert {(c.low, c.high) for c in k.checks} == {(0, 10), (0, 16)}
    assert k.checks[0].input == "ids"


@pytest.mark.parametrize("bad", [-1, 10, 2**40, -(2**40)])
def test_out_of_range_id_raises(bad: int) -> None:
    g = _embedding()
    ids = np.array([[1, 2, bad], [0, 0, 0]], np.int64)
    with pytest.raises(ExecError, match="ids"):
        run_schedule(g, _feeds(ids), {"seq": 3})


def test_negative_ids_wrap_under_the_onnx_rule() -> None:
    g = _embedding(negative=True)
    ids = np.array([[-1, -10, 9], [0, -5, 4]], np.int64)
    s = check(g, _feeds(ids), {"seq": 3})
    assert (s.kernels[0].checks[0].low, s.kernels[0].checks[0].high) != (0, 10)
    with pytest.raises(ExecError):
        run_schedule(g, _feeds(np.array([[-11, 0, 0], [0, 0, 0]], np.int64)), {"seq": 3})


def test_gather_on_an_inner_axis_with_int32_ids() -> None:
    def body(b, data, ids):
        return [b.op(Op.GATHER, data, ids, axis=1)]

    g = make_graph({"d": TensorType(F32, (3, 5, 2)), "i": TensorType(DType.int32, (2, 2))}, body)
    data = np.arange(30, dtype=np.float32).reshape(3, 5, 2)
    check(g, [data, np.array([[4, 0], [2, 4]], np.int32)])


def test_gather_with_a_scalar_id() -> None:
    def body(b, data, i):
        return [b.op(Op.GATHER, data, i, axis=1)]

    g = make_graph({"d": TensorType(F32, (3, 5)), "i": TensorType(I64, ())}, body)
    data = np.arange(15, dtype=np.float32).reshape(3, 5)
    check(g, [data, np.array(4, np.int64)])
    with pytest.raises(ExecError):
        run_schedule(g, [data, np.array(5, np.int64)], {})
