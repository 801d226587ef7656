"""The launch-plan facts that the artifact's verification could not prove for every binding of the symbols,
checked for the dims a call actually has, once per shape, before any launch of that shape.

``aotc.artifact.plan_checks`` proves what it can of a plan over the symbols' whole ranges (buffer sizes and
offsets, no two live buffers overlapping, grids within CUDA's limits and equal to what the launches' templates
launch for their outputs, views' bytes, and for a bound plan each pointer's extents inside its value) and returns the rest as
``Fact``s, each ``expr >= 0``, plus the arena's buffers when their disjointness was not proved. Each launch's
addresses are also bounded from its kernel's source as stored, at each shape, and held to those extents
(``aotc.artifact.source_bounds``): a source edited to reach further than its extents is refused. A fact of one
launch's code (its grid, its extents) counts only where that code runs (an arch launch's on the GPUs
that launch it). Every backend that runs a launch plan (``interpret``, ``cuda``) calls
``check_shape`` where it plans a shape; a fact that fails raises ``ArtifactError`` naming the variant, the
launch or buffer, the check and the dims, and nothing of that shape runs.

A plan no reader saw (made in this process: the compiler's, a test's) is verified here at its first call; one
the format refuses (a hand-written test plan) still has its memory plan and grid limits checked per shape.
Only ir and artifact are imported, never the compiler.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping

from aotc.artifact.memory_checks import check_disjoint
from aotc.artifact.plan_checks import plan_facts
from aotc.artifact.plan_space import Fact, PlanFacts
from aotc.artifact.source_bounds import check_launch, launch_names
from aotc.artifact.source_program import parse_program
from aotc.errors import ArtifactError, ShapeError
from aotc.ir.graph import Graph
from aotc.ir.schedule import GRID_LIMITS, Schedule, Size
from aotc.ir.symbolic import add, mul
from aotc.ir.symbolic_values import evaluate

# Shapes remembered as checked, per plan; past this many the memory starts over.
MAX_SHAPES = 4096
# Whether launches' addresses are bounded from their sources. Only tests turn it off, to show that the address
# fence of the interpret backend and the fake driver stops on its own what the source check refuses first.
SOURCE_BOUNDS = True


class ShapeChecks:
    """One plan's per-shape facts. Safe to call from many threads."""

    def __init__(self, graph: Graph, schedule: Schedule) -> None:
        try:
            self.facts: PlanFacts = plan_facts(graph, schedule)
        except ArtifactError:
            # Only a plan made in this process gets here (the reader remembers every plan it read), and one the
            # format refuses is a hand-written one (a backend test's): its memory plan and grid limits still
            # hold for each shape it runs, or the call is refused.
            try:
                self.facts = _unverified_facts(graph, schedule)
            except ShapeError as e:
                raise ArtifactError(f"variant {graph.name!r} schedule: its sizes cannot be checked: {e}") from None
        self.arena = schedule.arena_bytes
        self._symbols = tuple(s.name for s in graph.symbols)
        self._checked: set[tuple[bool | int | None, ...]] = set()
        # every launch whose extents the reader proved: its source is read now (what cannot be bounded is
        # refused before any call) and its addresses bounded per shape (artifact/source_bounds.py)
        self._sourced = [(i, k) for i, k in enumerate(schedule.kernels) if k.extents is not None]
        for i, k in self._sourced if SOURCE_BOUNDS else ():
            try:
                parse_program(k.source, k.name)
            except ArtifactError as e:
                raise ArtifactError(f"{self.facts.what} launch {i} ({k.name}): {e}") from None
        self._bounded: dict[tuple, bool] = {}  # (source, names, grid) already bounded

    def __call__(self, env: Mapping[str, int]) -> None:
        f = self.facts
        sourced = self._sourced if SOURCE_BOUNDS else ()
        if not f.facts and not f.live and not sourced:
            return
        key = (bool(sourced), *(env.get(s) for s in self._symbols))
        if key in self._checked:
            return
        try:
            if f.live:  # first: an overlap says more than the sizes it throws off
                check_disjoint(f.live, env, evaluate(self.arena, env), f.what)
            for fact in f.facts:
                value = evaluate(fact.expr, env)
                if value < 0:
                    raise fact.refusal(env, value)
            for i, k in sourced:
                names, grid = launch_names(k, env)
                seen = (k.source, k.name, tuple(names.items()), grid)
                if seen not in self._bounded:
                    check_launch(k, names, grid, f"{f.what} launch {i} ({k.name})")
                    if len(self._bounded) >= MAX_SHAPES:
                        self._bounded.clear()
                    self._bounded[seen] = True
        except ShapeError as e:  # a symbol unbound or a divisor <= 0: the call's dims are not the plan's
            raise ArtifactError(f"{f.what}: its per-shape checks cannot run at {dict(env)}: {e}") from None
        if len(self._checked) >= MAX_SHAPES:
            self._checked.clear()
        self._checked.add(key)


def _unverified_facts(graph: Graph, s: Schedule) -> PlanFacts:
    what = f"variant {graph.name!r} schedule"
    values = {o.id: o for n in graph.nodes for o in n.outputs}
    facts = []
    for j, b in enumerate(s.buffers):
        v = values.get(b.value)
        if v is not None:
            need: Size = v.type.dtype.itemsize
            for d in v.type.shape:
                need = mul(need, d)
            extra = add(b.nbytes, mul(need, -1))
            facts.append(Fact(f"{what} buffer {j}", "buffer size", f"it holds value %{b.value}", extra))
    for i, k in enumerate(s.kernels):
        kw = f"{what} launch {i} ({k.name})"
        for d, (g, top) in enumerate(zip(k.grid, GRID_LIMITS)):
            facts.append(Fact(kw, "grid", f"grid[{d}] >= 0", g, i, k.name))
            facts.append(Fact(kw, "grid", f"grid[{d}] <= {top}, CUDA's limit", add(top, mul(g, -1)), i, k.name))
    return PlanFacts(what, tuple(facts), tuple(s.buffers))


_PLANS: weakref.WeakKeyDictionary[Graph, list[tuple[Schedule, ShapeChecks]]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def shape_checks(graph: Graph, schedule: Schedule) -> ShapeChecks:
    """The checks of ``schedule`` (a plan of ``graph``, or the plan a GPU runs of one), made once per plan."""
    with _LOCK:
        for s, checks in _PLANS.get(graph, ()):
            if s is schedule:
                return checks
    checks = ShapeChecks(graph, schedule)
    with _LOCK:
        _PLANS.setdefault(graph, []).append((schedule, checks))
    return checks


def check_shape(graph: Graph, schedule: Schedule, env: Mapping[str, int]) -> None:
    """Raise ArtifactError unless every per-shape fact of the plan holds at ``env`` (the call's bound dims)."""
    shape_checks(graph, schedule)(env)
