"""Which values are stored to memory, and which kernel computes each of them.

Every kernel stores one *anchor* value and computes everything it needs from stored values (graph inputs,
weights, other anchors) inline: views and sources as index arithmetic, elementwise ops and gathers as
expressions, reductions as the kernel's row loop. Deciding the kernels is therefore deciding the set of
stored values. It starts with the graph outputs and the end of each contraction's epilogue, and grows
until every kernel can be generated:

- a contraction operand that needs more than views and casts is stored (the template loads operands);
- reductions in one kernel share an input shape and axes, and the anchor lies at full or row shape;
  any other reduction is stored and read back;
- a value computed from memory that two kernels would each recompute is stored once;
- a scatter's output is always stored, by two launches (aotc/kernels/scatter.py): a copy of its data, then
  its writes into that buffer in place; an operand of either computed with a reduction is stored first;
- a state write (aotc/ir/state.py) is its writes alone, into the state's own storage (a View joins its output to
  the value it overwrites); it runs after every kernel that reads the value it overwrites, and an operand of it
  computed from that value is stored first (the write would read what it writes);
- a template with node groups (a row's ``group``, aotc/ir/templates.py: the recurrent cell's time loop) takes
  each group whole as one launch, which stores every value of the group read elsewhere; what enters a group
  is read as any template's operand (computed values stored first). Groups whose launches would wait on each
  other (or on themselves) are left to the rules above.

Each growth step is recorded with its reason, which ``--explain`` prints.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from aotc.errors import UnsupportedError
from aotc.ir.graph import Graph
from aotc.ir.ops import ELEMENTWISE, HIGH_LEVEL, REDUCTIONS, Op
from aotc.ir.schedule import View
from aotc.ir.state import state_writers
from aotc.ir.templates import ROOTED_AT, ROOTS, KernelKind
from aotc.ir.types import Node, Shape, Value
from aotc.kernels.anchors import epilogues as epilogues_of
from aotc.kernels.anchors import output_views
from aotc.kernels.concat_fanout import CONCAT_FANOUT, concat_fanout
from aotc.kernels.fusion_graph import (
    INDEX_SOURCES,
    VIEWS,
    FusionGraph,
    compute_below_views,
    has_reduction,
    inline_values,
    needs_compute,
    operand_to_store,
    reads_memory,
    reduced_axes,
)
from aotc.kernels.fusion_groups import NodeGroup, entering, group_outputs, node_groups

__all__ = ["CONCAT_FANOUT", "VIEWS", "FusionPlan", "KernelPlan", "NodeGroup", "plan_fusion"]


@dataclass
class KernelPlan:
    """One kernel: the value it stores, the node indices it computes and how."""

    anchor: Value
    nodes: set[int] = field(default_factory=set)
    reads: set[int] = field(default_factory=set)
    root: Node | None = None  # the node a template-rooted kernel is rooted at (aotc/ir/templates.py)
    epilogue: tuple[Node, ...] = ()
    reductions: tuple[Node, ...] = ()
    stored_first: tuple[Value, ...] = ()  # values of merged producer kernels this kernel also stores
    # graph outputs that are permute/flip/reshape views of the anchor, stored beside it: (output, view chain)
    view_outputs: tuple[tuple[Value, tuple[Node, ...]], ...] = ()
    # The scatter whose output the anchor is: this kernel copies its data into the anchor's buffer or, when
    # ``in_place``, writes its updates into that buffer (launched after the copy).
    scatter: Node | None = None
    in_place: bool = False
    overwrites: int = -1  # a state write's: the value whose storage it writes (aotc/ir/state.py), else -1
    group: NodeGroup | None = None  # the node group it computes whole (outputs: stored_first, then the anchor)

    @property
    def outputs(self) -> tuple[Value, ...]:
        return (*self.stored_first, self.anchor)

    @property
    def kind(self) -> KernelKind:
        """The template that emits it: the one rooted at its root's op, else the scatter, reduction or pointwise one."""
        if self.group is not None:
            return self.group.kind
        if self.root is not None:
            return ROOTED_AT[self.root.op].kind
        if self.scatter is not None:
            return KernelKind.SCATTER if self.in_place else KernelKind.SCATTER_COPY
        return KernelKind.REDUCTION if self.reductions else KernelKind.POINTWISE


@dataclass
class FusionPlan:
    kernels: list[KernelPlan]
    views: list[View]
    declined: list[str]


