"""The Hopper form of the attention kernel's operand loads and output store: q, k and v, and the output O, through
in-kernel tensor descriptors (TMA), as Triton's tutorial 06-fused-attention does on sm_90.

A descriptor ``tl.make_tensor_descriptor(base, shape, strides, block_shape)`` covers one (batch..., head)
entry's [rows, head dim] matrix; ``desc.load([row, 0])`` moves a whole box into shared memory with one
``cp.async.bulk.tensor`` and zero-fills the box elements outside ``shape``, so the tail block past the key
length and the head-dim padding past ``d`` need no mask (the softmax still masks the keys past the length).

The operand may be a buffer or a strided view of one (kernels/strided_views.py): the head split of a packed QKV
projection (slice, reshape, permute) or the head repeat of grouped-query attention (reshape, broadcast over the
heads). The views place each entry's matrix in the buffer: its base (the batch and head indices only move it, so
a head broadcast reads head ``h // groups``, as the pointer form does) and its row stride; the head dim must be
contiguous. The descriptor is then built over the buffer itself, with that base, the view's shape and strides.

The form is taken only where it is valid and its code assembles:
- the target is sm_90 or newer (TMA) and the toolchain's PTX is ISA 8.6 or later: ptxas refuses Triton's
  ``cp.async.bulk.tensor`` into ``.shared::cta`` below it (so with the default CUDA 12.4 driver floor, whose
  PTX is 8.4, the pointer form stays; a floor from CUDA 12.7 on takes this one);
- the dtype is fp16 or bf16 (an fp32 descriptor may round to tf32 on load, which the kernel's IEEE dots
  must not see);
- the operand is a buffer or a strided view of one, not a cast or other value the kernel computes;
- TMA's alignment holds for every binding of the symbols, proven at compile time: the head dim has stride 1,
  the row stride is positive and a multiple of 16 bytes, and so is the base offset of every entry (buffers
  start 16-byte aligned: kernel_writer's ``divisible_args``). A stride or offset may be symbolic (``seq * 3 * H *
  D``) where each term is a multiple of 16 bytes (a symbol declared ``multiple_of`` counts so); a slice starting
  8 bytes into a row is not, and keeps pointers.
A row stride of 0 (a broadcast along the keys) or below (a flip) keeps pointers: the driver's rule for a TMA
stride (cuTensorMapEncodeTiled: a multiple of 16 bytes below 2**40, unsigned) admits 0, but no GPU run here has
shown a box load over it. A broadcast over the heads is no descriptor dim at all: it only moves the base.

The output stores its [BLOCK_M, BLOCK_E] tile with ``desc.store([row, 0], tile)`` under the same conditions, over
its own row-major buffer: TMA writes only the box elements inside the descriptor's shape, so the rows past the
query length and the columns past ``e`` stay unwritten, exactly what the pointer form's store masks. The template
fuses no epilogue and stores no other output; an output also stored through views (a graph output that is a
permute of it), or whose rows are not 16-byte aligned, keeps the pointer store. Each descriptor is a 128-byte
CUtensorMap in the CTA's global scratch (q, k, v, O: 512 bytes), which Triton's metadata states and the launch
plan allocates; the reader checks the metadata gives every descriptor of the source its room (code_checks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.symbolic import to_infix
from aotc.ir.symbolic_values import bounds, divisor
from aotc.ir.types import Value
from aotc.kernels.strided_views import Window, own_window, window

__all__ = [
    "DESCRIPTOR_DTYPES",
    "MIN_PTX",
    "Descriptor",
    "make_descriptor",
    "operand_window",
    "output_window",
    "store_output",
    "why_not_descriptor",
    "why_not_tma",
]

DESCRIPTOR_DTYPES = (DType.float16, DType.bfloat16)
MIN_PTX = 86  # PTX ISA 8.6, as Triton's ptx_version counts it
MIN_ARCH = 90
ALIGN = 16  # bytes: TMA's stride and base alignment


@dataclass(frozen=True, slots=True)
class Descriptor:
    """One operand's (or the output's) descriptor: its name in the kernel and the text that moves its box."""

    name: str

    def load(self, row: str) -> str:
        return f"{self.name}.load([{row}, 0])"

    def store(self, row: str, tile: str) -> str:
        """The text that stores ``tile`` as the box at row ``row``."""
        return f"{self.name}.store([{row}, 0], {tile})"


def why_not_tma(arch: int, ptx: int | None, dtype: DType) -> str | None:
    """None when an attention kernel for ``sm_<arch>`` built at PTX ``ptx`` (86: 8.6; None: unknown) in ``dtype``
    may load its operands through descriptors at all, else why not."""
    if arch < MIN_ARCH:
        return f"sm_{arch} has no TMA (sm_{MIN_ARCH} and newer do)"
    if ptx is None or ptx < MIN_PTX:
        have = "unknown" if ptx is None else f"{ptx // 10}.{ptx % 10}"
        return f"the toolchain's PTX is {have}, and TMA loads need PTX 8.6 (a CUDA 12.7 driver floor) or newer"
    if dtype not in DESCRIPTOR_DTYPES:
        return f"{dtype.value} operands keep the pointer loads (a descriptor load may round fp32 to tf32)"
    return None


def operand_window(builder: Any, value: Value) -> Window | str:
    """Operand ``value``'s [rows, head dim] matrix as a window of its buffer that a descriptor can take, or why
    it is none (the operand's own layout: a computed value, a head dim that is not contiguous, a row stride or
    base offset not proven a multiple of 16 bytes)."""
    rank = value.type.rank
    found = window(builder, value, (rank - 2, rank - 1))
    return found if isinstance(found, str) else _aligned(builder, value, found)


def _aligned(builder: Any, value: Value, found: Window) -> Window | str:
    """``found``, the [rows, head dim] window of ``value``, with a single row's stride made row-major, if TMA can
    take it (its head dim contiguous, its row stride and base multiples of 16 bytes), else why not."""
    row, col = found.strides
    size = value.type.dtype.itemsize
    if col != 1:
        return f"its head dim has stride {to_infix(col)} in its buffer, and TMA needs the last dim contiguous"
    if value.type.shape[-2] == 1:  # one row: its stride is never stepped; the row-major one keeps the old text
        row = value.type.shape[-1]
        found = dataclasses.replace(found, strides=(row, 1))
    ranges, multiples = builder.graph.ranges, builder.graph.multiples
    if bounds(row, ranges, multiples)[0] <= 0:
        return f"its rows have stride {to_infix(row)} in its buffer (a broadcast, flip or reversed slice along them)"
    if divisor(row, multiples) * size % ALIGN:
        return f"its row stride, {to_infix(row)} x {size} bytes, is not a multiple of {ALIGN} bytes"
    if divisor(found.base, multiples) * size % ALIGN:
        at = to_infix(found.base).replace("$i", "i")
        where = f"{at} x {size} bytes (i<k>: its index on dim k)"
        return f"its base offset in the buffer, {where}, is not a multiple of {ALIGN} bytes"
    return found


def why_not_descriptor(builder: Any, value: Value, arch: int, ptx: int | None) -> str | None:
    """None when operand ``value`` of an attention kernel for ``sm_<arch>`` built at PTX ``ptx`` (86: 8.6;
    None: unknown) may load through a descriptor, else why not."""
    reason = why_not_tma(arch, ptx, value.type.dtype)
    if reason is not None:
        return reason
    found = operand_window(builder, value)
    return found if isinstance(found, str) else None


def make_descriptor(
    builder: Any,
    value: Value,
    batch: Sequence[str],
    rows: tuple[str, str, str | None],
    cols: tuple[str, str | None],
    block: tuple[str, str],
    name: str,
    store: bool = False,
) -> Descriptor:
    """Write ``name = tl.make_tensor_descriptor(...)`` over the [rows, head dim] matrix of ``value`` at batch
    index ``batch``, in the buffer under its views. ``rows`` is (the row count's text, the template variable of
    a row, its mask or None), ``cols`` (the head dim's variable, its mask or None): together the region the box
    loads (or stores) are clipped to, which counts toward the pointer's extents as the pointer form's masked
    loads would. ``store``: the descriptor's boxes store ``value``, the kernel's output, into its own buffer."""
    found = output_window(builder, value) if store else operand_window(builder, value)
    if isinstance(found, str):
        raise UnsupportedError(f"a tensor descriptor for {value}: {found}")
    count, row_var, row_mask = rows
    col_var, col_mask = cols
    d = value.type.shape[-1]
    # a symbolic stride is printed over the dims' own size args, which the pointer form passes too: the arch
    # launch must take the base kernel's args (schedule.same_launch), or the scheduler drops it
    row = found.strides[0]
    stride = builder.index_text(row, builder.wide(row))
    mask = " & ".join(m for m in (row_mask and f"{row_mask}[:, None]", col_mask and f"{col_mask}[None, :]") if m)
    ptr, base = builder.descriptor_base(
        value, [*batch, 0, 0], [*batch, f"{row_var}[:, None]", f"{col_var}[None, :]"], mask or None, store
    )
    at = ptr if base == "0" else f"{ptr} + {base}"
    builder.line(
        f"{name} = tl.make_tensor_descriptor({at}, shape=[{count}, {d}], strides=[{stride}, 1], "
        f"block_shape=[{block[0]}, {block[1]}])"
    )
    return Descriptor(name)


def output_window(builder: Any, value: Value) -> Window | str:
    """The [rows, head dim] matrix of ``value``, a value the kernel stores, as a window of its own buffer that a
    descriptor can take, or why it is none."""
    if not builder.stores_alone(value):  # each view output is one more store, at its own index map
        return "it is stored through views too (a graph output that is a view of it), which its box would not write"
    rank = value.type.rank
    return _aligned(builder, value, own_window(builder.graph, value, (rank - 2, rank - 1)))


def store_output(
    builder: Any,
    value: Value,
    dtype: DType,
    at: tuple[Sequence[str], str],
    rows: tuple[str, str, str | None],
    cols: tuple[str, str | None],
    block: tuple[str, str],
    tile: str,
) -> bool:
    """Store ``tile``, the output tile in ``dtype``, into ``value`` through a tensor descriptor and say True; or
    write why not as a comment (--explain shows it) and say False, for the caller to store by pointer. ``at``:
    the batch index and the tile's first row; ``rows``, ``cols`` and ``block`` as ``make_descriptor`` takes
    them. Only for a kernel whose loads may take descriptors (``why_not_tma``). The pointer store this replaces
    is one store of the whole tile masked to the rows below the row count and the columns below the head dim,
    the region TMA clips the box to: the attention template fuses no epilogue and writes no other output, and a
    view output (another store) keeps pointers."""
    found = output_window(builder, value)
    why = found if isinstance(found, str) else None
    if value.type.dtype is not dtype:  # a box stores its tile's own dtype: no cast on the way
        why = f"it is {value.type.dtype.value}, and the kernel's tile {dtype.value}"
    if why is not None:
        builder.line(f"# out keeps pointer stores: {why}")
        return False
    desc = make_descriptor(builder, value, at[0], rows, cols, block, "out_desc", store=True)
    builder.line(desc.store(at[1], tile))
    return True
