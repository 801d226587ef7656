"""High-level ops -> primitives, using each op's decomposition from the op table."""

from __future__ import annotations

from collections.abc import Sequence

from aotc.ir.graph import Graph
from aotc.ir.ops import HIGH_LEVEL, OPS
from aotc.ir.types import Node, Value
from aotc.lowering.rewrite import Rewriter, rewrite


def _expand(rw: Rewriter, node: Node, inputs: Sequence[Value]) -> Sequence[Value]:
    return OPS[node.op].decompose(rw.b, inputs, node.attrs)


def decompose(graph: Graph) -> Graph:
    # A decomposition may emit other high-level ops; repeat until none is left.
    while any(n.op in HIGH_LEVEL for n in graph.nodes):
        graph = rewrite(graph, [(HIGH_LEVEL, _expand)])
    return graph
