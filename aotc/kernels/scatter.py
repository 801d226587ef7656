"""The scatter template: a copy of ``data`` with ``updates`` written (or combined) at the coordinates in
``indices`` (the SCATTER primitive, aotc/ir/ops/scatter.py, ONNX ScatterND semantics).

An update may land anywhere in the output, so every element must be copied before any is written: a
SCATTER takes two launches, both storing the node's output value.

1. The copy (``emit_scatter_copy``): a flat pointwise kernel over the output that computes ``data`` at each
   element (fusing its views and pointwise producers, as any pointwise kernel) and stores it.
2. The writes (``emit_scatter``): one lane per element of ``updates``. Each computes its coordinates from
   ``indices`` (fused views: ScatterElements' iota coordinates are index arithmetic), checks them, and
   writes (or combines) its update into the buffer the copy wrote, in place.

The Schedule needs nothing new to say "launch 2 updates the value launch 1 wrote": both kernels list the
output among their outputs, and the writes list it among their inputs too, since they read-modify-write it.
The fusion plan orders the writes after their copy and every reader of the value after the writes
(fusion._order); the memory plan keeps the buffer live from the copy through the writes (memplan); the plan
checks refuse a kernel writing a graph input or weight, which the output never is. A graph output that is
a transpose of the value is stored by a kernel of its own (the copy cannot store it: the value is not final
yet); one that is a reshape shares its storage (a View), which both launches then write. The two launches are
the template table's ``scatter_copy`` and ``scatter`` rows (aotc/ir/templates.py); files of schema 3-7 call
both ``pointwise``.
Skipping the copy by writing into ``data``'s own buffer would make two values share storage, which a Schedule
only expresses for graph outputs (a View), and ``data`` may be an input, a weight or read again later.

Coordinate ``j`` of an update must lie in ``[-d_j, d_j)``, a negative one counting from the end (the
reference's rule), or in ``[0, d_j)`` for a scatter with ``negative_indices=False``.

A state write (aotc/ir/state.py) is launch 2 alone: its output shares the storage of the value it overwrites (a
View, to the state's own buffer), so nothing is copied and each call writes only its updates' bytes. One outside sets the error flag of axis ``j`` and that update writes nothing (its
address is never formed from the bad id); the runtime then raises ExecError naming the op, as for a gather
(aotc/ir/gather_ids.py).

The ``reduction`` attr, each as the reference combines:

- ``none``: a plain store. Repeated coordinates leave the result undefined in ONNX; the reference keeps
  the last update, a GPU one of them (which one is not specified).
- ``add`` on float32/int32/int64 and ``max``/``min`` on int32/int64: Triton's atomics, so updates with
  repeated coordinates all combine. Float adds combine in whatever order the hardware runs them, so a sum
  may differ from the reference's in-order sum by rounding; integers are exact (wrapping, as numpy's).
- every other pair (``mul``; float ``max``/``min``; half-precision ``add``): a compare-and-swap loop on the
  element: read it, combine with the pointwise op table's expression (aotc/kernels/pointwise_ops.py: NaN
  propagates as in np.maximum, half precision computes in float32 and rounds once per update), swap it in
  if the element is unchanged, else retry with what is there. Triton has no atomic multiply, and its float
  atomic_max/min compare bit patterns, which drops a NaN update and has no float16/bfloat16 form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.gather_ids import index_range, index_source, op_where
from aotc.ir.ops import Op
from aotc.ir.ops.scatter import scatter_allows_negative
from aotc.ir.schedule import IndexCheck, Kernel, Size
from aotc.ir.symbolic import add, floordiv, smax, smin
from aotc.ir.symbolic_values import bounds
from aotc.ir.templates import KernelKind
from aotc.ir.types import Node, Shape
from aotc.kernels.config import KernelConfig
from aotc.kernels.emit import KernelBuilder, numel
from aotc.kernels.pointwise import flat_reach, unravel_into
from aotc.kernels.pointwise_ops import TL_DTYPE, elementwise

if TYPE_CHECKING:
    from aotc.kernels.fusion import KernelPlan

# reduction attr -> the elementwise op that combines an element with an update
COMBINE = {"add": Op.ADD, "mul": Op.MUL, "max": Op.MAXIMUM, "min": Op.MINIMUM}
_INTS = (DType.int32, DType.int64)
# (reduction, dtype) -> the Triton atomic that combines exactly as the reference (up to float add order)
_ATOMIC = {
    **{("add", dt): "tl.atomic_add" for dt in (DType.float32, *_INTS)},
    **{("max", dt): "tl.atomic_max" for dt in _INTS},
    **{("min", dt): "tl.atomic_min" for dt in _INTS},
}
# a float swapped by compare-and-swap as the integer of its bits
_BITS = {DType.float32: "tl.int32", DType.float16: "tl.int16", DType.bfloat16: "tl.int16"}


def emit_copy_plan(b: KernelBuilder, kp: KernelPlan, name: str, config: KernelConfig, tiles: Any = None) -> Kernel:
    """The template table's emitter of a scatter's first launch (aotc/ir/templates.py)."""
    assert kp.scatter is not None
    return emit_scatter_copy(b, kp.scatter, name, config)


def emit_plan(b: KernelBuilder, kp: KernelPlan, name: str, config: KernelConfig, tiles: Any = None) -> Kernel:
    """The template table's emitter of a scatter's writes (aotc/ir/templates.py)."""
    assert kp.scatter is not None
    return emit_scatter(b, kp.scatter, name, config)


def emit_scatter_copy(b: KernelBuilder, node: Node, name: str, config: KernelConfig) -> Kernel:
    """Launch 1: the output = ``data``, element by element."""
    data, out = node.inputs[0], node.outputs[0]
    index, grid, constexprs, warps = _flat(b, out.type.shape, config)
    b.store(out, index, b.load(data, index, "mask"), "mask")
    return b.finish(
        name,
        KernelKind.SCATTER_COPY,
        grid,
        constexprs,
        num_warps=warps,
        num_stages=1,
        extra_nodes=(_node_index(b, node),),
    )


def emit_scatter(b: KernelBuilder, node: Node, name: str, config: KernelConfig) -> Kernel:
    """Launch 2: each update written (or combined) into the output the copy wrote."""
    data, idx, upd = node.inputs
    out = node.outputs[0]
    reduction = node.attrs.get("reduction", "none")
    if reduction != "none" and reduction not in COMBINE:
        raise UnsupportedError(f"no kernel for scatter reduction {reduction!r} ({node})")
    index, grid, constexprs, warps = _flat(b, upd.type.shape, config)
    lead = idx.type.rank - 1  # the update's leading dims index the coordinate tuples
    coords, ok = [], "mask"
    for j in range(idx.type.shape[-1]):
        pos, bad = _coordinate(b, node, (*index[:lead], str(j)), data.type.shape[j])
        coords.append(pos)
        ok = b.let("ok", f"{ok} & ({bad} == 0)")
    val = b.load(upd, index, "mask")
    ptr = b.output_arg(out)
    b.reads.append(out.id)  # read-modify-write of the buffer the copy filled
    b.reach.imply(ok, "mask")  # ok is mask & every coordinate in range
    off = b.let("off", b.offset(out, [*coords, *index[lead:]], ok))
    if reduction == "none":
        # With repeated coordinates ONNX leaves the result undefined and the reference keeps the last update;
        # here lanes and programs race, so on a GPU one of the updates is kept, which one is not specified.
        b.line(f"tl.store({ptr} + {off}, {val}, mask={ok})")
    elif (reduction, out.type.dtype) in _ATOMIC:
        b.line(f'{_ATOMIC[reduction, out.type.dtype]}({ptr} + {off}, {val}, mask={ok}, sem="relaxed")')
    else:
        _swap_loop(b, COMBINE[reduction], out.type.dtype, ptr, off, val, ok)
    return b.finish(
        name, KernelKind.SCATTER, grid, constexprs, num_warps=warps, num_stages=1, extra_nodes=(_node_index(b, node),)
    )


def _coordinate(b: KernelBuilder, node: Node, at: tuple[str, ...], dim: Size) -> tuple[str, str]:
    """(the wrapped coordinate, safe to address with; the flag that it is out of range) of the ids at ``at``.
    An out-of-range id sets the axis's error flag and becomes 0, so no address is formed from it."""
    idx = node.inputs[1]
    raw = b.compute(idx, at, "mask", {})
    # as a tile of the lanes: ids broadcast from fewer dims (one id, a constant) come back as scalars, and
    # a scalar's checks would not combine with the mask
    raw = b.let("ids", f"{raw} + tl.zeros_like(mask).to({TL_DTYPE[idx.type.dtype]})")
    low, high = index_range(dim, negative_indices=scatter_allows_negative(node.attrs))
    bad = b.let("bad", f"({raw} < {b.size_arg(low)}) | ({raw} >= {b.size_arg(high)})")
    slot = b.flags.take()
    b.line(f"tl.store({b.flag_arg()} + {slot} + tl.zeros_like({bad}).to(tl.int32), 1, mask=mask & {bad})")
    b.reach.access(b.flag_arg(), slot, None)
    source, _ = index_source(b.graph, node)
    b.checks.append(IndexCheck(slot, source or "", op_where(node), low, high))
    pos = b.let("idx", f"tl.where({raw} < 0, {raw} + {b.size_arg(dim)}, {raw})")
    safe = b.let("idx", f"tl.where({bad}, 0, {pos})")
    # an id in [low, high) (a negative one counting from the end), or 0 where it is not
    lo, hi, d = b.arg(low), b.arg(high), b.arg(dim)
    b.reach.bound(safe, smax(smax(hi, d), 1), smin(add(lo, d), 0))
    return safe, bad


