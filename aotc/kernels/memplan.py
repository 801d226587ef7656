"""The arena: one block of memory per call holding every intermediate, reused as values die.

Sizes are symbolic, so the plan cannot pack by exact byte counts. Instead each buffer takes a *slot*: a slot
whose previous tenant was last read by an earlier kernel is reused (the one of the same size if any, else
the largest), and a slot is as large as the largest of its tenants (a symbolic max). Slots sit one after
another at 256-byte aligned offsets, so every offset is a multiple of 256 for every binding of the symbols.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aotc.ir.graph import Graph
from aotc.ir.schedule import ALIGN, Buffer, Kernel, Size, View
from aotc.ir.symbolic import add, floordiv, mul, smax
from aotc.ir.symbolic_values import bounds, evaluate
from aotc.ir.types import Value
from aotc.kernels.emit import numel


@dataclass
class _Slot:
    sizes: list[Size]  # the tenants' sizes, none provably below another: the slot holds their max
    last: int

    def size(self) -> Size:
        out = self.sizes[0]
        for s in self.sizes[1:]:
            out = smax(out, s)
        return out


def nbytes(v: Value) -> Size:
    return mul(numel(v.type.shape), v.type.dtype.itemsize)


def align(n: Size) -> Size:
    return mul(floordiv(add(n, ALIGN - 1), ALIGN), ALIGN)


def _never_below(a: Size, b: Size, ranges: Mapping[str, tuple[int, int]], multiples: Mapping[str, int]) -> bool:
    return bounds(add(a, mul(b, -1)), ranges, multiples)[0] >= 0


def plan_memory(graph: Graph, kernels: Sequence[Kernel], views: Sequence[View]) -> tuple[tuple[Buffer, ...], Size]:
    """(buffers, arena bytes) for the values the kernels write that are not graph outputs."""
    outside = {v.id for v in graph.outputs} | {v.base for v in views} | {v.value for v in views}
    values = {o.id: o for n in graph.nodes for o in n.outputs}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for k, kernel in enumerate(kernels):
        for v in kernel.outputs:
            first.setdefault(v, k)
            if first[v] != k:
                last[v] = k  # a later launch updates it in place (a scatter's writes): the buffer stays live
        for v in kernel.inputs:
            last[v] = k
    ranges, multiples = graph.ranges, graph.multiples
    slots: list[_Slot] = []
    placed: list[tuple[int, int, Size]] = []  # (value, slot, nbytes)
    for vid in sorted((v for v in first if v not in outside), key=lambda v: first[v]):
        size = nbytes(values[vid])
        free = [s for s in range(len(slots)) if slots[s].last < first[vid]]
        same = [s for s in free if size in slots[s].sizes]
        if same:
            s = same[0]
        elif free:
            s = max(free, key=lambda i: bounds(slots[i].size(), ranges, multiples)[1])
            old = slots[s].sizes
            if not any(_never_below(o, size, ranges, multiples) for o in old):
                slots[s].sizes = [o for o in old if not _never_below(size, o, ranges, multiples)] + [size]
        else:
            slots.append(_Slot([size], -1))
            s = len(slots) - 1
        slots[s].last = max(last.get(vid, first[vid]), first[vid])
        placed.append((vid, s, size))
    offsets: list[Size] = []
    pos: Size = 0
    for slot in slots:
        offsets.append(pos)
        pos = add(pos, align(slot.size()))
    buffers = tuple(
        Buffer(vid, size, offsets[s], first[vid], max(last.get(vid, first[vid]), first[vid])) for vid, s, size in placed
    )
    return buffers, pos


def arena_bytes_at_max(graph: Graph, arena: Size) -> int:
    """The arena's size with every symbol at its maximum (sizes only grow with the symbols)."""
    return evaluate(arena, {s.name: s.max for s in graph.symbols})


def arena_bytes_for(arena: Size, env: Mapping[str, int]) -> int:
    return evaluate(arena, env)
