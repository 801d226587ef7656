"""Facts about a graph's values that passes, the scheduler, the memory plan and the cpu runner share.

``analyze(graph)`` computes them once per graph (graphs are immutable, so the result is cached with the
graph's lifetime): who produces each value, who reads it and how often, and its live interval over
``graph.nodes`` order. Index conventions: node positions are indices into ``graph.nodes``; a graph input
is defined at ``-1`` (before the first node); a graph output stays live until ``len(graph.nodes)``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from aotc.ir.graph import Graph

INPUT_DEF = -1


@dataclass(frozen=True, slots=True, eq=False)
class Analysis:
    """Use and liveness facts of one graph; build with ``analyze``."""

    producer: Mapping[int, int]  # value id -> index of the node defining it (graph inputs absent)
    users: Mapping[int, tuple[int, ...]]  # value id -> indices of the nodes reading it, each once, in order
    use_count: Mapping[int, int]  # value id -> input slots reading it (add(x, x) counts 2); outputs not counted
    outputs: frozenset[int]  # ids of the graph's outputs
    first_def: Mapping[int, int]  # value id -> node index defining it; INPUT_DEF for graph inputs
    last_use: Mapping[int, int]  # value id -> last node index reading it; len(nodes) for outputs
    free_after: tuple[tuple[int, ...], ...]  # per node: ids whose last reader it is (never outputs)

    def live_range(self, vid: int) -> tuple[int, int]:
        """Inclusive ``(first_def, last_use)``: the value's storage must exist over these node indices."""
        return self.first_def[vid], self.last_use[vid]

    def is_dead(self, vid: int) -> bool:
        """Defined but never read and not an output."""
        return self.use_count[vid] == 0 and vid not in self.outputs

    def live_at(self, index: int) -> frozenset[int]:
        """Ids of the values live while node ``index`` runs (defined at or before it, used at or after it)."""
        return frozenset(v for v, d in self.first_def.items() if d <= index <= self.last_use[v])


def _build(graph: Graph) -> Analysis:
    n = len(graph.nodes)
    first_def: dict[int, int] = {v.id: INPUT_DEF for v in graph.inputs}
    producer: dict[int, int] = {}
    users: dict[int, list[int]] = {v.id: [] for v in graph.inputs}
    use_count: dict[int, int] = dict.fromkeys(first_def, 0)
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            use_count[v.id] = use_count.get(v.id, 0) + 1
            readers = users.setdefault(v.id, [])
            if not readers or readers[-1] != i:
                readers.append(i)
        for o in node.outputs:
            first_def[o.id] = producer[o.id] = i
            users.setdefault(o.id, [])
            use_count.setdefault(o.id, 0)
    outputs = frozenset(o.id for o in graph.outputs)
    last_use: dict[int, int] = {}
    free_after: list[tuple[int, ...]] = [() for _ in range(n)]
    for vid, d in first_def.items():
        readers = users[vid]
        if vid in outputs:
            last_use[vid] = n
        elif readers:
            last_use[vid] = readers[-1]
            free_after[readers[-1]] += (vid,)
        else:
            last_use[vid] = d
    return Analysis(
        producer=MappingProxyType(producer),
        users=MappingProxyType({k: tuple(v) for k, v in users.items()}),
        use_count=MappingProxyType(use_count),
        outputs=outputs,
        first_def=MappingProxyType(first_def),
        last_use=MappingProxyType(last_use),
        free_after=tuple(free_after),
    )


# Keyed weakly by the graph (identity); an Analysis holds no reference back, so entries die with their graph.
_CACHE: weakref.WeakKeyDictionary[Graph, Analysis] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def analyze(graph: Graph) -> Analysis:
    """The graph's Analysis, computed on first request and shared after (graphs never change)."""
    with _LOCK:
        found = _CACHE.get(graph)
    if found is not None:
        return found
    result = _build(graph)
    with _LOCK:
        return _CACHE.setdefault(graph, result)
