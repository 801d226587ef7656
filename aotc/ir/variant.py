"""A variant of a model: one primitive graph, whose guards select it, and the launch plan that runs it.

An artifact holds one or more variants of the same model (a small-batch and a large-batch specialization, say);
the runtime runs the first whose guards the inputs meet. The word "variant" means this record only: a launch's
per-architecture alternatives are ``ArchLaunch``es (aotc/ir/schedule.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from aotc.ir.graph import Graph, Guard, Symbol
from aotc.ir.schedule import Schedule


@dataclass(frozen=True, slots=True)
class Variant:
    """``graph``: the primitive graph, with the symbols and guards that select this variant. ``plan``: its launch
    plan (kernels, buffers, arena); None when it has no kernels, so it runs on the cpu only."""

    graph: Graph
    plan: Schedule | None = None

    @property
    def name(self) -> str:
        return self.graph.name

    @property
    def guards(self) -> tuple[Guard, ...]:
        return self.graph.guards

    @property
    def symbols(self) -> tuple[Symbol, ...]:
        return self.graph.symbols

    def replace(self, **changes: Any) -> Variant:
        return dataclasses.replace(self, **changes)
