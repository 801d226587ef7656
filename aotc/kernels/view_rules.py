"""Views, concatenation, padding and gathers as index arithmetic inside the kernel that consumes them.

Each rule takes the index its output is wanted at and asks the builder for its input at the index the
element comes from, so no view is ever copied. ``forward`` goes the other way for the bijective views
(permute, flip, reshape): where an element of the input lands in the output, for storing a graph output
that is a view of a value a kernel computes.

Indices are expressions over the kernel's index variables (``aotc.ir.index``), simplified as the views
compose, so a reshape undone by the row-major offset of the load after it costs no ``//`` or ``%``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from aotc.ir.gather_ids import allows_negative, index_range, index_source, op_where
from aotc.ir.graph import Graph
from aotc.ir.index import flatten, unflatten
from aotc.ir.ops import Op
from aotc.ir.schedule import IndexCheck, Size
from aotc.ir.symbolic import SymExpr, add, mul, smax, smin
from aotc.ir.types import Node, ShapeDim, Value
from aotc.kernels import index_text as ix
from aotc.kernels.pointwise_ops import TL_DTYPE, literal
from aotc.kernels.reach import Reach


class KernelBuilder(Protocol):
    """What the view rules use of the kernel builder (``emit.KernelBuilder``, which calls them): named here so
    this module needs nothing of the module above it."""

    graph: Graph
    checks: list[IndexCheck]
    flags: Any  # emit.FlagSlots: ``take()`` hands out an error-flag slot
    reach: Reach

    def line(self, text: str) -> None: ...
    def let(self, stem: str, expr: str) -> str: ...
    def size_arg(self, expr: int | SymExpr, stem: str = "size") -> str: ...
    def arg(self, expr: Size) -> Size: ...
    def names_of(self, e: int | SymExpr) -> int | SymExpr: ...
    def flag_arg(self) -> str: ...
    def index_var(self, text: str, extent: Size, opaque: bool = False) -> int | SymExpr: ...
    def simplify(self, e: int | SymExpr) -> int | SymExpr: ...
    def index_text(self, e: int | SymExpr, wide: bool = False) -> str: ...
    def compute(
        self,
        value: Value,
        index: Sequence[int | str | SymExpr],
        mask: str | None,
        env: Mapping[int, str],
        other: str = "0.0",
    ) -> str: ...


Index = tuple[int | SymExpr, ...]


def forward(b: KernelBuilder, node: Node, index: list[int | SymExpr]) -> list[int | SymExpr]:
    """Where the element at ``index`` of the view's input lands in its output (bijective views)."""
    src, dst = node.inputs[0].type.shape, node.outputs[0].type.shape
    if node.op is Op.PERMUTE:
        return [index[p] for p in node.attrs["perm"]]
    if node.op is Op.FLIP:
        axes = {ax % len(src) for ax in node.attrs.get("axes", ())}
        return [add(add(d, -1), mul(i, -1)) if k in axes else i for k, (i, d) in enumerate(zip(index, src))]
    return _regroup(b, src, dst, index)


def _regroup(b: KernelBuilder, have: Sequence[ShapeDim], want: Sequence[ShapeDim], index: Sequence) -> list:
    """``index`` into shape ``have`` as the index of the same row-major element in shape ``want``."""
    out: list[int | SymExpr] = [0] * len(want)
    for gh, gw in ix.reshape_groups(b.graph, tuple(have), tuple(want)):
        if len(gh) == 1 and len(gw) == 1:
            out[gw.start] = index[gh.start]
            continue
        lin = flatten([0 if ix.is_one(have[k]) else index[k] for k in gh], [have[k] for k in gh])  # in range
        for k, i in zip(gw, unflatten(lin, [want[k] for k in gw])):
            out[k] = 0 if ix.is_one(want[k]) else b.simplify(i)
    return out


def source_index(b: KernelBuilder, node: Node, index: Sequence, starts: Sequence | None = None) -> list:
    """The index into a reshape's, permute's, broadcast's, slice's or flip's input that the element at ``index`` of
    its output comes from. ``starts`` stands in for a slice's own starts (a recurrence reads step t's slice at
    ``start + t * stride``: aotc/kernels/recurrent_loop.py)."""
    x = node.inputs[0]
    src, dst = x.type.shape, node.outputs[0].type.shape
    if node.op is Op.RESHAPE:
        return _regroup(b, dst, src, index)
    if node.op is Op.PERMUTE:
        perm = node.attrs["perm"]
        out: list[int | SymExpr] = [0] * len(perm)
        for k, p in enumerate(perm):
            out[p] = index[k]
        return out
    if node.op is Op.BROADCAST:
        return list(broadcast_index(src, dst, index))
    if node.op is Op.SLICE:
        a = node.attrs
        return [add(mul(i, step), start) for i, start, step in zip(index, starts or a["starts"], a["steps"])]
    if node.op is Op.FLIP:
        axes = {ax % len(src) for ax in node.attrs.get("axes", ())}
        return [add(add(d, -1), mul(i, -1)) if k in axes else i for k, (i, d) in enumerate(zip(index, src))]
    raise ValueError(f"{node.op.value} is not a view with one source element per element")


def _view(b: KernelBuilder, node: Node, index: Index, mask: str | None, env: Mapping[int, str]) -> str:
    return b.compute(node.inputs[0], source_index(b, node, index), mask, env)


