"""ids_proved_valid: a gather whose ids the graph computes from an arange over a dim the table covers needs no check
after the run; ids from an input, from a weight, from arithmetic the rule does not model, or from a range that may
leave the table stay unproved (and keep their check)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from aotc.ir import Builder, DType, Graph, Symbol, TensorType, sym
from aotc.ir.gather_ids import ids_proved_valid
from aotc.ir.ops import Op
from aotc.ir.symbolic import add
from aotc.ir.types import Value
from aotc.ir.verify import graph_ctx

F32, I32, I64 = DType.float32, DType.int32, DType.int64
S = sym("s")


def gather_graph(ids: Callable[[Builder, Value], Value], rows: int = 16, s_max: int = 16, guards=()) -> Graph:
    """``table[ids(b, x)]`` for an input ``x`` of shape (s,) and a table of ``rows`` rows, s in [1, s_max]."""
    symbols = (Symbol("s", 1, s_max),)
    b = Builder(graph_ctx(Graph((), (), (), (), 0, symbols)))
    x = b.new_value(TensorType(I64, (S,)))
    table = b.op(Op.CONSTANT, name="table", shape=(rows, 4), dtype=F32)
    y = b.op(Op.GATHER, table, ids(b, x), axis=0)
    constants = {"table": np.zeros((rows, 4), np.float32)}
    return Graph((x,), ("x",), tuple(b.nodes), (y,), 0, symbols, tuple(guards), constants)


def proved(g: Graph) -> bool:
    return ids_proved_valid(g, g.nodes[-1], graph_ctx(g))


def iota(b: Builder, n=S, dtype: DType = I64) -> Value:
    return b.op(Op.IOTA, shape=(n,), axis=0, dtype=dtype)


PROVED = {
    "arange(s), s <= rows": lambda b, x: iota(b),
    "arange(s) as int32": lambda b, x: b.cast(iota(b), I32),
    "arange(s)[::-1], reshaped": lambda b, x: b.reshape(b.op(Op.FLIP, iota(b), axes=(0,)), (1, S)),
    "arange(s - 1) + 1": lambda b, x: b.op(Op.ADD, iota(b, add(S, -1)), b.full(1, I64)),
    "arange(2, 2 + s) - 2": lambda b, x: b.op(Op.SUB, b.op(Op.ADD, iota(b), b.full(2, I64)), b.full(2, I64)),
    "min(arange(s) + 5, 15)": lambda b, x: b.op(Op.MINIMUM, b.op(Op.ADD, iota(b), b.full(5, I64)), b.full(15, I64)),
    "arange(s) broadcast over a batch": lambda b, x: b.op(Op.BROADCAST, iota(b), shape=(3, S)),
}


@pytest.mark.parametrize("name", PROVED)
def test_positions_from_an_arange_the_table_covers_are_proved(name: str) -> None:
    assert proved(gather_graph(PROVED[name]))


def test_a_constant_offset_is_proved_while_the_table_still_covers_it() -> None:
    shifted = lambda b, x: b.op(Op.ADD, iota(b), b.full(2, I64))  # noqa: E731
    assert proved(gather_graph(shifted, rows=16, s_max=14))
    assert not proved(gather_graph(shifted, rows=16, s_max=15))  # s = 15 reads row 16


NOT_PROVED = {
    "ids from the input, shifted": lambda b, x: b.op(Op.ADD, x, b.full(1, I64)),
    "arange(s) * 2 (not modelled)": lambda b, x: b.op(Op.MUL, iota(b), b.full(2, I64)),
    "arange(s) - 1 (negative)": lambda b, x: b.op(Op.SUB, iota(b), b.full(1, I64)),
    "a float arange cast to int": lambda b, x: b.cast(iota(b, dtype=F32), I64),
    "arange(s) + input": lambda b, x: b.op(Op.ADD, iota(b), x),
    "max(arange(s), 16)": lambda b, x: b.op(Op.MAXIMUM, iota(b), b.full(16, I64)),
}


@pytest.mark.parametrize("name", NOT_PROVED)
def test_ids_the_rule_cannot_bound_are_not_proved(name: str) -> None:
    assert not proved(gather_graph(NOT_PROVED[name]))


def test_an_arange_longer_than_the_table_is_not_proved() -> None:
    assert not proved(gather_graph(lambda b, x: iota(b), rows=16, s_max=17))


def test_a_sum_that_would_wrap_its_dtype_is_not_proved() -> None:
    # int32: arange(s) + (2**31 - 1) wraps to negative ids for s > 1, which min(..., 3) keeps
    big = 2**31 - 1
    for dtype, ok in ((I32, False), (I64, True)):
        ids = lambda b, x: b.op(Op.MINIMUM, b.op(Op.ADD, iota(b, dtype=dtype), b.full(big, dtype)), b.full(3, dtype))  # noqa: B023, E731
        assert proved(gather_graph(ids)) is ok
