"""One driver for rewrite rules. A rule is ``(ops, fn)``: ``fn(rw, node, inputs)`` returns
replacement values for the node's outputs, or None to keep the node. ``inputs`` are the
node's inputs as already rewritten; ``rw.producer(v)`` finds the rewritten node that made ``v``."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from aotc.ir.builder import Builder
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.types import Node, Value
from aotc.ir.verify import graph_ctx


class Rewriter:
    """The builder of the new graph plus producer lookup over what it has built so far."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.b = Builder(graph_ctx(graph), next_id=graph.max_value_id() + 1)
        self._producers: dict[int, Node] = {}
        self._indexed = 0

    def producer(self, v: Value) -> Node | None:
        nodes = self.b.nodes
        for n in nodes[self._indexed :]:
            for o in n.outputs:
                self._producers[o.id] = n
        self._indexed = len(nodes)
        return self._producers.get(v.id)


RuleFn = Callable[[Rewriter, Node, Sequence[Value]], Sequence[Value] | None]
Rule = tuple[Collection[Op] | None, RuleFn]  # None matches every op


def rewrite(graph: Graph, rules: Sequence[Rule]) -> Graph:
    """Rebuild the graph once, applying the first matching rule to each node."""
    rw = Rewriter(graph)
    b = rw.b
    remap: dict[int, Value] = {v.id: v for v in graph.inputs}
    for node in graph.nodes:
        inputs = [remap[v.id] for v in node.inputs]
        b.loc = node.loc
        replaced = None
        for ops, fn in rules:
            if ops is None or node.op in ops:
                replaced = fn(rw, node, inputs)
                if replaced is not None:
                    break
        if replaced is None:
            same = all(a is c for a, c in zip(inputs, node.inputs))
            b.nodes.append(node if same else node.replace(inputs=tuple(inputs)))
            replaced = node.outputs
        for old, new in zip(node.outputs, replaced):
            remap[old.id] = new
    return graph.replace(nodes=tuple(b.nodes), outputs=tuple(remap[o.id] for o in graph.outputs))