def pad(b: KernelBuilder, node: Node, index: Index, mask: str | None, env: Mapping[int, str]) -> str:
    x = node.inputs[0]
    pads = node.attrs["pads"]
    src, conds, padded, fixed = [], [], [], []
    for k, (i, d) in enumerate(zip(index, x.type.shape)):
        lo, hi = pads[2 * k], pads[2 * k + 1]
        if lo == 0 and hi == 0:
            src.append(i)
            continue
        shifted = b.simplify(add(i, mul(lo, -1)))
        j = b.let("p", b.index_text(shifted))
        if not ix.is_int(j):
            b.reach.define(j, b.names_of(shifted))
            padded.append((j, d))
        else:  # a tap at a fixed position: in [0, d) or never read
            fixed.append((int(j), d))
        src.append(b.index_var(j, d, opaque=True))  # in [0, d) wherever the load below keeps a lane
        conds.append(f"({j} >= 0) & ({j} < {b.size_arg(d)})")
    if not conds:
        return b.compute(x, src, mask, env)
    inside = b.let("inside", " & ".join(conds))
    for j, d in padded:
        b.reach.guard(inside, j, 0, b.arg(d))
    for at, d in fixed:
        b.reach.when(inside, at)
        b.reach.when(inside, add(b.arg(d), -1 - at))
    v = b.compute(x, src, and_(mask, inside), env)
    fill = literal(node.attrs.get("value", 0.0), x.type.dtype)
    return b.let("t", f"tl.where({inside}, {v}, {fill})")


def concat(b: KernelBuilder, node: Node, index: Index, mask: str | None, env: Mapping[int, str]) -> str:
    rank = len(index)
    axis = node.attrs.get("axis", 0) % rank
    i = index[axis]
    i_text = b.index_text(b.simplify(i))
    starts: list[ShapeDim] = []
    pos: ShapeDim = 0
    for x in node.inputs:
        starts.append(pos)
        pos = add(pos, x.type.shape[axis])
    parts = []
    at = b.names_of(b.simplify(i))  # what i_text holds
    for x, start in zip(node.inputs, starts):
        lo = b.size_arg(start, "start")
        hi = b.size_arg(add(start, x.type.shape[axis]), "stop")
        here = b.let("part", f"({i_text} >= {lo}) & ({i_text} < {hi})")
        # the position in this part, in [0, hi - lo) where ``here`` keeps a lane
        shifted = i_text if start == 0 and ix.is_name(i_text) else f"({i_text} - {lo})"
        src = list(index)
        src[axis] = b.index_var(shifted, x.type.shape[axis], opaque=True)
        b.reach.define(shifted, add(at, mul(b.arg(start), -1)))
        b.reach.guard(here, shifted, 0, add(b.arg(add(start, x.type.shape[axis])), mul(b.arg(start), -1)))
        parts.append((here, b.compute(x, src, and_(mask, here), env)))
    out = parts[-1][1]
    for here, v in reversed(parts[:-1]):
        out = b.let("t", f"tl.where({here}, {v}, {out})")
    return out


def gather(b: KernelBuilder, node: Node, index: Index, mask: str | None, env: Mapping[int, str]) -> str:
    data, ids = node.inputs
    axis = node.attrs.get("axis", 0) % data.type.rank
    r = ids.type.rank
    raw = b.compute(ids, index[axis : axis + r], mask, env)
    if mask is not None and all(isinstance(i, int) for i in index[axis : axis + r]):
        # one id for the whole tile: broadcast it, so its checks combine with the tile mask
        raw = b.let("ids", f"{raw} + tl.zeros_like({mask}).to({TL_DTYPE[ids.type.dtype]})")
    n = data.type.shape[axis]
    negative = allows_negative(node.attrs)
    low, high = index_range(n, negative)
    bad = b.let("bad", f"({raw} < {b.size_arg(low)}) | ({raw} >= {b.size_arg(high)})")
    slot = b.flags.take()
    flags = b.flag_arg()
    flagged = b.let("flagged", and_(mask, bad) or bad)
    b.line(f"tl.store({flags} + {slot} + tl.zeros_like({flagged}).to(tl.int32), 1, mask={flagged})")
    b.reach.access(flags, slot, None)
    name, _ = index_source(b.graph, node)
    b.checks.append(IndexCheck(slot, name or "", op_where(node), low, high))
    lo, hi = b.arg(low), b.arg(high)
    pos = raw
    if negative:
        pos = b.let("idx", f"tl.where({raw} < 0, {raw} + {b.size_arg(n)}, {raw})")
        lo, hi = smin(add(lo, b.arg(n)), 0), smax(hi, b.arg(n))  # a negative id counts from the end
    safe = b.let("idx", f"tl.where({bad}, 0, {pos})")
    b.reach.bound(safe, smax(hi, 1), smin(lo, 0))  # an id in [low, high), or 0 where it is not
    src = [*index[:axis], b.index_var(safe, n), *index[axis + r :]]  # in [0, n) on every lane
    return b.compute(data, src, and_(mask, f"({bad} == 0)"), env)


def and_(a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return f"{ix.paren(a)} & {ix.paren(b)}"


def broadcast_index(src: tuple, dst: tuple, index: Sequence) -> tuple:
    """The index into ``src`` of the element broadcast to ``index`` of ``dst`` (NumPy alignment); a broadcast
    dim gets 0, as text if ``index`` holds text there."""
    lead = len(dst) - len(src)
    return tuple(
        ("0" if isinstance(index[lead + k], str) else 0)
        if ix.is_one(d) and not ix.is_one(dst[lead + k])
        else index[lead + k]
        for k, d in enumerate(src)
    )


Rule = Callable[["KernelBuilder", Node, Index, "str | None", Mapping[int, str]], str]
RULES: dict[Op, Rule] = {
    Op.RESHAPE: _view,
    Op.PERMUTE: _view,
    Op.BROADCAST: _view,
    Op.SLICE: _view,
    Op.FLIP: _view,
    Op.PAD: pad,
    Op.CONCAT: concat,
    Op.GATHER: gather,
}
