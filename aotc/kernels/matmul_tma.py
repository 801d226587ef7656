"""The Hopper form of the matmul template's loads and store: A, B and the output through in-kernel tensor
descriptors (TMA), as Triton's tutorial 09-persistent-matmul does in its descriptor variant.

``desc = tl.make_tensor_descriptor(base, shape, strides, block_shape)`` covers an operand's matrix as its buffer
lays it out; ``desc.load([r, c])`` moves one box into shared memory with one ``cp.async.bulk.tensor`` and
zero-fills the box elements outside ``shape``, so the K tail and the M/N edges need no load mask (zeros add
nothing to the product). The epilogue's own loads (bias, residual) stay masked pointer loads.

``out_desc.store([r, c], tile)`` writes the box clipped to the output's [rows, N], which is exactly what the
epilogue's ``mask_m & mask_n`` keeps, so it needs no other mask. It is taken for one fp16, bf16 or fp32 output
(stored in its own dtype: nothing rounds) whose batch folds into its rows, stored alone (no view output written
beside it), with rows of a multiple of 16 bytes (the 50,257-column lm head's are not) and a staging tile that
fits in shared memory beside the operands' pipeline; otherwise the pointer store stays, its reason a comment.

The box follows the buffer's layout: an operand whose last dim is contiguous (A as [M, K], B as [K, N]) loads
as the kernel reads it; one whose second-to-last dim is (a Linear's weight, [N, K] seen through a transpose, as
tutorial 09 keeps B) loads as [BLOCK_N, BLOCK_K] and the kernel takes ``.T`` of the tile, which wgmma reads from
shared memory as it is.

Where the batch folds into A's rows (a Linear on [batch, seq, d]), A's descriptor is one [batch * M, K] matrix:
its batch dims must then step at the rows' stride times the rows below them (a contiguous activation does), or
the folded row is no single stride and A keeps pointers. A product batched on the grid takes one descriptor per
program over its batch entry's matrix (the batch indices only move the base), as the attention kernel does.

The form is taken where attention_tma's rules hold (sm_90 or newer, PTX 8.6 or newer, fp16 or bf16, a buffer or
a strided view of one, the contiguous dim's stride 1, the other stride and every base a multiple of 16 bytes for
every binding of the symbols). An operand outside them keeps its pointer loads with the reason as a kernel
comment, which ``--explain`` shows; below sm_90 or PTX 8.6 nothing changes, so the default floor's kernels
keep their text.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aotc.ir.dtypes import DType
from aotc.ir.symbolic import SymExpr, add, mul, to_infix
from aotc.ir.symbolic_values import bounds, divisor
from aotc.ir.types import Value
from aotc.kernels import index_text as ix
from aotc.kernels.attention_tma import ALIGN, DESCRIPTOR_DTYPES, why_not_tma
from aotc.kernels.strided_views import window

__all__ = [
    "OperandBox",
    "TmaPlan",
    "descriptor_load",
    "make_operand_descriptor",
    "make_output_descriptor",
    "operand_box",
    "plan_tma",
    "why_not_hopper",
    "why_not_store",
]

Size = int | SymExpr
STORE_DTYPES = (*DESCRIPTOR_DTYPES, DType.float32)  # a store writes the tile's own dtype: no rounding
SHARED_LIMIT = 227 * 1024  # the most dynamic shared memory one block may take on sm_90
BARRIERS = 1024  # shared bytes beside the tiles for the pipeline's mbarriers, rounded up (24 seen, Triton 3.9)


@dataclass(frozen=True, slots=True)
class OperandBox:
    """How one operand loads through a descriptor: its descriptor's outer stride (the contiguous dim's is 1) and
    whether the buffer holds the operand's matrix transposed (its second-to-last dim contiguous)."""

    stride: Size
    transposed: bool


def why_not_hopper(arch: int, ptx: int | None) -> str | None:
    """None when a kernel for ``sm_<arch>`` built at PTX ``ptx`` can hold descriptor loads at all, else why not
    (the target's and toolchain's part of attention_tma's rule; the operands' part is ``operand_box``)."""
    return why_not_tma(arch, ptx, DESCRIPTOR_DTYPES[0])


