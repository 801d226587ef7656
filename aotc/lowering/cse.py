"""Common-subexpression elimination and dead-code elimination (every op is pure)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from aotc.ir.analysis import analyze
from aotc.ir.graph import Graph
from aotc.ir.types import Node, Value
from aotc.lowering.fold import prune_constants
from aotc.lowering.rewrite import Rewriter, rewrite

_DOUBLE = struct.Struct("<d")


def attr_key(v: Any) -> Any:
    """A key equal only for attr values that mean the same: a float by its bits (so -0.0 and 0.0 stay apart
    and equal NaNs meet), and by kind (so True, 1 and 1.0 stay apart), as the artifact encoder keys them."""
    if isinstance(v, (bool, np.bool_)):
        return ("bool", bool(v))
    if isinstance(v, (int, np.integer)):
        return ("int", int(v))
    if isinstance(v, (float, np.floating)):
        return ("float", _DOUBLE.pack(float(v)))
    if isinstance(v, tuple):
        return ("tuple", tuple(attr_key(x) for x in v))
    return (type(v).__name__, v)


def cse(graph: Graph) -> Graph:
    seen: dict[tuple, tuple[Value, ...]] = {}

    def dedupe(rw: Rewriter, node: Node, inputs: Sequence[Value]) -> Sequence[Value] | None:
        attrs = tuple((k, attr_key(v)) for k, v in node.attrs.items())
        key = (node.op, tuple(v.id for v in inputs), attrs)
        if key in seen:
            return seen[key]
        seen[key] = tuple(node.outputs)
        return None

    return rewrite(graph, [(None, dedupe)])


def dce(graph: Graph) -> Graph:
    """Keep the nodes the outputs depend on, transitively."""
    producer = analyze(graph).producer
    needed: set[int] = set()
    stack = [producer[o.id] for o in graph.outputs if o.id in producer]
    while stack:
        i = stack.pop()
        if i not in needed:
            needed.add(i)
            stack.extend(producer[v.id] for v in graph.nodes[i].inputs if v.id in producer)
    kept = tuple(n for i, n in enumerate(graph.nodes) if i in needed)
    return prune_constants(graph.replace(nodes=kept))
