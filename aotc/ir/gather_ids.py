"""Ids of gather-like ops: which ids are valid, the check the numpy references run, and the one message every
backend raises for a bad id.

Two rules exist. aotc models follow PyTorch's ``nn.Embedding``: an id must lie in ``[0, n)``. ONNX ``Gather``
also takes ``[-n, n)``, a negative id counting from the end. A GATHER node says which with its
``negative_indices`` attr (absent: the strict rule). The cpu backend learns the offending value from the
reference; a GPU kernel only sets an error flag, so the message builder takes the value as optional.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce

import numpy as np

from aotc.errors import ExecError
from aotc.ir.graph import Graph
from aotc.ir.ops.base import Op
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic import SymExpr, add, mul, smax, smin, to_infix
from aotc.ir.types import Attrs, Node, ShapeDim, Value

NEGATIVE_INDICES = "negative_indices"
# The ops that gather rows of their operand 0 by the ids in operand 1 along an axis (an embedding's is 0), with
# NEGATIVE_INDICES saying which rule their ids follow: GATHER in a primitive graph, EMBEDDING too in a source one.
GATHER_OPS = frozenset({Op.GATHER, Op.EMBEDDING})

# Ops through which an id reaches the gather unchanged in value (only moved or widened), so a bad id can be
# blamed on the graph input it came from. CAST also keeps each id at its position.
_VALUE_PRESERVING = frozenset({Op.CAST, Op.RESHAPE, Op.PERMUTE, Op.BROADCAST, Op.SLICE, Op.FLIP})


class IndexRangeError(ExecError):
    """An id outside the valid range of a gather; ``low``/``high`` bound it as ``[low, high)``.

    Raised by the references without knowing where they run; the graph runner re-raises it with the op's
    location and the input the ids come from (see :func:`index_error_message`).
    """

    def __init__(self, value: int, low: int, high: int, position: tuple[int, ...]) -> None:
        self.value, self.low, self.high, self.position = value, low, high, position
        super().__init__(f"index {value} (at {list(position)}) is outside the valid range [{low}, {high})")


def allows_negative(attrs: Attrs | Mapping[str, object]) -> bool:
    return bool(attrs.get(NEGATIVE_INDICES, False))


def index_range(n: ShapeDim, negative_indices: bool) -> tuple[ShapeDim, ShapeDim]:
    """``(low, high)`` with valid ids in ``[low, high)`` for a dim of size ``n`` (possibly symbolic)."""
    return (mul(n, -1) if negative_indices else 0), n


def checked_indices(idx: np.ndarray, n: int, negative_indices: bool) -> np.ndarray:
    """``idx`` with negative ids wrapped (where allowed); IndexRangeError for the first id out of range."""
    low, high = index_range(n, negative_indices)
    if idx.size == 0:
        return idx
    lo, hi = idx.min(), idx.max()
    if lo < low or hi >= high:
        bad = np.argwhere((idx < low) | (idx >= high))[0]
        pos = tuple(int(p) for p in bad)
        raise IndexRangeError(int(idx[pos]), int(low), int(high), pos)
    return np.where(idx < 0, idx + n, idx) if negative_indices and lo < 0 else idx


def index_error_message(
    where: str,
    low: ShapeDim,
    high: ShapeDim,
    input_name: str | None = None,
    value: int | None = None,
    position: tuple[int, ...] | None = None,
) -> str:
    """The one wording of a bad-index error, e.g.
    ``gather at model.py:12: index -1 in input 'input_ids' (at [0, 3]) is outside the valid range [0, 512)``.

    ``where`` names the op and its source location; ``value`` and ``position`` are None where the backend only
    knows that some id was out of range (a kernel's error flag).
    """
    what = "an index" if value is None else f"index {value}"
    if input_name is not None:
        what += f" in input {input_name!r}"
        if position is not None and value is not None:
            what += f" (at {list(position)})"
    else:
        what += " (computed inside the model)"
    return f"{where}: {what} is outside the valid range [{_dim(low)}, {_dim(high)})"


def _dim(d: ShapeDim) -> str:
    return to_infix(d) if isinstance(d, SymExpr) else str(d)


def op_where(node: Node) -> str:
    """``gather at model.py:12``, or the op name alone when the node has no location."""
    return f"{node.op.value} at {node.loc}" if node.loc else node.op.value


def index_source(graph: Graph, node: Node, operand: int = 1) -> tuple[str | None, bool]:
    """The name of the graph input that operand ``operand`` of ``node`` carries ids from, or None when they are
    computed; and whether each id still sits at the same position as in that input."""
    return value_source(graph, node.inputs[operand])


def value_source(graph: Graph, v: Value) -> tuple[str | None, bool]:
    """index_source for the ids ``v`` carries."""
    producers = {o.id: n for n in graph.nodes for o in n.outputs}
    inputs = {v.id: name for v, name in zip(graph.inputs, graph.input_names)}
    same_place = True
    while v.id not in inputs:
        src = producers.get(v.id)
        if src is None or src.op not in _VALUE_PRESERVING:
            return None, False
        x = src.inputs[0]
        if src.op is Op.CAST and not (x.type.dtype.is_int and x.type.dtype.itemsize <= v.type.dtype.itemsize):
            return None, False  # a narrowing or float cast changes the id, so the input's value would differ
        same_place = same_place and src.op is Op.CAST
        v = x
    return inputs[v.id], same_place


def coordinate_columns(graph: Graph, node: Node) -> list[Value] | None:
    """The coordinate columns of a SCATTER's indices as graph values, where the graph builds them one by one: a
    concat of ``(..., 1)`` parts along the last axis (as every state write does, aotc/frontend/state.py), or
    indices with one column; None otherwise."""
    idx = node.inputs[1]
    k = idx.type.shape[-1] if idx.type.rank else 0
    src = next((n for n in graph.nodes if idx in n.outputs), None)
    last = idx.type.rank - 1
    if src is not None and src.op is Op.CONCAT and len(src.inputs) == k and src.attrs.get("axis") in (-1, last):
        return list(src.inputs)
    return [idx] if k == 1 else None


def coordinate_sources(graph: Graph, node: Node) -> list[str | None]:
    """Per coordinate column of a SCATTER's indices, the graph input its ids come from unchanged in value (through
    the moves and widening casts of index_source), or None (computed, or not built column by column)."""
    columns = coordinate_columns(graph, node)
    if columns is None:
        k = node.inputs[1].type.shape[-1] if node.inputs[1].type.rank else 0
        return [None] * (k if isinstance(k, int) else 0)
    return [value_source(graph, col)[0] for col in columns]


# -- ids the graph proves valid -------------------------------------------------------------------------------------
# An interval [low, high] (symbolic ends) holding every id a value can carry, for the ops below; any other producer
# (a graph input, a weight, an op not modelled here) proves nothing.
_Interval = tuple[ShapeDim, ShapeDim]
# Ops whose every output element is one of their operand 0's elements.
_MOVES = _VALUE_PRESERVING - {Op.CAST}
_UNKNOWN = 2**62  # ShapeCtx.bounds's answer for an expression it cannot bound


def ids_proved_valid(graph: Graph, node: Node, ctx: ShapeCtx) -> bool:
    """Whether every id the gather ``node`` can read lies in ``[0, n)`` (n: its gathered axis) for every binding of
    the symbols that passes the graph's guards, proved from how the graph computes the ids: ``iota`` (arange) over
    a dim, full-valued scalars, moves (reshape, permute, broadcast, slice, flip, concat), integer casts, add,
    subtract, minimum and maximum. Anything else (ids from an input, a weight, an op not modelled) is not proved,
    and neither is a negative id, whichever rule the gather follows."""
    producers = {o.id: n for n in graph.nodes for o in n.outputs}
    found = _id_interval(node.inputs[1], producers, ctx, {})
    if found is None:
        return False
    low, high = found
    size = node.inputs[0].type.shape[node.attrs.get("axis", 0)]
    return ctx.proves_nonneg(low) and ctx.proves_nonneg(add(size, mul(add(high, 1), -1)))


def ids_nonnegative(graph: Graph, v: Value, ctx: ShapeCtx) -> bool:
    """Whether every id ``v`` carries is proved >= 0 from how the graph computes it (as ids_proved_valid)."""
    producers = {o.id: n for n in graph.nodes for o in n.outputs}
    found = _id_interval(v, producers, ctx, {})
    return found is not None and ctx.proves_nonneg(found[0])


def _id_interval(
    v: Value, producers: dict[int, Node], ctx: ShapeCtx, memo: dict[int, _Interval | None]
) -> _Interval | None:
    if v.id not in memo:
        src = producers.get(v.id)
        found = None if src is None or not v.type.dtype.is_int else _interval_of(src, producers, ctx, memo)
        memo[v.id] = found if found is not None and _fits(found, v, ctx) else None
    return memo[v.id]


def _interval_of(
    node: Node, producers: dict[int, Node], ctx: ShapeCtx, memo: dict[int, _Interval | None]
) -> _Interval | None:
    op, attrs = node.op, node.attrs
    if op is Op.IOTA:
        shape = attrs["shape"]
        return 0, add(shape[attrs.get("axis", 0) % max(len(shape), 1)], -1)
    if op is Op.FULL:
        value = attrs["value"]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, SymExpr)):
            return None
        return (value, value) if isinstance(value, SymExpr) else (int(value), int(value))
    parts = [_id_interval(x, producers, ctx, memo) for x in node.inputs]
    if not parts or any(p is None for p in parts):
        return None
    if op in _MOVES or op is Op.CAST:  # a cast of an int keeps its value where it fits (_fits checks the result)
        return parts[0]
    if op is Op.CONCAT:
        lows, highs = zip(*parts)
        return reduce(smin, lows), reduce(smax, highs)
    if len(parts) != 2:
        return None
    (a_low, a_high), (b_low, b_high) = parts
    if op is Op.ADD:
        return add(a_low, b_low), add(a_high, b_high)
    if op is Op.SUB:
        return add(a_low, mul(b_high, -1)), add(a_high, mul(b_low, -1))
    if op is Op.MINIMUM:
        return smin(a_low, b_low), smin(a_high, b_high)
    if op is Op.MAXIMUM:
        return smax(a_low, b_low), smax(a_high, b_high)
    return None


def _fits(interval: _Interval, v: Value, ctx: ShapeCtx) -> bool:
    """Whether every value in ``interval`` is one ``v``'s dtype holds, so nothing computing it wrapped around."""
    info = np.iinfo(v.type.dtype.np)
    low, high = ctx.bounds(interval[0])[0], ctx.bounds(interval[1])[1]
    return max(info.min, -_UNKNOWN) < low and high < min(info.max, _UNKNOWN)
