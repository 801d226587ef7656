"""A recurrence whose steps are one computation at successive time offsets, emitted as a loop over the steps.

An unrolled recurrence (aotc/kernels/recurrent.py) traces one cell per time step. When every step computes the
same thing (the same ops, attrs and weights) from its own step's values, the previous step's values (its state)
and inputs that differ per step only by where they are read (``x[:, t]``: a slice whose start moves by a fixed
stride each step), the chain is one loop, ``for step in range(0, T)``, whose body Triton compiles once: the cost
of compiling the kernel no longer grows with the number of steps (four unrolled LSTM steps took ~18 s per
target on 2 cores, a ten-step loop ~3 s), and the whole chain is one launch.

The states a loop hands on live in loop-carried registers, starting from what the first step reads (zeros, or
a given ``h0``). A step's state stacked into one value (``stack(outputs)``: a concat of the states, each
reshaped, in step order or reversed) is stored into that value at the step's offset, so the next layer reads
one buffer at its own time offsets, and its chain is a loop too. What the last step computes and something
else reads (``h_n``, ``c_n``) is stored after the loop. Any other value of a step read outside the chain, an
input that is not such a moving view, or steps that differ in any other way leave the chain to the unrolled
launches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aotc.ir.ops import Op
from aotc.ir.symbolic import SymExpr, add, mul
from aotc.ir.types import Node, Value
from aotc.kernels import view_rules
from aotc.kernels.fusion_graph import FusionGraph

if TYPE_CHECKING:
    from aotc.kernels.emit import KernelBuilder

__all__ = ["Loop", "Stack", "TimeRead", "loop_of"]

# the views a per-step input may be read through (each with one source element per element)
_MOVING = frozenset({Op.RESHAPE, Op.PERMUTE, Op.FLIP, Op.SLICE, Op.BROADCAST})
Position = tuple[int, int]  # (node position in a step, output slot)
# how a step's node reads an input: ("own", position) in its step, ("prev", position) in the step before, or
# ("ext", value id) from outside the chain
Source = tuple[str, Any]


class Cell(Protocol):
    """What a loop reads of a step (aotc/kernels/recurrent.py's Cell, which imports this module)."""

    products: tuple[Node, ...]
    gates: Node
    slices: tuple[Node, ...]
    pre: frozenset[int]
    body: tuple[int, ...]
    recurrent: Node | None


@dataclass(frozen=True)
class TimeRead:
    """An input each step reads at its own time offset: step t's value is ``base`` through ``views`` (the first
    step's view nodes, from the step's value down to ``base``), each slice's starts moved by its ``deltas`` per
    step (None: not a slice)."""

    base: Value
    views: tuple[tuple[Node, tuple[int, ...] | None], ...]

    def at(self, b: KernelBuilder, step: SymExpr) -> Callable[[tuple], tuple[Value, tuple]]:
        """The builder's redirect (``KernelBuilder.redirects``): an index of the step's value -> ``base``'s."""

        def source(index: tuple) -> tuple[Value, tuple]:
            idx: list = list(index)
            for node, deltas in self.views:
                starts = None
                if deltas is not None:
                    starts = [add(s, mul(step, d)) for s, d in zip(node.attrs["starts"], deltas)]
                idx = view_rules.source_index(b, node, idx, starts)
            return self.base, tuple(idx)

        return source


@dataclass(frozen=True)
class Stack:
    """The concat each step's state joins (through ``reshape``, one per step, or none) at ``first + order *
    step``-th place along ``axis``, each part ``width`` wide there."""

    concat: Node
    reshape: Node | None  # the first step's (the others differ only in their input)
    axis: int
    first: int
    order: int  # 1: in step order; -1: reversed (a backward direction filling outs[t] from the end)
    width: int
    nodes: frozenset[int]  # the concat's and the reshapes' node indices

    def index(self, b: KernelBuilder, step: SymExpr, row: Any, col: Any) -> list:
        """Where the state's element (row, col) at ``step`` lands in the concat."""
        idx: list = [row, col]
        if self.reshape is not None:
            idx = view_rules.forward(b, self.reshape, idx)
        place = add(self.first, mul(step, self.order))
        idx[self.axis] = add(idx[self.axis], mul(place, self.width))
        return idx


@dataclass(frozen=True)
class Loop:
    """A chain of cells emitted as a loop. ``cells[1]`` is the loop's body (the template step); ``carried`` its
    inputs from the step before (value ids of ``cells[0]``, the state first), each with the value the first step
    reads instead (``initial``) and the template's own value at the same position, handed to the next step
    (``handed``); ``time`` the template's inputs read at a moving offset; ``last`` the last step's values
    something outside reads, by the carried input whose place they take (and the reshape of it they are, if
    one: the stack's own reshape of the last state, read elsewhere too)."""

    cells: tuple[Cell, ...]
    carried: tuple[int, ...]
    initial: Mapping[int, Value]
    handed: Mapping[int, Value]
    time: Mapping[int, TimeRead]
    stack: Stack | None
    last: Mapping[int, tuple[int, Node | None]]  # last step's value id -> (carried input, reshape)
    nodes: frozenset[int]  # every node the loop computes (its steps and the stack)


def step_nodes(g: FusionGraph, c: Cell) -> list[int]:
    """A step's nodes in graph order: its products, gate pre-activation, gate slices and body."""
    idx = {g.prod[n.outputs[0].id][0] for n in (*c.products, *c.slices)}
    return sorted(idx | c.pre | set(c.body))


def loop_of(g: FusionGraph, chain: Sequence[Cell]) -> Loop | None:
    """The chain as a loop, if its steps are one computation at moving offsets (None: it stays unrolled)."""
    if len(chain) < 2 or chain[1].recurrent is None:
        return None
    nodes = g.graph.nodes
    steps = [step_nodes(g, c) for c in chain]
    template = steps[1]
    if any(len(s) != len(template) for s in steps):
        return None
    if any(not _same_node(nodes[i], nodes[j]) for s in steps for i, j in zip(s, template)):
        return None
    where = [{o.id: (k, j) for k, i in enumerate(s) for j, o in enumerate(nodes[i].outputs)} for s in steps]
    sources = [_sources(g, steps, where, t) for t in range(len(chain))]
    if any(s is None for s in sources):
        return None
    initial: dict[Position, Value] = {}
    ext: dict[tuple[int, int], list[int]] = {}  # (node position, input slot) -> the value each step reads
    for (k, j), src in sources[1].items():
        for t in range(len(chain)):
            mine = sources[t][k, j]
            if src[0] == "prev" and t == 0:
                value = nodes[steps[0][k]].inputs[j]
                if mine[0] != "ext" or initial.setdefault(src[1], value) != value:
                    return None  # the first step reads two values where later steps read one
            elif mine[0] != src[0] or (src[0] != "ext" and mine != src):
                return None
            elif src[0] == "ext":
                ext.setdefault((k, j), []).append(mine[1])
    state = where[0].get(chain[1].recurrent.inputs[0].id)
    if state is None or state not in initial:
        return None
    carried_at = [state, *sorted(p for p in initial if p != state)]
    time: dict[int, TimeRead] = {}
    for (k, j), ids in ext.items():
        if len(set(ids)) > 1:
            read = _time_read(g, ids)
            if read is None:
                return None
            time[nodes[template[k]].inputs[j].id] = read
    values = [_values(g, s) for s in steps]
    states = [v[state] for v in values]
    stack = _stack(g, states, steps)
    if stack is False:
        return None
    inside = set().union(*map(set, steps)) | (stack.nodes if stack is not None else set())
    last: dict[int, tuple[int, Node | None]] = {}
    if stack is not None and stack.reshape is not None:
        for t, h in enumerate(states):
            r = next(g.graph.nodes[u] for u in stack.nodes if g.graph.nodes[u].inputs[0].id == h.id)
            if r.outputs[0].id in g.output_ids or len(g.users[r.outputs[0].id]) > 1:
                if t < len(chain) - 1:
                    return None
                last[r.outputs[0].id] = (values[0][state].id, r)
    for t, s in enumerate(steps):
        final = t == len(chain) - 1
        near = inside if final else set(s) | set(steps[t + 1]) | (stack.nodes if stack is not None else set())
        for pos, value in values[t].items():
            if value.id not in g.output_ids and set(g.users.get(value.id, ())) <= near:
                continue
            if not final or pos not in carried_at:
                return None  # a step's value read elsewhere: each step would store its own
            last[value.id] = (values[0][pos].id, None)
    return Loop(
        cells=tuple(chain),
        carried=tuple(values[0][p].id for p in carried_at),
        initial={values[0][p].id: initial[p] for p in carried_at},
        handed={values[0][p].id: values[1][p] for p in carried_at},
        time=time,
        stack=stack,
        last=last,
        nodes=frozenset(inside),
    )


def _values(g: FusionGraph, step: Sequence[int]) -> dict[Position, Value]:
    return {(k, j): o for k, i in enumerate(step) for j, o in enumerate(g.graph.nodes[i].outputs)}


def _sources(
    g: FusionGraph, steps: Sequence[Sequence[int]], where: Sequence[Mapping[int, Position]], t: int
) -> dict[tuple[int, int], Source] | None:
    """Where each input of step ``t``'s nodes comes from (None: from a step further back, or ahead)."""
    out: dict[tuple[int, int], Source] = {}
    for k, i in enumerate(steps[t]):
        for j, x in enumerate(g.graph.nodes[i].inputs):
            if x.id in where[t]:
                out[k, j] = ("own", where[t][x.id])
            elif t > 0 and x.id in where[t - 1]:
                out[k, j] = ("prev", where[t - 1][x.id])
            elif any(x.id in w for w in where):
                return None
            else:
                out[k, j] = ("ext", x.id)
    return out


def _same_node(a: Node, b: Node) -> bool:
    return (
        a.op is b.op
        and a.attrs == b.attrs
        and len(a.inputs) == len(b.inputs)
        and [o.type for o in a.outputs] == [o.type for o in b.outputs]
        and [x.type for x in a.inputs] == [x.type for x in b.inputs]
    )


def _time_read(g: FusionGraph, ids: Sequence[int]) -> TimeRead | None:
    """The common value the per-step inputs ``ids`` are moving views of, if they are."""
    current = list(ids)
    views: list[tuple[Node, tuple[int, ...] | None]] = []
    while len(set(current)) > 1:
        if any(v in g.external for v in current):
            return None
        ns = [g.node(v) for v in current]
        first = ns[0]
        if first.op not in _MOVING or any(n.op is not first.op or len(n.inputs) != 1 for n in ns):
            return None
        if any(n.inputs[0].type != first.inputs[0].type or n.outputs[0].type != first.outputs[0].type for n in ns):
            return None
        deltas = None
        if first.op is Op.SLICE:
            deltas = _deltas(ns)
            if deltas is None:
                return None
        elif any(n.attrs != first.attrs for n in ns):
            return None
        views.append((first, deltas))
        current = [n.inputs[0].id for n in ns]
    base = _value(g, current[0])
    return None if base is None or not views else TimeRead(base, tuple(views))


def _value(g: FusionGraph, vid: int) -> Value | None:
    if vid in g.prod:
        return next(o for o in g.prod[vid][1].outputs if o.id == vid)
    return next((v for v in g.graph.inputs if v.id == vid), None)


def _deltas(ns: Sequence[Node]) -> tuple[int, ...] | None:
    """Per dim, the stride by which the slices' starts move each step (affine in the step), if they do."""
    starts = [n.attrs["starts"] for n in ns]
    if any(n.attrs["steps"] != ns[0].attrs["steps"] for n in ns):
        return None
    if any(not isinstance(s, int) for st in starts for s in st):
        return None
    deltas = tuple(b - a for a, b in zip(starts[0], starts[1]))
    for t, st in enumerate(starts):
        if any(s != s0 + t * d for s, s0, d in zip(st, starts[0], deltas)):
            return None
    return deltas


def _stack(g: FusionGraph, states: Sequence[Value], steps: Sequence[Sequence[int]]) -> Stack | bool | None:
    """The concat the steps' states join, each through a reshape of its own or directly (None: no state joins
    one; False: some do in a way the loop cannot store)."""
    nodes = g.graph.nodes
    hits: list[list[tuple[Node, Value]]] = []
    for t, h in enumerate(states):
        near = set(steps[t]) | (set(steps[t + 1]) if t + 1 < len(steps) else set())
        mine = []
        for u in dict.fromkeys(g.users.get(h.id, ())):
            if u in near:
                continue
            n = nodes[u]
            if n.op is Op.CONCAT:
                mine.append((n, h))
            elif n.op is Op.RESHAPE:  # (the last state's may be read elsewhere too: torch's h_n stacks it again)
                part = n.outputs[0]
                mine += [(nodes[r], part) for r in g.users.get(part.id, ()) if nodes[r].op is Op.CONCAT]
        hits.append(mine)
    if not any(hits):
        return None
    # the concat every step's state joins (the last state may join others too: torch's h_n)
    common = [n for n, _ in hits[0] if all(sum(c is n for c, _ in m) == 1 for m in hits)]
    if len(common) != 1:
        return False
    concat = common[0]
    parts = [next(p for c, p in m if c is concat) for m in hits]
    ids = [x.id for x in concat.inputs]
    if sorted(ids) != sorted(p.id for p in parts) or len(set(ids)) != len(ids):
        return False
    places = [ids.index(p.id) for p in parts]
    order = 1 if places == sorted(places) else -1 if places == sorted(places, reverse=True) else 0
    axis = concat.attrs.get("axis", 0) % concat.outputs[0].type.rank
    width = parts[0].type.shape[axis]
    if not order or not isinstance(width, int) or any(p.type != parts[0].type for p in parts):
        return False
    reshapes = [g.node(p.id) for p in parts if p.id not in {h.id for h in states}]
    if reshapes and (len(reshapes) != len(parts) or any(r.attrs != reshapes[0].attrs for r in reshapes)):
        return False
    own = {g.prod[concat.outputs[0].id][0], *(g.prod[p.id][0] for p in parts if reshapes)}
    return Stack(concat, reshapes[0] if reshapes else None, axis, places[0], order, width, frozenset(own))
