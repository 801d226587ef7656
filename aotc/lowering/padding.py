"""Matmul padding: K and N dims that break 16-byte alignment are padded with zeros when it pays.

The alignment rule. Tensor-core matmul kernels read operands as 16-byte vectors (sm_90 through TMA, which
needs 16-byte-aligned row strides). Row-major A (M, K), B (K, N) and C (M, N) have row strides K, N and N
elements, so K and N must be multiples of 16 / itemsize elements: 4 for float32, 8 for bfloat16 and float16.
M is never a row stride, so it is never padded: that would add work and fix nothing. A symbolic dim is
aligned when its symbols' ``multiple_of`` prove it; a symbolic dim that is not proven is left alone (only
static dims are padded).

The cost rule. Padding pays only for compute-bound matmuls: at least ``MIN_MACS`` multiply-adds at the
largest shapes the symbols allow (the artifact is built for its whole range, and the big calls dominate),
and the padded problem may add less than ``MAX_OVERHEAD`` (12%) of the work. A small or memory-bound matmul
would read more weight bytes than aligned loads save.

The rewrite is the same math: K is padded on both operands, so the added products are 0 * 0; N's padded
columns of the result are sliced off (a SLICE view). A weight (a constant, or a permuted view of one) is padded
once here, at compile time, and the padded array replaces the original under the same name, so the artifact
stores it once; any other reader of that weight reads a SLICE of it. An activation is padded with a PAD view,
which the kernel layer turns into index math (or into the zero tail its producer writes).

The slice sinks. The matmul kernel applies pointwise consumers of its full output tile in its epilogue (bias,
activation, residual), so a SLICE between the matmul and them would cost a kernel. While the sliced value has
one consumer, pointwise with its shape, the slice moves below it: op(slice(y), b) becomes slice(op(y, b')),
where b' is b padded along N when b has the full N (a weight padded here, an activation through a PAD view)
and b itself when it broadcasts along N. Only float and bool values take part: the padded columns may hold
anything (they are sliced off unread), and an integer division by a zero pad would trap. A chain that ends in
a model output is not padded in N at all: the output is stored unpadded, so the slice would cost a copy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops import ELEMENTWISE, Op
from aotc.ir.symbolic import SymExpr, to_infix
from aotc.ir.symbolic_values import bounds, divisor
from aotc.ir.types import Node, Value
from aotc.ir.verify import graph_ctx

ALIGN_BYTES = 16
MIN_MACS = 1 << 24  # 16.8M multiply-adds, e.g. 17 x 1001 x 999; below it a matmul is too small to be compute-bound
MAX_OVERHEAD = 0.12

Pad = Callable[[Value, tuple[int, ...]], Value]  # a value with zeros after each axis (see _pad_operand)


@dataclass(frozen=True)
class PaddingReport:
    """The padded graph, and one human-readable line per misaligned matmul: what was padded and why,
    or why it was not."""

    graph: Graph
    padded: tuple[str, ...] = ()
    declined: tuple[str, ...] = ()

    @property
    def lines(self) -> list[str]:
        return [f"padded: {s}" for s in self.padded] + [f"not padded: {s}" for s in self.declined]


@dataclass
class _Plan:
    pad_k: int
    pad_n: int
    why: str
    sink: tuple[int, ...] = ()  # indices of the pointwise nodes the N slice moves below, in order


@dataclass(frozen=True)
class _Decisions:
    plans: dict[int, _Plan]  # by matmul node index
    padded: tuple[str, ...]
    declined: tuple[str, ...]


def alignment(itemsize: int) -> int:
    """Elements per 16 bytes: the multiple K and N must be."""
    return max(1, ALIGN_BYTES // itemsize)


def pad_matmuls(graph: Graph, min_macs: int = MIN_MACS, max_overhead: float = MAX_OVERHEAD) -> Graph:
    return plan_padding(graph, min_macs, max_overhead).graph


def explain_padding(graph_before: Graph, min_macs: int = MIN_MACS, max_overhead: float = MAX_OVERHEAD) -> list[str]:
    """What the padding pass does to ``graph_before`` (the graph the pass receives), one line per matmul.
    Decides only: the graph is not rewritten."""
    d = _decide_all(graph_before, min_macs, max_overhead)
    return PaddingReport(graph_before, d.padded, d.declined).lines


def padded_lines(graph_before: Graph, min_macs: int = MIN_MACS, max_overhead: float = MAX_OVERHEAD) -> list[str]:
    """The ``padded:`` lines of :func:`explain_padding` alone: what the pass pads (the artifact records them)."""
    return [f"padded: {s}" for s in _decide_all(graph_before, min_macs, max_overhead).padded]


def plan_padding(graph: Graph, min_macs: int = MIN_MACS, max_overhead: float = MAX_OVERHEAD) -> PaddingReport:
    d = _decide_all(graph, min_macs, max_overhead)
    return PaddingReport(_rewrite(graph, d.plans) if d.plans else graph, d.padded, d.declined)


def _decide_all(graph: Graph, min_macs: int, max_overhead: float) -> _Decisions:
    # A result that is a model output (or a cast of one) is stored unpadded whatever the matmul does.
    outputs = {o.id for o in graph.outputs}
    for node in reversed(graph.nodes):
        if node.op is Op.CAST and node.outputs[0].id in outputs:
            outputs.add(node.inputs[0].id)
    users: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for v in {v.id for v in node.inputs}:
            users.setdefault(v, []).append(i)
    plans: dict[int, _Plan] = {}
    sunk: dict[int, int] = {}  # pointwise node index -> the N pad of the slice moved below it
    padded: list[str] = []
    declined: list[str] = []
    for i, node in enumerate(graph.nodes):
        if node.op is not Op.MATMUL:
            continue
        chain = _pointwise_chain(graph, node.outputs[0], users, outputs)
        end = graph.nodes[chain[-1]].outputs[0] if chain else node.outputs[0]
        via = [graph.nodes[j] for j in chain] if end.id in outputs else None
        decision = _decide(graph, node, via, min_macs, max_overhead)
        if isinstance(decision, str):
            declined.append(f"{_describe(node)}: {decision}")
        elif decision is not None:
            if decision.pad_n:
                # Padded matmuls meeting in one pointwise node (a residual add) share the rest of the chain;
                # one whose N pad differs there (another dtype) keeps its slice above that node.
                clash = [k for k, j in enumerate(chain) if sunk.get(j, decision.pad_n) != decision.pad_n]
                decision.sink = tuple(chain[: clash[0] if clash else len(chain)])
                sunk.update((j, decision.pad_n) for j in decision.sink)
            plans[i] = decision
            padded.append(f"{_describe(node)}: {decision.why}")
    return _Decisions(plans, tuple(padded), tuple(declined))


def _pointwise_chain(graph: Graph, v: Value, users: Mapping[int, list[int]], outputs: set[int]) -> list[int]:
    """The nodes a slice of ``v`` could sink below: while the value is no model output and has one reader, a
    pointwise node with its shape over float and bool values. The last one's result is where the chain ends."""
    chain: list[int] = []
    while v.id not in outputs and len(users.get(v.id, ())) == 1:
        j = users[v.id][0]
        node = graph.nodes[j]
        if (
            node.op not in ELEMENTWISE
            or len(node.outputs) != 1
            or node.outputs[0].type.shape != v.type.shape
            or not all(x.type.dtype.is_float or x.type.dtype is DType.bool for x in (*node.inputs, *node.outputs))
        ):
            break
        chain.append(j)
        v = node.outputs[0]
    return chain


