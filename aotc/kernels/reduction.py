"""The reduction template: rows of the reduced axes, several reductions and their pointwise neighbours.

The iteration space is the reductions' common input shape split into outer dims (one row each, XBLOCK rows
per program) and reduced dims (RBLOCK elements at a time). A persistent kernel holds the whole row in one
block; a looped one walks the row once per dependency level of the reductions (softmax: max, then sum) and
once more for values stored at full shape. Half precision accumulates in float32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.schedule import Kernel
from aotc.ir.symbolic import add, floordiv, mul, sym
from aotc.ir.symbolic_values import bounds
from aotc.ir.templates import KernelKind
from aotc.ir.types import Node, Shape, Value
from aotc.kernels.config import KernelConfig
from aotc.kernels.emit import KernelBuilder, numel
from aotc.kernels.fusion_graph import reduced_axes
from aotc.kernels.pointwise import unravel_into
from aotc.kernels.pointwise_ops import HALF, TL_DTYPE, is_literal
from aotc.kernels.reach import GRID_X

if TYPE_CHECKING:
    from aotc.ir.graph import Graph
    from aotc.kernels.fusion import KernelPlan

_COMBINE = {Op.REDUCE_SUM: "tl.sum", Op.REDUCE_MAX: "tl.max", Op.REDUCE_MIN: "tl.min"}


def emit_plan(b: KernelBuilder, kp: KernelPlan, name: str, config: KernelConfig, tiles: Any = None) -> Kernel:
    """The template table's emitter (aotc/ir/templates.py): ``kp``'s reductions, one row loop, storing its anchor."""
    return emit_reduction(b, kp.reductions, (kp.anchor,), name, config, reduction_deps(b.graph, kp))


def emit_reduction(
    b: KernelBuilder,
    reductions: Sequence[Node],
    outputs: Sequence[Value],
    name: str,
    config: KernelConfig,
    deps: Mapping[int, frozenset[int]],
) -> Kernel:
    shape: Shape = reductions[0].inputs[0].type.shape
    axes = reduced_axes(reductions[0])
    outer = [d for k, d in enumerate(shape) if k not in axes]
    red = [d for k, d in enumerate(shape) if k in axes]
    x_n, r_n = numel(outer), numel(red)
    ranges, multiples = b.graph.ranges, b.graph.multiples
    xblock, rblock, persistent, warps = config.reduction(
        max(1, bounds(x_n, ranges, multiples)[1]), max(1, bounds(r_n, ranges, multiples)[1])
    )
    b.line("pid = tl.program_id(0)")
    start = "pid.to(tl.int64) * XBLOCK" if b.wide(x_n) else "pid * XBLOCK"
    b.line(f"xoffs = {start} + tl.arange(0, XBLOCK)[:, None]")
    b.line(f"xmask = xoffs < {b.size_arg(x_n, 'n_rows')}")
    b.guard("xmask", "xoffs")  # a value with no rows has no programs
    if bounds(r_n, ranges, multiples)[0] >= 1:  # an empty row: rmask keeps every load of the row's value off
        b.guard("rmask", "roffs")
    outer_idx = iter(unravel_into(b, "xoffs", tuple(outer), "x"))
    row = [("0" if k in axes else next(outer_idx)) for k in range(len(shape))]
    r_size = b.size_arg(r_n, "row_len")
    rb = sym("RBLOCK")
    b.reach.bound("xoffs", mul(GRID_X, sym("XBLOCK")))
    b.reach.guard("xmask", "xoffs", 0, b.arg(x_n))
    # a persistent row is one tl.arange(0, RBLOCK); a looped one steps r0 < row_len by RBLOCK
    b.reach.bound("roffs", rb if persistent else mul(floordiv(add(b.arg(r_n), add(rb, -1)), rb), rb))
    b.reach.guard("rmask", "roffs", 0, b.arg(r_n))

    def full_index(roffs: str) -> tuple[list[str], str]:
        b.line(f"rmask = {roffs} < {r_size}")
        red_idx = iter(unravel_into(b, roffs, tuple(red), "r"))
        return [next(red_idx) if k in axes else row[k] for k in range(len(shape))], "xmask & rmask"

    env: dict[int, str] = {}
    if persistent:  # the whole row is one tile: every level and every store shares its index
        b.line("roffs = tl.arange(0, RBLOCK)[None, :]")
        whole_row = full_index("roffs")
    for level in _levels(reductions, deps):
        if persistent:
            index, mask = whole_row
            for node in level:
                env[node.outputs[0].id] = _whole_row(b, node, index, mask, env, rblock)
            continue
        accs = {node.outputs[0].id: _init(b, node) for node in level}
        with b.block(f"for r0 in range(0, {r_size}, RBLOCK)"):
            b.line("roffs = r0 + tl.arange(0, RBLOCK)[None, :]")
            index, mask = full_index("roffs")
            for node in level:
                _accumulate(b, node, accs[node.outputs[0].id], index, mask, env)
        for node in level:
            env[node.outputs[0].id] = _finish(b, node, accs[node.outputs[0].id], rblock)
    # values at row shape are stored once per row; values at full shape take one more pass over the row
    full_outs = [v for v in outputs if v.type.shape == shape and v.id not in env]
    for v in outputs:
        if v not in full_outs:
            index = row if v.type.rank == len(shape) else [row[k] for k in range(len(shape)) if k not in axes]
            b.store(v, index, b.compute(v, index, "xmask", env), "xmask")
    if full_outs and persistent:
        index, mask = whole_row
        for v in full_outs:
            b.store(v, index, b.compute(v, index, mask, env), mask)
    elif full_outs:
        with b.block(f"for r0 in range(0, {r_size}, RBLOCK)"):
            b.line("roffs = r0 + tl.arange(0, RBLOCK)[None, :]")
            index, mask = full_index("roffs")
            for v in full_outs:
                b.store(v, index, b.compute(v, index, mask, env), mask)
    grid = (floordiv(add(x_n, xblock - 1), xblock), 1, 1)
    constexprs = (("XBLOCK", xblock), ("RBLOCK", rblock))
    extra = [b.producers[r.outputs[0].id][0] for r in reductions]
    return b.finish(name, KernelKind.REDUCTION, grid, constexprs, num_warps=warps, num_stages=1, extra_nodes=extra)


def reduction_deps(g: Graph, k: KernelPlan) -> dict[int, frozenset[int]]:
    """For each reduction of ``k``: the kernel's reductions its input depends on."""
    red = {r.outputs[0].id for r in k.reductions}
    reach: dict[int, frozenset[int]] = {}
    for i in sorted(k.nodes):
        n = g.nodes[i]
        acc: set[int] = set()
        for x in n.inputs:
            acc |= reach.get(x.id, frozenset())
            if x.id in red:
                acc.add(x.id)
        for o in n.outputs:
            reach[o.id] = frozenset(acc)
    return {r.outputs[0].id: reach.get(r.inputs[0].id, frozenset()) | _direct(r, red) for r in k.reductions}