def operand_box(builder: Any, value: Value, fold: bool) -> OperandBox | str:
    """Operand ``value``'s matrix (its last two dims; with ``fold``, its batch dims folded into the rows too) as a
    descriptor can take it, or why it cannot."""
    dtype = value.type.dtype
    if dtype not in DESCRIPTOR_DTYPES:
        why = "a descriptor load may round fp32 to tf32" if dtype is DType.float32 else "no tensor-core box"
        return f"{dtype.value} operands keep the pointer loads ({why})"
    shape = value.type.shape
    rank = len(shape)
    dims = tuple(range(rank)) if fold else (rank - 2, rank - 1)
    found = window(builder, value, dims)
    if isinstance(found, str):
        return found
    strides = dict(zip(dims, found.strides))
    # the rows: with ``fold`` every dim but the last, outermost first; a dim of size 1 is never stepped
    rows = [d for d in dims[:-1] if not ix.is_one(shape[d])]
    for outer, inner in itertools.pairwise(rows):
        if add(strides[outer], mul(-1, mul(strides[inner], shape[inner]))) != 0:
            return (
                f"its dim {outer} has stride {to_infix(strides[outer])} in its buffer, not dim {inner}'s stride "
                f"times its size, so its batch does not fold into its rows at one stride"
            )
    last = strides[rank - 1]
    row = strides[rows[-1]] if rows else shape[-1]  # one row: its stride is never stepped; row-major's will do
    if last == 1:
        box = OperandBox(row, transposed=False)
    elif row == 1:
        box = OperandBox(last, transposed=True)
    else:
        return "neither of its last two dims has stride 1 in its buffer, and TMA needs one contiguous"
    size = dtype.itemsize
    ranges, multiples = builder.graph.ranges, builder.graph.multiples
    if bounds(box.stride, ranges, multiples)[0] <= 0:
        return f"its rows have stride {to_infix(box.stride)} in its buffer (a broadcast, flip or reversed slice)"
    if divisor(box.stride, multiples) * size % ALIGN:
        return (
            f"its row stride in its buffer, {to_infix(box.stride)} x {size} bytes, is not a multiple of {ALIGN} bytes"
        )
    if divisor(found.base, multiples) * size % ALIGN:
        at = to_infix(found.base).replace("$i", "i")
        where = f"{at} x {size} bytes (i<k>: its index on dim k)"
        return f"its base offset in the buffer, {where}, is not a multiple of {ALIGN} bytes"
    return box


@dataclass(frozen=True, slots=True)
class TmaPlan:
    """What a matmul kernel moves through descriptors: A's and B's boxes (None: pointer loads) and whether its
    one output stores through one (``out_desc``)."""

    a: OperandBox | None = None
    b: OperandBox | None = None
    store: bool = False


def plan_tma(
    builder: Any, node: Any, outputs: Sequence[Value], fold: bool, n: Size, cfg: Any, arch: int, ptx: int | None
) -> TmaPlan:
    """What matmul ``node`` (its batch folded into A's rows with ``fold``; ``n`` columns; tiles ``cfg``) storing
    ``outputs`` moves through descriptors on ``sm_<arch>`` at PTX ``ptx``, each operand or output that keeps its
    pointers with the reason written as a kernel comment on a target that has TMA (``--explain`` reads them)."""
    if why_not_hopper(arch, ptx) is not None:
        return TmaPlan()
    a, b = _plan_boxes(builder, node.inputs[0], node.inputs[1], fold)
    why = why_not_store(builder, outputs, fold, n, cfg, node.inputs[0].type.dtype)
    if why is not None:
        builder.line(f"# out keeps pointer stores: {why}")
    return TmaPlan(a, b, why is None)


def why_not_store(builder: Any, outputs: Sequence[Value], fold: bool, n: Size, cfg: Any, dtype: DType) -> str | None:
    """None when a kernel whose batch folds into its rows (``fold``) may store ``outputs`` ([rows, ``n``] tiles
    of ``cfg``, the operands in ``dtype``) through one descriptor, else why not. Its box is clipped to [rows,
    ``n``] as the epilogue's ``mask_m & mask_n`` clips the pointer store, so the output needs no other mask; its
    rows must be 16-byte aligned, and the staging tile in shared memory must fit beside the operands' ring."""
    if len(outputs) != 1:
        return f"the kernel stores {len(outputs)} values, and one descriptor writes one"
    (out,) = outputs
    size = out.type.dtype.itemsize
    if out.type.dtype not in STORE_DTYPES:
        return f"{out.type.dtype.value} outputs keep the pointer store"
    if not fold:
        return (
            "the product is batched on the grid: one store descriptor covers the output where its batch folds into rows"
        )
    if not builder.stores_alone(out):
        return "its store also writes a view of it (or only the view), which a box of its own rows cannot"
    if divisor(n, builder.graph.multiples) * size % ALIGN:
        return f"its rows, {to_infix(n)} x {size} bytes, are not a multiple of {ALIGN} bytes"
    # Triton 3.9 was seen to stage the tile in the operands' ring once the K loop is done (shared memory unchanged
    # at every sm_90 tile); this bound does not count on that, so no Triton version can run out of shared memory
    ring = cfg.num_stages * (cfg.block_m + cfg.block_n) * cfg.block_k * dtype.itemsize
    staging = cfg.block_m * cfg.block_n * size
    if ring + staging + BARRIERS > SHARED_LIMIT:
        return (
            f"its {cfg.block_m}x{cfg.block_n} staging tile ({staging} bytes) beside the {cfg.num_stages}-stage "
            f"operand tiles ({ring} bytes) would pass sm_90's {SHARED_LIMIT} bytes of shared memory"
        )
    return None