def _decide(graph: Graph, node: Node, via: list[Node] | None, min_macs: int, max_overhead: float) -> _Plan | str | None:
    """A plan, a reason not to pad, or None when the matmul is aligned already. ``via`` is None unless the
    result reaches a model output, and then the pointwise nodes it goes through (none: it is one)."""
    a, b = node.inputs
    dtype = a.type.dtype
    if not dtype.is_float:
        return None  # integer matmuls have no tensor-core path to align for
    align = alignment(dtype.itemsize)
    k, n = a.type.shape[-1], b.type.shape[-1]
    pads, unproven = {}, []
    for label, d in (("K", k), ("N", n)):
        if isinstance(d, int):
            if d % align:
                pads[label] = -d % align
        elif divisor(d, graph.multiples) % align:
            unproven.append(f"{label} = {to_infix(d)}")
    if not pads:
        if unproven:
            return (
                f"{' and '.join(unproven)} may break {ALIGN_BYTES}-byte alignment ({align} {dtype.value} elements), "
                f"but only static dims are padded (a Dim's multiple_of={align} proves alignment)"
            )
        return None
    rule = f"{ALIGN_BYTES}-byte rows: multiples of {align} {dtype.value} elements"
    notes = [f"{u} is symbolic, not padded" for u in unproven]
    if "N" in pads and via is not None:
        output = "a model output" if not via else f"a model output through {', '.join(x.op.value for x in via)}"
        notes.append(f"N = {n} not padded: the result is {output}, stored unpadded anyway")
        del pads["N"]
        if not pads:
            return f"only N = {n} is misaligned ({rule}), and the result is {output}, stored unpadded anyway"
    out_shape = node.outputs[0].type.shape
    macs = math.prod(_max_value(graph, d) for d in (*out_shape, k))
    # Padded dims are static; the work grows by their ratios (M is never padded).
    overhead = math.prod((d + pads[label]) / d for label, d in (("K", k), ("N", n)) if label in pads) - 1
    what = ", ".join(f"{label} {d} -> {d + pads[label]}" for label, d in (("K", k), ("N", n)) if label in pads)
    if macs < min_macs:
        return f"{what} would align it ({rule}), but {_fmt(macs)} MACs at most is memory-bound (< {_fmt(min_macs)})"
    if overhead >= max_overhead:
        return f"{what} would add {overhead:.1%} of the work (limit {max_overhead:.0%})"
    why = f"{what} ({rule}); +{overhead:.2%} work on {_fmt(macs)} MACs at most"
    if notes:
        why += "; " + "; ".join(notes)
    return _Plan(pads.get("K", 0), pads.get("N", 0), why)