def _direct(r: Node, red: set[int]) -> frozenset[int]:
    return frozenset(x.id for x in r.inputs if x.id in red)


def _levels(reductions: Sequence[Node], deps: Mapping[int, frozenset[int]]) -> list[list[Node]]:
    """Reductions grouped so each group only needs the results of earlier groups (one pass per group).
    ``deps`` maps a reduction's output id to the ids of the group's reductions its input depends on."""
    level: dict[int, int] = {}
    for n in reductions:  # in node order, so every dependency already has its level
        vid = n.outputs[0].id
        level[vid] = 1 + max((level[d] for d in deps.get(vid, ()) if d in level), default=-1)
    out: list[list[Node]] = [[] for _ in range(1 + max(level.values(), default=0))]
    for n in reductions:
        out[level[n.outputs[0].id]].append(n)
    return [lv for lv in out if lv]


def _acc_dtype(node: Node) -> DType:
    dt = node.inputs[0].type.dtype
    return DType.float32 if dt in HALF else dt


def _identity(node: Node) -> str:
    dt = _acc_dtype(node)
    if node.op in (Op.REDUCE_SUM,):
        return "0"
    if node.op is Op.REDUCE_PROD:
        return "1"
    big = 'float("inf")' if dt.is_float else str(2**31 - 1 if dt is DType.int32 else 2**63 - 1)
    small = '-float("inf")' if dt.is_float else str(-(2**31) if dt is DType.int32 else -(2**63))
    return small if node.op in (Op.REDUCE_MAX, Op.ARGMAX) else big


def _operand(b: KernelBuilder, node: Node, index: list[str], mask: str, env: dict[int, str]) -> str:
    """The reduction's input over the tile, masked lanes set to the identity, in the accumulator type."""
    x = b.compute(node.inputs[0], index, mask, env)
    dt = TL_DTYPE[_acc_dtype(node)]
    if is_literal(x):  # a constant input: the where below makes it a tile of the mask's shape
        return b.let("a", f"tl.where({mask}, {x}, {_identity(node)}).to({dt})")
    if node.inputs[0].type.dtype is not _acc_dtype(node):
        x = f"{x}.to({dt})"
    # the mask is the whole [XBLOCK, RBLOCK] tile, so a row-constant input is broadcast over the row too
    return b.let("a", f"tl.where({mask}, {x}, {_identity(node)})")