def _plan_boxes(builder: Any, a: Value, b: Value, fold: bool) -> tuple[OperandBox | None, OperandBox | None]:
    """How A (its batch folded into its rows with ``fold``) and B load: each its box, or None for pointer loads,
    with the reason written as a kernel comment."""
    found = {"a": operand_box(builder, a, fold), "b": operand_box(builder, b, False)}
    if isinstance(found["a"], str) and not isinstance(found["b"], str):
        # b's descriptor, made before the K loop, would give b the kernel's first pointer argument and a the second,
        # where the portable form (which loads a first) has them the other way: the scheduler then could not take
        # this kernel as the sm_90 launch of the portable one (schedule.same_launch)
        found["b"] = "a keeps pointer loads, and a descriptor for b alone would put b's pointer before a's"
    for role, why in found.items():
        if isinstance(why, str):
            builder.line(f"# {role} keeps pointer loads: {why}")
    boxes = [x if isinstance(x, OperandBox) else None for x in found.values()]
    return boxes[0], boxes[1]


def make_operand_descriptor(
    builder: Any,
    value: Value,
    box: OperandBox,
    matrix: tuple[str, str],
    blocks: tuple[str, str],
    origin: Sequence[Any],
    region: tuple[Sequence[Any], str | None],
    name: str,
) -> None:
    """Write ``name = tl.make_tensor_descriptor(...)`` over operand ``value``'s [rows, cols] matrix (``matrix``: the
    two counts' texts, the rows folded with the batch where the kernel folds them; ``blocks``: the tile's
    constexprs) in the buffer under its views, at batch ``origin`` (the operand's index of its matrix's first
    element). ``region`` (the operand's index and mask, as its pointer load reads it) is what the box loads are
    clipped to, which counts toward the pointer's extents as the masked loads would."""
    (rows, cols), (block_r, block_c) = matrix, blocks
    if box.transposed:  # the buffer's [cols, rows]: the box follows it, the kernel transposes the tile
        rows, cols, block_r, block_c = cols, rows, block_c, block_r
    index, mask = region
    ptr, base = builder.descriptor_base(value, origin, index, mask)
    # a symbolic stride is printed over the dims' own size args, which the pointer form passes too: the arch
    # launch must take the base kernel's args (schedule.same_launch), or the scheduler drops it
    stride = builder.index_text(box.stride, builder.wide(box.stride))
    at = ptr if base == "0" else f"{ptr} + {base}"
    builder.line(
        f"{name} = tl.make_tensor_descriptor({at}, shape=[{rows}, {cols}], strides=[{stride}, 1], "
        f"block_shape=[{block_r}, {block_c}])"
    )


def make_output_descriptor(builder: Any, out: Value, rows: str, n: str) -> None:
    """Write ``out_desc = tl.make_tensor_descriptor(...)`` over output ``out``'s [rows, n] row-major matrix (its
    batch folded into the rows), which the epilogue stores its tiles through (``KernelBuilder.descriptor_store``)."""
    ptr = builder.output_arg(out)
    builder.line(
        f"out_desc = tl.make_tensor_descriptor({ptr}, shape=[{rows}, {n}], strides=[{n}, 1], "
        "block_shape=[BLOCK_M, BLOCK_N])"
    )


def descriptor_load(name: str, box: OperandBox, at: tuple[str, str]) -> str:
    """The text loading the tile at operand offsets ``at`` (row, col) through descriptor ``name``."""
    row, col = at
    return f"{name}.load([{col}, {row}]).T" if box.transposed else f"{name}.load([{row}, {col}])"
