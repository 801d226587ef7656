"""Node groups: nodes a template takes whole as one launch each (a row's ``group`` hook, aotc/ir/templates.py),
found before the fusion planner's general rules run (aotc/kernels/fusion.py).

A group's launch stores every value of the group read elsewhere (``group_outputs``) and reads what enters it
(``entering``) as any template reads its operands. Two groups whose launches would each wait for the other
(or one waiting for itself: it reads, through other nodes, a value it computes) cannot both be launches:
such groups are dropped, and their nodes planned by the general rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aotc.ir.templates import TEMPLATES, KernelKind
from aotc.ir.types import Value
from aotc.kernels.fusion_graph import FusionGraph
from aotc.kernels.templates import hook

__all__ = ["NodeGroup", "entering", "group_outputs", "node_groups"]


@dataclass(frozen=True, eq=False)
class NodeGroup:
    """Nodes a template takes whole as one launch (its row's ``group`` hook found them), with the template's own
    record of them (``detail``: what its emitter needs, such as the recurrent cell's steps)."""

    kind: KernelKind
    nodes: frozenset[int]
    detail: Any


def node_groups(g: FusionGraph, declined: list[str]) -> list[NodeGroup]:
    """Every template's node groups (no node in two), less those whose launches would wait on each other."""
    groups: list[NodeGroup] = []
    taken: set[int] = set()
    for row in TEMPLATES:
        for nodes, detail in hook(row.group)(g) if row.group else ():
            if not nodes & taken:
                taken |= nodes
                groups.append(NodeGroup(row.kind, frozenset(nodes), detail))
    while True:
        waits = _waits(g, groups)
        stuck = [grp for grp in groups if _waits_on_itself(grp, waits)]
        if not stuck:
            return groups
        for grp in stuck:
            declined.append(
                f"{grp.kind} group of nodes {min(grp.nodes)}..{max(grp.nodes)} not formed: its launch would wait on itself"
            )
        groups = [grp for grp in groups if grp not in stuck]


def _waits(g: FusionGraph, groups: list[NodeGroup]) -> dict[NodeGroup, set[NodeGroup]]:
    """For each group, the groups whose nodes compute something it reads (through nodes of no group)."""
    of = {i: grp for grp in groups for i in grp.nodes}
    memo: dict[int, frozenset[NodeGroup]] = {}

    def upstream(vid: int) -> frozenset[NodeGroup]:
        stack, order = [vid], []
        while stack:  # iteratively: long unrolled chains are deeper than Python's recursion
            v = stack.pop()
            if v in memo or v in g.external:
                continue
            i, n = g.prod[v]
            if i in of:
                memo[v] = frozenset({of[i]})
                continue
            order.append(v)
            stack.extend(x.id for x in n.inputs if x.id not in memo)
        for v in reversed(order):
            if v not in memo:
                memo[v] = frozenset().union(*(memo.get(x.id, frozenset()) for x in g.node(v).inputs))
        return memo.get(vid, frozenset())

    return {grp: set().union(*(upstream(v) for v in entering(g, grp))) for grp in groups}


def _waits_on_itself(grp: NodeGroup, waits: dict[NodeGroup, set[NodeGroup]]) -> bool:
    seen: set[NodeGroup] = set()
    todo = list(waits[grp])
    while todo:
        other = todo.pop()
        if other is grp:
            return True
        if other not in seen:
            seen.add(other)
            todo.extend(waits[other])
    return False


def entering(g: FusionGraph, grp: NodeGroup) -> list[int]:
    """The values a group's nodes read that no node of the group computes."""
    inside = {o.id for i in grp.nodes for o in g.graph.nodes[i].outputs}
    return list(dict.fromkeys(x.id for i in sorted(grp.nodes) for x in g.graph.nodes[i].inputs if x.id not in inside))


def group_outputs(g: FusionGraph, grp: NodeGroup) -> tuple[Value, ...]:
    """The values of a group read by a node outside it, or returned: its launch stores them, in node order."""
    return tuple(
        o
        for i in sorted(grp.nodes)
        for o in g.graph.nodes[i].outputs
        if o.id in g.output_ids or any(u not in grp.nodes for u in g.users.get(o.id, ()))
    )
