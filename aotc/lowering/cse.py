"""Common-subexpression elimination and dead-code elimination (every op is pure)."""

from __future__ import annotations

from collections.abc import Sequence

from aotc.ir.graph import Graph
from aotc.ir.types import Node, Value
from aotc.lowering.fold import prune_constants
from aotc.lowering.rewrite import Rewriter, rewrite


def cse(graph: Graph) -> Graph:
    seen: dict[tuple, tuple[Value, ...]] = {}

    def dedupe(rw: Rewriter, node: Node, inputs: Sequence[Value]) -> Sequence[Value] | None:
        key = (node.op, tuple(v.id for v in inputs), node.attrs)
        if key in seen:
            return seen[key]
        seen[key] = tuple(node.outputs)
        return None

    return rewrite(graph, [(None, dedupe)])


def dce(graph: Graph) -> Graph:
    live = {o.id for o in graph.outputs}
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(o.id in live for o in node.outputs):
            kept.append(node)
            live.update(v.id for v in node.inputs)
    return prune_constants(graph.replace(nodes=tuple(reversed(kept))))