def plan_fusion(graph: Graph) -> FusionPlan:
    g = FusionGraph(graph)
    declined: list[str] = []
    stored: set[int] = set()
    views: list[View] = []
    for n in graph.nodes:
        if n.op not in ELEMENTWISE | REDUCTIONS | VIEWS | INDEX_SOURCES | ROOTS | {
            Op.CONSTANT,
            Op.GATHER,
            Op.SCATTER,
        }:
            if n.op in HIGH_LEVEL and n.op not in ROOTS:
                raise UnsupportedError(f"graph {graph.name} is not lowered: {n.op.value} ({n}) is a high-level op")
            raise UnsupportedError(f"no kernel for op {n.op.value} ({n}): it runs on the cpu backend only")
    stored |= {n.outputs[0].id for n in graph.nodes if n.op is Op.SCATTER}
    g.state_writes = state_writers(graph)
    for i in sorted(g.state_writes):
        n = graph.nodes[i]
        views.append(View(n.outputs[0].id, n.inputs[0].id))  # the write lands in the state's own storage
    groups = node_groups(g, declined)
    grouped = {i for grp in groups for i in grp.nodes}
    outputs = {grp: group_outputs(g, grp) for grp in groups}
    stored |= {v.id for vs in outputs.values() for v in vs}
    view_outputs = output_views(g, stored, views, declined)
    epilogues = epilogues_of(g, stored, declined, grouped)
    fixed = set(stored)
    operands: set[int] = set()
    while True:
        kernels = [k for vid in _anchors(g, stored, grouped) for k in _plans(g, vid, stored, epilogues)]
        kernels += [_group_plan(g, grp, outputs[grp], stored) for grp in groups]
        grow = _needed(g, kernels, stored, declined, operands)
        if grow:
            stored |= grow
            continue
        # An operand stored early may have become a view of values stored since: read it through the view.
        views_now = {v for v in (stored & operands) - fixed if not needs_compute(g, v, stored)}
        if not views_now:
            break
        stored -= views_now
        fixed |= stored
    for k in kernels:
        k.view_outputs = tuple(x for v in k.outputs for x in view_outputs.get(v.id, ()))
    return FusionPlan(_merge_pointwise(g, _order(g, kernels)), views, _dedupe(declined))