def _whole_row(b: KernelBuilder, node: Node, index: list[str], mask: str, env: dict[int, str], rblock: int) -> str:
    x = _operand(b, node, index, mask, env)
    if node.op in (Op.ARGMAX, Op.ARGMIN):
        acc, ids = x, b.let("ai", f"tl.where({mask}, roffs + tl.zeros([XBLOCK, RBLOCK], tl.int32), 2147483647)")
        return _arg_final(b, node, acc, ids)
    return _cast_out(b, node, _tile_reduce(b, node, x, rblock))


def _tile_reduce(b: KernelBuilder, node: Node, x: str, rblock: int) -> str:
    if node.op is Op.REDUCE_PROD:
        cur, w = x, rblock
        while w > 1:
            lo, hi = b.fresh("lo"), b.fresh("hi")
            b.line(f"{lo}, {hi} = tl.split(tl.reshape({cur}, [XBLOCK, {w // 2}, 2]))")
            cur, w = b.let("a", f"{lo} * {hi}"), w // 2
        return b.let("red", f"tl.reshape({cur}, [XBLOCK, 1])")
    red = b.let("red", f"{_COMBINE[node.op]}({x}, 1, keep_dims=True)")
    if node.op in (Op.REDUCE_MAX, Op.REDUCE_MIN) and _acc_dtype(node).is_float:
        # tl.max/tl.min skip NaN; the references propagate it
        nan = b.let("nan", f"tl.max(({x} != {x}).to(tl.int32), 1, keep_dims=True)")
        red = b.let("red", f'tl.where({nan} > 0, float("nan"), {red})')
    return red


def _cast_out(b: KernelBuilder, node: Node, var: str) -> str:
    out = node.outputs[0].type.dtype
    return var if out is _acc_dtype(node) else b.let("red", f"{var}.to({TL_DTYPE[out]})")


def _init(b: KernelBuilder, node: Node) -> tuple[str, ...]:
    dt = TL_DTYPE[_acc_dtype(node)]
    acc = b.fresh("acc")
    b.line(f"{acc} = tl.full([XBLOCK, RBLOCK], {_identity(node)}, {dt})")
    if node.op in (Op.ARGMAX, Op.ARGMIN):
        ids = b.fresh("acc_idx")
        b.line(f"{ids} = tl.full([XBLOCK, RBLOCK], 2147483647, tl.int32)")
        return acc, ids
    return (acc,)


def _accumulate(
    b: KernelBuilder, node: Node, acc: tuple[str, ...], index: list[str], mask: str, env: dict[int, str]
) -> None:
    x = _operand(b, node, index, mask, env)
    a = acc[0]
    if node.op is Op.REDUCE_SUM:
        b.line(f"{a} = {a} + {x}")
    elif node.op is Op.REDUCE_PROD:
        b.line(f"{a} = {a} * {x}")
    elif node.op in (Op.REDUCE_MAX, Op.REDUCE_MIN):
        fn = "tl.maximum" if node.op is Op.REDUCE_MAX else "tl.minimum"
        nan = ", propagate_nan=tl.PropagateNan.ALL" if _acc_dtype(node).is_float else ""
        b.line(f"{a} = {fn}({a}, {x}{nan})")
    else:
        better = ">" if node.op is Op.ARGMAX else "<"
        take = b.let("take", f"({mask}) & (({x} {better} {a}) | ({acc[1]} == 2147483647))")
        b.line(f"{a} = tl.where({take}, {x}, {a})")
        b.line(f"{acc[1]} = tl.where({take}, roffs + tl.zeros([XBLOCK, RBLOCK], tl.int32), {acc[1]})")


def _finish(b: KernelBuilder, node: Node, acc: tuple[str, ...], rblock: int) -> str:
    if node.op in (Op.ARGMAX, Op.ARGMIN):
        return _arg_final(b, node, acc[0], acc[1])
    return _cast_out(b, node, _tile_reduce(b, node, acc[0], rblock))


def _arg_final(b: KernelBuilder, node: Node, vals: str, ids: str) -> str:
    fn = "tl.max" if node.op is Op.ARGMAX else "tl.min"
    best = b.let("best", f"{fn}({vals}, 1, keep_dims=True)")
    hit = b.let("hit", f"tl.where(({vals} == {best}) & ({ids} != 2147483647), {ids}, 2147483647)")
    idx = b.let("red", f"tl.min({hit}, 1, keep_dims=True)")
    return b.let("red", f"tl.where({idx} == 2147483647, 0, {idx}).to(tl.int64)")