def _swap_loop(b: KernelBuilder, op: Op, dt: DType, ptr: str, off: str, val: str, ok: str) -> None:
    """``out[off] = op(out[off], val)`` for the ``ok`` lanes, atomically per element by compare-and-swap.

    Every lane takes part in each swap so the call needs no mask: an idle lane (done, or never valid, then
    at offset 0, which exists whenever any lane is valid and the loop runs) swaps in the value it compares
    against, which changes nothing whether or not it matches. The loop ends when every lane's swap landed.
    """
    addr = b.let("addr", f"{ptr} + tl.where({ok}, {off}, 0)")
    b.reach.access(ptr, 0, None)  # every lane swaps at offset 0 once its own lane is done
    bits = _BITS.get(dt)
    swap = b.let("addr", f"{addr}.to(tl.pointer_type({bits}), bitcast=True)") if bits else addr
    cur, todo, old = b.fresh("cur"), b.fresh("todo"), b.fresh("old")
    b.line(f"{cur} = tl.load({addr}, mask={ok}, other=0)")
    b.line(f"{todo} = {ok}")
    with b.block(f"while tl.max({todo}.to(tl.int32), axis=0) > 0"):
        new = b.let("t", elementwise(op, [cur, val], dt, dt, lambda e: b.let("t", e)))
        seen, want = cur, new
        if bits:
            seen, want = b.let("t", f"{cur}.to({bits}, bitcast=True)"), f"{new}.to({bits}, bitcast=True)"
        b.line(f'{old} = tl.atomic_cas({swap}, {seen}, tl.where({todo}, {want}, {seen}), sem="relaxed")')
        b.line(f"{todo} = {todo} & ({old} != {seen})")
        b.line(f"{cur} = {old}.to({TL_DTYPE[dt]}, bitcast=True)" if bits else f"{cur} = {old}")


def _flat(
    b: KernelBuilder, shape: Shape, config: KernelConfig
) -> tuple[list[str], tuple[Size, Size, Size], tuple[tuple[str, int], ...], int]:
    """One flat block of ``shape``'s elements per program: (per-dim index, grid, constexprs, warps)."""
    n = numel(shape)
    block, warps = config.pointwise_block(max(1, bounds(n, b.graph.ranges, b.graph.multiples)[1]))
    b.line("pid = tl.program_id(0)")
    start = "pid.to(tl.int64) * BLOCK" if b.wide(n) else "pid * BLOCK"
    b.line(f"offs = {start} + tl.arange(0, BLOCK)")
    b.line(f"mask = offs < {b.size_arg(n, 'n_elements')}")
    flat_reach(b, n)
    grid = (floordiv(add(n, block - 1), block), 1, 1)
    return unravel_into(b, "offs", shape, "x"), grid, (("BLOCK", block),), warps


def _node_index(b: KernelBuilder, node: Node) -> int:
    return b.producers[node.outputs[0].id][0]