def _dedupe(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _anchors(g: FusionGraph, stored: set[int], grouped: set[int]) -> list[int]:
    """The stored values each kernel of its own stores (a group's outputs are its launch's)."""
    return sorted(
        (v for v in stored if v not in g.external and g.prod[v][0] not in grouped), key=lambda v: g.prod[v][0]
    )


def _group_plan(g: FusionGraph, grp: NodeGroup, outputs: tuple[Value, ...], stored: set[int]) -> KernelPlan:
    plan = KernelPlan(outputs[-1], set(grp.nodes), stored_first=outputs[:-1], group=grp)
    _collect(g, plan, entering(g, grp), stored)  # what enters it: read, or computed through views
    return plan


def _plans(
    g: FusionGraph, anchor: int, stored: set[int], epilogues: dict[int, tuple[Node, tuple[Node, ...]]]
) -> list[KernelPlan]:
    """The kernel storing ``anchor``; a scatter's output takes two: the copy of its data, then its writes."""
    n = g.node(anchor)
    if n.op is not Op.SCATTER:
        return [_closure(g, anchor, stored, epilogues)]
    data, idx, updates = n.inputs
    if g.prod[anchor][0] in g.state_writes:  # in place in the state: no copy
        writes = KernelPlan(n.outputs[0], scatter=n, in_place=True)
        _collect(g, writes, [idx.id, updates.id], stored)
        writes.reads.add(anchor)
        writes.overwrites = data.id
        return [writes]
    copy = KernelPlan(n.outputs[0], scatter=n)
    _collect(g, copy, [data.id], stored)
    writes = KernelPlan(n.outputs[0], scatter=n, in_place=True)
    _collect(g, writes, [idx.id, updates.id], stored)
    writes.reads.add(anchor)  # it updates the buffer the copy wrote
    return [copy, writes]


def _closure(
    g: FusionGraph, anchor: int, stored: set[int], epilogues: dict[int, tuple[Node, tuple[Node, ...]]]
) -> KernelPlan:
    plan = KernelPlan(next(o for o in g.node(anchor).outputs if o.id == anchor))
    if anchor in epilogues:
        plan.root, plan.epilogue = epilogues[anchor]
    starts = [anchor]
    if plan.root is not None:
        starts += [x.id for x in plan.root.inputs]
    _collect(g, plan, starts, stored)
    return plan


def _collect(g: FusionGraph, plan: KernelPlan, starts: list[int], stored: set[int]) -> None:
    """Adds to ``plan`` the nodes computing ``starts`` inline and the stored values they read."""
    stack = list(starts)
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in g.external or (v in stored and v != plan.anchor.id):
            plan.reads.add(v)
            continue
        i, n = g.prod[v]
        if plan.root is not None and n is plan.root:
            continue
        plan.nodes.add(i)
        stack.extend(x.id for x in n.inputs)
    plan.reductions = tuple(g.graph.nodes[i] for i in sorted(plan.nodes) if g.graph.nodes[i].op in REDUCTIONS)


def _row_shapes(shape: Shape, axes: tuple[int, ...]) -> tuple[Shape, Shape]:
    keep = tuple(1 if k in axes else d for k, d in enumerate(shape))
    drop = tuple(d for k, d in enumerate(shape) if k not in axes)
    return keep, drop


def reduction_key(n: Node) -> tuple[Shape, tuple[int, ...]]:
    return n.inputs[0].type.shape, reduced_axes(n)


def _needed(
    g: FusionGraph, kernels: list[KernelPlan], stored: set[int], declined: list[str], operand_values: set[int]
) -> set[int]:
    """Values that must be stored for every kernel to be generable (empty when the plan is final).
    Values stored for a contraction's operand are also added to ``operand_values``."""
    grow: set[int] = set()
    for k in kernels:  # 1. contraction operands (and what enters a node group) that need computing
        if k.group is not None:
            ids, what = entering(g, k.group), f"the {k.kind} group"
        elif k.root is not None:
            ids, what = [x.id for x in k.root.inputs], k.root.op.value
        else:
            continue
        for v in ids:
            if v not in stored and v not in g.external and needs_compute(g, v, stored):
                base = operand_to_store(g, v, stored) if k.root is not None else compute_below_views(g, v)
                grow.add(base)
                declined.append(f"operand %{v} of {what} is computed, not a view: %{base} stored first")
    operand_values |= grow
    if grow:
        return grow
    for k in kernels:  # 1b. a scatter's launches compute their operands with views and pointwise ops only
        if k.scatter is not None and k.reductions:
            grow |= _scatter_operands(g, k, stored, declined)
        if k.overwrites in k.reads:  # a state write computing an operand from the state it overwrites
            for x in k.scatter.inputs[1:]:  # type: ignore[union-attr]
                if x.id not in stored and x.id not in g.external and k.overwrites in _reads_of(g, x.id, stored):
                    base = compute_below_views(g, x.id)
                    grow.add(base)
                    declined.append(
                        f"operand %{x.id} of state write %{k.anchor.id} is computed from the state it overwrites: "
                        f"%{base} stored first"
                    )
    if grow:
        return grow
    grow = _reads_across_writes(g, kernels, stored, declined)  # 1c. a state read before its write, used after it
    if grow:
        return grow
    for k in kernels:  # 2. an epilogue input computed with a reduction gets its own (reduction) kernel
        if k.root is None or not k.reductions:
            continue
        chain = {k.root.outputs[0].id} | {n.outputs[0].id for n in k.epilogue}
        for n in k.epilogue:
            for x in n.inputs:
                if x.id not in chain and has_reduction(g, x.id, stored):
                    base = compute_below_views(g, x.id)
                    grow.add(base)
                    declined.append(
                        f"%{x.id} is computed with a reduction: not fused into the {k.root.op.value} epilogue, "
                        f"%{base} stored first"
                    )
    if grow:
        return grow
    for k in kernels:  # 3. reductions that cannot share one row loop
        if k.root is None and k.scatter is None and k.group is None and k.reductions:
            grow |= _reduction_conflicts(g, k, declined)
    if grow:
        return grow
    grow = concat_fanout(g, stored, declined)  # 3b. nested concats
    if grow:
        return grow  # 4. (below) sharing, once the kernels' shapes settle
    counts: dict[int, int] = {}
    for k in kernels:
        for i in k.nodes:
            counts[i] = counts.get(i, 0) + 1
    for i, c in counts.items():
        n = g.graph.nodes[i]
        v = n.outputs[0].id
        if c < 2 or v in stored or n.op in VIEWS | INDEX_SOURCES:
            continue
        if reads_memory(g, v, stored):
            grow.add(v)
    # Store only the outermost shared values: what they are computed from is then read by one kernel.
    inner: set[int] = set()
    for v in grow:
        inner |= inline_values(g, v, stored) - {v}
    for v in sorted(grow - inner):
        declined.append(f"%{v} ({g.node(v).op.value}) is needed by several kernels: stored once, not recomputed")
    return grow - inner


def _reads_across_writes(g: FusionGraph, kernels: list[KernelPlan], stored: set[int], declined: list[str]) -> set[int]:
    """What a kernel computes inline from a state's value that a later write overwrites, when the kernel stores a
    value after that write: each first non-view result of that value is stored, by a kernel that runs before the
    write (else the kernel would have to run both before and after it)."""
    overwritten = {g.graph.nodes[i].inputs[0].id: i for i in g.state_writes}
    grow: set[int] = set()
    for k in kernels:
        if k.overwrites >= 0:
            continue
        for v in k.reads & overwritten.keys():
            if g.prod[k.anchor.id][0] < overwritten[v]:
                continue  # the whole kernel is before the write
            stack = [v]
            while stack:
                x = stack.pop()
                for i in g.users.get(x, ()):
                    if i not in k.nodes:
                        continue
                    n = g.graph.nodes[i]
                    if n.op in VIEWS:
                        stack.extend(o.id for o in n.outputs)
                    elif n.outputs[0].id not in stored:
                        grow.add(n.outputs[0].id)
                        declined.append(
                            f"%{n.outputs[0].id} ({n.op.value}) reads state value %{v} before the write at node "
                            f"{overwritten[v]} overwrites it: stored first, not fused past the write"
                        )
    return grow


def _reads_of(g: FusionGraph, vid: int, stored: set[int]) -> set[int]:
    """The stored (or external) values computing ``vid`` inline reads."""
    plan = KernelPlan(g.node(vid).outputs[0])
    _collect(g, plan, [vid], stored)
    return plan.reads


def _scatter_operands(g: FusionGraph, k: KernelPlan, stored: set[int], declined: list[str]) -> set[int]:
    """The operands of ``k``'s scatter (its data for the copy, indices and updates for the writes) that are
    computed with a reduction, stored first (below their views)."""
    assert k.scatter is not None
    operands = k.scatter.inputs[1:] if k.in_place else k.scatter.inputs[:1]
    out: set[int] = set()
    for x in operands:
        if x.id not in stored and x.id not in g.external and has_reduction(g, x.id, stored):
            base = compute_below_views(g, x.id)
            out.add(base)
            declined.append(
                f"operand %{x.id} of scatter %{k.anchor.id} is computed with a reduction: %{base} stored first"
            )
    return out


def _reduction_conflicts(g: FusionGraph, k: KernelPlan, declined: list[str]) -> set[int]:
    """Reductions of ``k`` that cannot share its row loop; empty when the kernel is a valid reduction."""
    last = k.reductions[-1]
    key = reduction_key(last)
    shape, axes = key
    rows = _row_shapes(shape, axes)
    out: set[int] = set()
    for r in k.reductions:
        if reduction_key(r) != key:
            out.add(r.outputs[0].id)
            declined.append(
                f"reduction %{r.outputs[0].id} over axes {reduced_axes(r)} of {r.inputs[0].type.shape} not fused "
                f"with the reduction %{last.outputs[0].id} over {axes} of {shape}: other rows"
            )
    if out:
        return out
    allowed = {shape, *rows}
    above = _above_reductions(g, k)
    for i in sorted(above):
        n = g.graph.nodes[i]
        ok = n.op in REDUCTIONS or ((n.op in ELEMENTWISE or n.op is Op.RESHAPE) and n.outputs[0].type.shape in allowed)
        if not ok or (n.outputs[0].id == k.anchor.id and k.anchor.type.shape not in allowed):
            for r in k.reductions:
                out.add(r.outputs[0].id)
            declined.append(
                f"{n.op.value} %{n.outputs[0].id} uses reduction results at other rows than {shape} over {axes}: "
                "the reductions are stored first"
            )
            break
    return out


def _above_reductions(g: FusionGraph, k: KernelPlan) -> set[int]:
    """Nodes of ``k`` that depend (inside the kernel) on one of its reductions."""
    red = {r.outputs[0].id for r in k.reductions}
    dep: set[int] = set()
    out: set[int] = set()
    for i in sorted(k.nodes):
        n = g.graph.nodes[i]
        if any(x.id in red or x.id in dep for x in n.inputs):
            dep.update(o.id for o in n.outputs)
            out.add(i)
    return out


def _order(g: FusionGraph, kernels: Iterable[KernelPlan]) -> list[KernelPlan]:
    """Kernels in dependency order (a kernel runs after the kernels whose anchors it reads), ties broken by
    the anchor's position in the graph. A scatter's writes follow its copy, and its readers follow both."""
    kernels = sorted(kernels, key=lambda k: (g.prod[k.anchor.id][0], k.in_place))
    # the last writer of each stored value (a scatter's writes); a group stores several
    by_anchor = {v.id: i for i, k in enumerate(kernels) for v in k.outputs}
    copies = {k.anchor.id: i for i, k in enumerate(kernels) if k.scatter is not None and not k.in_place}

    def waits_on(i: int, r: int) -> int | None:
        """The launch kernel ``i`` waits on for the stored value ``r`` it reads: its writer, or for a scatter's writes
        reading their own output, its copy (a state write has none)."""
        j = by_anchor.get(r)
        return copies.get(r) if j == i else j

    deps = [{j for r in k.reads if (j := waits_on(i, r)) is not None} for i, k in enumerate(kernels)]
    for i, k in enumerate(kernels):  # a state write after every other reader of the value it overwrites
        if k.overwrites >= 0:
            if k.overwrites in by_anchor:
                deps[i].add(by_anchor[k.overwrites])
            deps[i].update(j for j, other in enumerate(kernels) if j != i and k.overwrites in other.reads)
    waiting = [len(d) for d in deps]
    readers: dict[int, list[int]] = {}
    for i, d in enumerate(deps):
        for j in d:
            readers.setdefault(j, []).append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    out: list[KernelPlan] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(kernels[i])
        for j in readers.get(i, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(out) != len(kernels):
        raise UnsupportedError("fusion produced a cycle between kernels")  # a scheduler bug, never user input
    return out


def _merge_pointwise(g: FusionGraph, kernels: list[KernelPlan]) -> list[KernelPlan]:
    """Folds a pointwise kernel into the next pointwise kernel of the same shape that reads its value at the
    same element (an LSTM's cell state and hidden state): one kernel stores both."""
    out: list[KernelPlan] = []
    for k in kernels:
        for j in range(len(out) - 1, -1, -1):
            p = out[j]
            # p's values (a merged p stores several) move to k's place: no launch between may read one, nor k
            # itself one it would then write beside reading (only p's anchor is proved read at the same element)
            moved = {v.id for v in p.outputs}
            if (
                _can_merge(g, p, k)
                and not (moved - {p.anchor.id}) & k.reads
                and not any(moved & q.reads for q in out[j + 1 :])
            ):
                k.nodes |= p.nodes
                k.reads = (k.reads | p.reads) - {p.anchor.id}
                k.stored_first = (*p.stored_first, p.anchor)
                k.view_outputs = (*p.view_outputs, *k.view_outputs)
                del out[j]
                break
            if p.anchor.id in k.reads:
                break  # only the nearest producer is tried, so ordering is kept
        out.append(k)
    return out


def _can_merge(g: FusionGraph, p: KernelPlan, k: KernelPlan) -> bool:
    if p.scatter or k.scatter or p.group or k.group:
        return False  # a scatter's copy and writes are two launches, each with its own template; a group is whole
    if p.root or k.root or p.reductions or k.reductions or p.anchor.id not in k.reads:
        return False
    if p.anchor.type.shape != k.anchor.type.shape or k.stored_first:
        return False
    # every node of k between p's value and k's anchor keeps the element where it is
    on_path: set[int] = {p.anchor.id}
    for i in sorted(k.nodes):
        n = g.graph.nodes[i]
        if any(x.id in on_path for x in n.inputs):
            if n.op not in ELEMENTWISE or n.outputs[0].type.shape != k.anchor.type.shape:
                return False
            on_path.add(n.outputs[0].id)
    return True
