"""Checks on launch plans that the writer (before it writes) and the reader (after it decodes) share: a plan
the writer accepts is exactly a plan the reader accepts. ``check_schedule`` runs them over a variant's plan:

- each buffer and view, before any launch, and the memory plan after the last (memory_checks.py);
- per launch, in order: its nodes, reads, args, index checks and grid (launch_checks.py); dataflow order:
  every value it reads is an input, a weight, or written by an earlier launch; and, for a bound plan, its
  digest and extents (binding_checks.py);
- ``flags`` counts exactly the slots its launches check, and each graph output is written.

What no check could prove over the symbols' ranges (plan_space.py) is returned as ``PlanFacts``, which
``plan_facts`` also gives the runtime to check per shape. The kernel code and its binaries are checked in
``code_checks``.
"""

from __future__ import annotations

import threading
import weakref

from aotc.artifact.binding_checks import check_binding
from aotc.artifact.code_checks import fail
from aotc.artifact.launch_checks import check_grids, check_launch
from aotc.artifact.memory_checks import check_arena, check_buffers, check_lifetimes, check_views
from aotc.artifact.pacing import pace
from aotc.artifact.plan_space import Plan, PlanFacts, refuse
from aotc.errors import ShapeError
from aotc.ir.graph import Graph
from aotc.ir.schedule import Schedule

GRAPH_FEATURES = ("graph",)
# Named by files whose graphs have states (schema >= 10), after "graph": a reader that does not know it refuses them.
STATE_FEATURE = "state"
# "kernels": launch plans and kernel code; "binaries": cubins and PTX (absent when compiled with no targets)
KERNEL_FEATURES = ("kernels", "binaries")
# Named by files whose launches carry arch launches (schema >= 4); the name predates the word.
ARCH_VARIANTS = "arch_variants"
KNOWN_KERNEL_FEATURES = (*KERNEL_FEATURES, ARCH_VARIANTS)


def check_schedule(graph: Graph, s: Schedule, what: str, bound: bool | None = None) -> PlanFacts:
    """Everything a variant's plan refers to exists in ``graph``; its launches read, write and run as the graph
    allows; its grids and memory plan are sound for every binding of the symbols. Returns what is left to
    check per shape, which ``plan_facts`` also gives the runtime for this graph and schedule.

    ``bound``: every launch carries a digest and extents, which are checked (the writer; files of schema 6);
    False: none is read (files of schema 3-5); None: as the plan says, all launches or none (plans made in
    this process)."""
    if bound is None:
        bound = any(k.digest or k.extents is not None for k in s.kernels)
    try:
        out = _check_schedule(graph, s, what, bound)
    except ShapeError as e:  # an expression the symbolic layer refuses to build or evaluate (far too large)
        raise fail(what, f"its sizes cannot be checked: {e}") from None
    _remember(graph, s, out)
    return out


def _check_schedule(graph: Graph, s: Schedule, what: str, bound: bool) -> PlanFacts:
    p = Plan(graph, s, what)
    space = p.space
    if isinstance(s.flags, bool) or not isinstance(s.flags, int) or s.flags < 0:
        raise fail(what, f"flags must be a non-negative int, got {s.flags!r}")
    buffered = check_buffers(p)
    check_views(p, buffered)
    read_only = {p.root(v) for v in p.consts | (p.inputs - p.state_roots)}
    homes = buffered | {p.root(v) for v in p.outputs}
    slots: set[int] = set()
    written: set[int] = set(p.state_roots)  # roots written by the launches so far (a state: by the previous call)
    version = dict.fromkeys(range(len(graph.states)), 0)  # per state: the version its storage holds
    first: dict[int, int] = {}  # value -> first launch writing it
    last: dict[int, int] = {}  # value -> last launch reading or writing it
    for i, k in enumerate(s.kernels):
        pace()  # a launch's checks take tens of microseconds: let the read's hashing threads in between
        kw = f"{what} launch {i} ({k.name})"
        nodes = check_launch(p, k, read_only, slots, kw)
        for vid in k.inputs:
            if p.root(vid) not in read_only and p.root(vid) not in written:
                raise refuse(kw, "dataflow order", f"it reads value %{vid} before any launch writes it")
            state = p.chain.get(vid)
            if state is not None and state[1] != version[state[0]] and vid not in k.outputs:
                raise refuse(
                    kw,
                    "state order",
                    f"it reads value %{vid} of state {graph.states[state[0]].name!r} after it was overwritten",
                )
            last[vid] = i
        for vid in k.outputs:
            state = p.chain.get(vid)
            if state is not None:
                if state[1] != version[state[0]] + 1:
                    raise refuse(
                        kw,
                        "state order",
                        f"it writes value %{vid} of state {graph.states[state[0]].name!r} out of order",
                    )
                version[state[0]] = state[1]
            elif p.root(vid) in p.state_roots:
                raise refuse(
                    kw, "state storage", f"it writes value %{vid} into a state's storage, which only its writes may"
                )
            if p.root(vid) not in homes:
                raise refuse(kw, "buffer args", f"it writes value %{vid}, which has no arena buffer nor output storage")
            written.add(p.root(vid))
            first.setdefault(vid, i)
            last[vid] = i
        check_grids(p, i, k, nodes, kw)
        if bound:
            check_binding(p, i, k, nodes, kw)
    if len(slots) != s.flags:  # the runtime sizes each call's flag array by it
        raise refuse(what, "flag slots", f"flags is {s.flags}, but its launches check {len(slots)} slots")
    for o in graph.outputs:
        if p.root(o.id) not in read_only and p.root(o.id) not in written:
            raise refuse(what, "dataflow order", f"graph output %{o.id} is written by no launch")
    space.check(s.arena_bytes, f"{what} arena_bytes", nonneg=True)
    space.require(s.arena_bytes, p.facts, what, "arena", "arena_bytes >= 0")
    live = check_arena(p)
    check_lifetimes(p, first, last)
    if not all(isinstance(d, str) for d in s.declined):
        raise fail(what, "declined reasons must be strings")
    return PlanFacts(what, tuple(p.facts), live)


# -- what the runtime checks per shape -------------------------------------------------------------

_FACTS: weakref.WeakKeyDictionary[Graph, tuple[Schedule, PlanFacts]] = weakref.WeakKeyDictionary()
_FACTS_LOCK = threading.Lock()


def _remember(graph: Graph, s: Schedule, facts: PlanFacts) -> None:
    with _FACTS_LOCK:
        _FACTS[graph] = (s, facts)


def plan_facts(graph: Graph, s: Schedule) -> PlanFacts:
    """The per-shape facts of running ``s``, a verified plan of ``graph`` (or the plan a GPU runs of one: each
    launch its own kernel or one of its arch launches'): a grid fact counts where its code runs. A plan
    nothing verified yet is checked now (an ArtifactError if it fails)."""
    with _FACTS_LOCK:
        known = _FACTS.get(graph)
    if known is not None and (known[0] is s or _runs_of(known[0], s)):
        facts = known[1]
    else:
        facts = check_schedule(graph, s, f"variant {graph.name!r} schedule")
    if any(f.code for f in facts.facts):
        kept = tuple(f for f in facts.facts if not f.code or s.kernels[f.launch].name == f.code)
        facts = PlanFacts(facts.what, kept, facts.live)
    return facts


def _runs_of(base: Schedule, s: Schedule) -> bool:
    return (
        s.buffers is base.buffers
        and s.arena_bytes is base.arena_bytes
        and len(s.kernels) == len(base.kernels)
        and all(r is k or any(r is v.kernel for v in k.arch_launches) for r, k in zip(s.kernels, base.kernels))
    )
