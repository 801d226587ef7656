"""The graph as the fusion planner walks it: producers and users of each value, and what a value needs.

A value is *stored* when some kernel writes it to memory; every other value is computed inline by the
kernels that use it. The walks here stop at stored values, graph inputs and weights.
"""

from __future__ import annotations

from aotc.ir import ops
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops import REDUCTIONS, Op
from aotc.ir.types import Node

VIEWS = ops.VIEWS
INDEX_SOURCES = ops.SOURCES - {Op.CONSTANT}  # computed from the index; a CONSTANT is a weight in memory
# What the operand of a template-rooted kernel (aotc/ir/templates.py) may pass through and still be loaded by
# the template directly.
PROLOGUE = VIEWS | INDEX_SOURCES | {Op.CAST}
BIJECTIVE_VIEWS = frozenset({Op.RESHAPE, Op.PERMUTE, Op.FLIP})


class FusionGraph:
    """Producers and users of every value, computed once."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.prod: dict[int, tuple[int, Node]] = {}
        self.users: dict[int, list[int]] = {}
        for i, n in enumerate(graph.nodes):
            for o in n.outputs:
                self.prod[o.id] = (i, n)
            for v in n.inputs:
                self.users.setdefault(v.id, []).append(i)
        self.external = {v.id for v in graph.inputs} | {n.outputs[0].id for n in graph.nodes if n.op is Op.CONSTANT}
        self.output_ids = {v.id for v in graph.outputs}
        self.state_writes: frozenset[int] = frozenset()  # node indices of the state writes (plan_fusion sets them)

    def node(self, vid: int) -> Node:
        return self.prod[vid][1]


def compute_below_views(g: FusionGraph, vid: int) -> int:
    """The value under a chain of single-input views and casts: stored, the views stay index math."""
    while vid not in g.external and g.node(vid).op in PROLOGUE - {Op.CONCAT} - INDEX_SOURCES:
        vid = g.node(vid).inputs[0].id
    return vid


def operand_to_store(g: FusionGraph, vid: int, stored: set[int]) -> int:
    """What to store for a contraction operand that needs computing: the value under its views and casts
    (``compute_below_views``), except that a narrowing float cast (float32 -> bfloat16) whose input nothing else
    reads is stored after the cast: its producer (a layer norm in float32 before a bf16 Linear) rounds and stores
    half the bytes, and the contraction loads them as they are. The same value is rounded the same way either
    way, so the numbers do not change."""
    while vid not in g.external and g.node(vid).op in PROLOGUE - {Op.CONCAT} - INDEX_SOURCES:
        n = g.node(vid)
        x = n.inputs[0]
        if n.op is Op.CAST and _narrows(x.type.dtype, n.outputs[0].type.dtype) and needs_compute(g, x.id, stored):
            alone = set(g.users.get(x.id, ())) == {g.prod[vid][0]}
            if alone and x.id not in stored and x.id not in g.output_ids:
                return vid
        vid = x.id
    return vid


def _narrows(src: DType, dst: DType) -> bool:
    return src.is_float and dst.is_float and dst.itemsize < src.itemsize


def inline_values(g: FusionGraph, vid: int, stored: set[int]) -> set[int]:
    stack, seen = [vid], set()
    while stack:
        v = stack.pop()
        if v in seen or v in g.external or (v in stored and v != vid):
            continue
        seen.add(v)
        stack.extend(x.id for x in g.node(v).inputs)
    return seen


def needs_compute(g: FusionGraph, vid: int, stored: set[int]) -> bool:
    stack, seen = [vid], set()
    while stack:
        v = stack.pop()
        if v in seen or v in g.external or (v in stored and v != vid):
            continue
        seen.add(v)
        n = g.node(v)
        if n.op not in PROLOGUE:
            return True
        stack.extend(x.id for x in n.inputs)
    return False


def has_reduction(g: FusionGraph, vid: int, stored: set[int]) -> bool:
    return any(g.graph.nodes[i].op in REDUCTIONS for i in inline_nodes(g, vid, stored))


def inline_nodes(g: FusionGraph, vid: int, stored: set[int]) -> set[int]:
    return {g.prod[v][0] for v in inline_values(g, vid, stored)}


def reads_memory(g: FusionGraph, vid: int, stored: set[int]) -> bool:
    stack, seen = [vid], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in g.external or (v in stored and v != vid):
            return True
        n = g.node(v)
        if n.op in REDUCTIONS or n.op is Op.GATHER:
            return True
        stack.extend(x.id for x in n.inputs)
    return False


def reduced_axes(node: Node) -> tuple[int, ...]:
    """The axes of its input a reduction node reduces (an arg-reduction's one axis, normalized)."""
    if node.op in (Op.ARGMAX, Op.ARGMIN):
        return (node.attrs.get("axis", 0) % max(1, node.inputs[0].type.rank),)
    return tuple(node.attrs["axes"])