def _max_value(graph: Graph, d: int | SymExpr) -> int:
    return d if isinstance(d, int) else int(bounds(d, graph.ranges, graph.multiples)[1])


def _fmt(x: int) -> str:
    return f"{x / 1e9:.1f}G" if x >= 1e9 else f"{x / 1e6:.1f}M" if x >= 1e6 else str(x)


def _describe(node: Node) -> str:
    a, b = node.inputs
    where = f" at {node.loc}" if node.loc else ""
    return f"matmul {node.outputs[0]} {a.type} @ {b.type}{where}"


def _rewrite(graph: Graph, plans: Mapping[int, _Plan]) -> Graph:
    producer = {o.id: n for n in graph.nodes for o in n.outputs}
    weights = _weights(_pad_requests(graph, plans), producer)
    constants = dict(graph.constants)
    for name, pads in weights.items():
        constants[name] = np.pad(constants[name], [(0, p) for p in pads])
    sink_pad = {j: plan.pad_n for plan in plans.values() for j in plan.sink}
    # A planned matmul and each sunk node but the last hand their N-padded result on; the last one is sliced.
    keep_wide = {graph.nodes[j].outputs[0].id for i, plan in plans.items() for j in (i, *plan.sink)[:-1]}
    b = Builder(graph_ctx(graph), next_id=graph.max_value_id() + 1)
    remap: dict[int, Value] = {v.id: v for v in graph.inputs}
    wide: dict[int, Value] = {}  # value id -> its N-padded stand-in, read by the next node of its chain only
    padded_const: dict[int, tuple[Value, tuple[int, ...]]] = {}  # slice-back value id -> (padded weight, pads)
    new_producer: dict[int, Node] = {}
    pad_cache: dict[tuple[int, tuple[int, ...]], Value] = {}

    def pad(v: Value, pads: tuple[int, ...]) -> Value:
        return _pad_operand(b, v, pads, padded_const, new_producer, pad_cache)

    indexed = 0
    for i, node in enumerate(graph.nodes):
        b.loc = node.loc
        inputs = [wide[v.id] if v.id in wide else remap[v.id] for v in node.inputs]
        name = node.attrs["name"] if node.op is Op.CONSTANT else None
        outs: Sequence[Value]
        if name in weights:
            # The padded weight replaces the original; every reader sees the original through a SLICE view.
            shape = tuple(node.attrs["shape"])
            full = b.op(Op.CONSTANT, name=name, shape=tuple(constants[name].shape), dtype=node.attrs["dtype"])
            back = b.op(Op.SLICE, full, starts=(0,) * len(shape), stops=shape, steps=(1,) * len(shape))
            padded_const[back.id] = (full, tuple(weights[name]))
            outs = (back,)
        elif i in plans or i in sink_pad:
            if i in plans:
                pad_n, y = plans[i].pad_n, _padded_matmul(b, node, inputs, plans[i], pad)
            else:
                pad_n = sink_pad[i]
                y = _padded_pointwise(b, node, inputs, [v.id in wide for v in node.inputs], pad_n, pad)
            if node.outputs[0].id in keep_wide:
                wide[node.outputs[0].id] = y
                outs = ()
            else:
                outs = (_slice_back(b, y, pad_n),)
        else:
            same = all(a is c for a, c in zip(inputs, node.inputs))
            b.nodes.append(node if same else node.replace(inputs=tuple(inputs)))
            outs = node.outputs
        for old, new in zip(node.outputs, outs):
            remap[old.id] = new
        for n in b.nodes[indexed:]:
            for o in n.outputs:
                new_producer[o.id] = n
        indexed = len(b.nodes)
    outputs = tuple(remap[o.id] for o in graph.outputs)
    return graph.replace(nodes=tuple(b.nodes), outputs=outputs, constants=constants)


