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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aotc.ir.builder import Builder
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.symbolic import SymExpr, bounds, divisor, to_infix
from aotc.ir.types import Node, Value
from aotc.ir.verify import graph_ctx

ALIGN_BYTES = 16
MIN_MACS = 1 << 24  # 16.8M multiply-adds, e.g. 17 x 1001 x 999; below it a matmul is too small to be compute-bound
MAX_OVERHEAD = 0.12


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


def alignment(itemsize: int) -> int:
    """Elements per 16 bytes: the multiple K and N must be."""
    return max(1, ALIGN_BYTES // itemsize)


def pad_matmuls(graph: Graph, min_macs: int = MIN_MACS, max_overhead: float = MAX_OVERHEAD) -> Graph:
    return plan_padding(graph, min_macs, max_overhead).graph


def explain_padding(graph_before: Graph, min_macs: int = MIN_MACS, max_overhead: float = MAX_OVERHEAD) -> list[str]:
    """What the padding pass does to ``graph_before`` (the graph the pass receives), one line per matmul."""
    return plan_padding(graph_before, min_macs, max_overhead).lines


def plan_padding(graph: Graph, min_macs: int = MIN_MACS, max_overhead: float = MAX_OVERHEAD) -> PaddingReport:
    # A result that is a model output (or a cast of one) is stored unpadded whatever the matmul does.
    outputs = {o.id for o in graph.outputs}
    for node in reversed(graph.nodes):
        if node.op is Op.CAST and node.outputs[0].id in outputs:
            outputs.add(node.inputs[0].id)
    plans: dict[int, _Plan] = {}
    declined: list[str] = []
    for i, node in enumerate(graph.nodes):
        if node.op is not Op.MATMUL:
            continue
        plan_or_reason = _decide(graph, node, node.outputs[0].id in outputs, min_macs, max_overhead)
        if isinstance(plan_or_reason, _Plan):
            plans[i] = plan_or_reason
        elif plan_or_reason:
            declined.append(f"{_describe(node)}: {plan_or_reason}")
    if not plans:
        return PaddingReport(graph, (), tuple(declined))
    return PaddingReport(
        _rewrite(graph, plans),
        tuple(f"{_describe(graph.nodes[i])}: {p.why}" for i, p in plans.items()),
        tuple(declined),
    )


def _decide(graph: Graph, node: Node, is_output: bool, min_macs: int, max_overhead: float) -> _Plan | str | None:
    """A plan, a reason not to pad, or None when the matmul is aligned already."""
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
    if "N" in pads and is_output:
        notes.append(f"N = {n} not padded: the result is a model output, stored unpadded anyway")
        del pads["N"]
        if not pads:
            return f"only N = {n} is misaligned ({rule}), and the result is a model output, stored unpadded anyway"
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
    weights = _weights(graph, plans, producer)
    constants = dict(graph.constants)
    for name, pads in weights.items():
        constants[name] = np.pad(constants[name], [(0, p) for p in pads])
    b = Builder(graph_ctx(graph), next_id=graph.max_value_id() + 1)
    remap: dict[int, Value] = {v.id: v for v in graph.inputs}
    padded_const: dict[int, tuple[Value, tuple[int, ...]]] = {}  # slice-back value id -> (padded weight, pads)
    new_producer: dict[int, Node] = {}
    pad_cache: dict[tuple[int, tuple[int, ...]], Value] = {}
    indexed = 0
    for i, node in enumerate(graph.nodes):
        b.loc = node.loc
        inputs = [remap[v.id] for v in node.inputs]
        name = node.attrs["name"] if node.op is Op.CONSTANT else None
        if name in weights:
            # The padded weight replaces the original; every reader sees the original through a SLICE view.
            shape = tuple(node.attrs["shape"])
            full = b.op(Op.CONSTANT, name=name, shape=tuple(constants[name].shape), dtype=node.attrs["dtype"])
            back = b.op(Op.SLICE, full, starts=(0,) * len(shape), stops=shape, steps=(1,) * len(shape))
            padded_const[back.id] = (full, tuple(weights[name]))
            outs: Sequence[Value] = (back,)
        elif i in plans:
            outs = (_padded_matmul(b, node, inputs, plans[i], padded_const, new_producer, pad_cache),)
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


def _padded_matmul(
    b: Builder,
    node: Node,
    inputs: Sequence[Value],
    plan: _Plan,
    padded_const: Mapping[int, tuple[Value, tuple[int, ...]]],
    producer: Mapping[int, Node],
    pad_cache: dict[tuple[int, tuple[int, ...]], Value],
) -> Value:
    x, w = inputs
    rx, rw = x.type.rank, w.type.rank
    xp = _pad_operand(b, x, _axis_pads(rx, {rx - 1: plan.pad_k}), padded_const, producer, pad_cache)
    wp = _pad_operand(b, w, _axis_pads(rw, {rw - 2: plan.pad_k, rw - 1: plan.pad_n}), padded_const, producer, pad_cache)
    y = b.op(Op.MATMUL, xp, wp, **dict(node.attrs.items()))
    if not plan.pad_n:
        return y
    shape = y.type.shape
    stops = tuple(shape[:-1]) + (shape[-1] - plan.pad_n,)
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


def _weights(graph: Graph, plans: Mapping[int, _Plan], producer: Mapping[int, Node]) -> dict[str, list[int]]:
    """Per constant that planned matmuls read (directly or through one PERMUTE): the largest pad per axis."""
    out: dict[str, list[int]] = {}
    for i, plan in plans.items():
        node = graph.nodes[i]
        for operand, v in enumerate(node.inputs):
            rank = v.type.rank
            wanted = {rank - 1: plan.pad_k} if operand == 0 else {rank - 2: plan.pad_k, rank - 1: plan.pad_n}
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