def _padded_matmul(b: Builder, node: Node, inputs: Sequence[Value], plan: _Plan, pad: Pad) -> Value:
    """The matmul on padded operands; its result keeps the N padding."""
    x, w = inputs
    rx, rw = x.type.rank, w.type.rank
    xp = pad(x, _axis_pads(rx, {rx - 1: plan.pad_k}))
    wp = pad(w, _axis_pads(rw, {rw - 2: plan.pad_k, rw - 1: plan.pad_n}))
    return b.op(Op.MATMUL, xp, wp, **dict(node.attrs.items()))


def _padded_pointwise(
    b: Builder, node: Node, inputs: Sequence[Value], is_wide: Sequence[bool], pad_n: int, pad: Pad
) -> Value:
    """``node`` over N-padded operands: the chain's own (already wide), others with the full N padded, and
    those that broadcast along N as they are."""
    n = node.outputs[0].type.shape[-1]
    operands = [
        pad(u, _axis_pads(u.type.rank, {u.type.rank - 1: pad_n}))
        if not wide and u.type.rank and u.type.shape[-1] == n
        else u
        for u, wide in zip(inputs, is_wide)
    ]
    return b.emit(node.op, operands, node.attrs)[0]


def _slice_back(b: Builder, y: Value, pad_n: int) -> Value:
    if not pad_n:
        return y
    shape = y.type.shape
    stops = tuple(shape[:-1]) + (shape[-1] - pad_n,)
    return b.op(Op.SLICE, y, starts=(0,) * len(shape), stops=stops, steps=(1,) * len(shape))


def _axis_pads(rank: int, pads: Mapping[int, int]) -> tuple[int, ...]:
    return tuple(pads.get(ax, 0) for ax in range(rank))


def _pad_operand(
    b: Builder,
    v: Value,
    pads: tuple[int, ...],
    padded_const: Mapping[int, tuple[Value, tuple[int, ...]]],
    producer: Mapping[int, Node],
    pad_cache: dict[tuple[int, tuple[int, ...]], Value],
) -> Value:
    """``v`` with ``pads`` zeros after each axis: the padded weight itself when ``v`` is a weight (or a
    permuted view of one) padded just so, else a PAD view."""
    if not any(pads):
        return v
    if v.id in padded_const and padded_const[v.id][1] == pads:
        return padded_const[v.id][0]
    src = producer.get(v.id)
    if src is not None and src.op is Op.PERMUTE and src.inputs[0].id in padded_const:
        full, cpads = padded_const[src.inputs[0].id]
        perm = src.attrs["perm"]
        want = [0] * len(pads)
        for out_axis, in_axis in enumerate(perm):
            want[in_axis] = pads[out_axis]
        if tuple(want) == cpads:
            return b.permute(full, perm)
    key = (v.id, pads)
    if key not in pad_cache:  # q, k and v projections of one activation share its PAD
        pad_cache[key] = b.op(Op.PAD, v, pads=tuple(x for p in pads for x in (0, p)), value=0.0)
    return pad_cache[key]


def _pad_requests(graph: Graph, plans: Mapping[int, _Plan]) -> Iterator[tuple[Value, dict[int, int]]]:
    """Each value the rewrite pads, with its pad per axis: both matmul operands, and the other operands of the
    sunk pointwise nodes that have the full N (a bias, a residual)."""
    for i, plan in plans.items():
        x, w = graph.nodes[i].inputs
        yield x, {x.type.rank - 1: plan.pad_k}
        yield w, {w.type.rank - 2: plan.pad_k, w.type.rank - 1: plan.pad_n}
        chain = {graph.nodes[j].outputs[0].id for j in (i, *plan.sink)}
        for j in plan.sink:
            n = graph.nodes[j].outputs[0].type.shape[-1]
            for v in graph.nodes[j].inputs:
                if v.id not in chain and v.type.rank and v.type.shape[-1] == n:
                    yield v, {v.type.rank - 1: plan.pad_n}


def _weights(requests: Iterable[tuple[Value, dict[int, int]]], producer: Mapping[int, Node]) -> dict[str, list[int]]:
    """Per constant the rewrite pads (read directly or through one PERMUTE): the largest pad per axis."""
    out: dict[str, list[int]] = {}
    for v, wanted in requests:
        rank = v.type.rank
        src = producer.get(v.id)
        perm: tuple[int, ...] = tuple(range(rank))
        if src is not None and src.op is Op.PERMUTE:
            perm = src.attrs["perm"]
            src = producer.get(src.inputs[0].id)
        if src is None or src.op is not Op.CONSTANT or not src.outputs[0].type.is_static():
            continue
        pads = out.setdefault(src.attrs["name"], [0] * rank)
        for out_axis, in_axis in enumerate(perm):
            pads[in_axis] = max(pads[in_axis], wanted.get(out_axis, 0))
    return {name: pads for name, pads in out.items() if any(pads)}
