"""The Hopper form of the attention kernel's operand loads: q, k and v through in-kernel tensor descriptors
(TMA), as Triton's tutorial 06-fused-attention does on sm_90.

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
from aotc.kernels.strided_views import Window, window

__all__ = [
    "DESCRIPTOR_DTYPES",
    "MIN_PTX",
    "Descriptor",
    "make_descriptor",
    "operand_window",
    "why_not_descriptor",
    "why_not_tma",
]

DESCRIPTOR_DTYPES = (DType.float16, DType.bfloat16)
MIN_PTX = 86  # PTX ISA 8.6, as Triton's ptx_version counts it
MIN_ARCH = 90
ALIGN = 16  # bytes: TMA's stride and base alignment


@dataclass(frozen=True, slots=True)
class Descriptor:
    """One operand's descriptor: its name in the kernel and the text that loads the box at row ``row``."""

    name: str

    def load(self, row: str) -> str:
        return f"{self.name}.load([{row}, 0])"


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
    if isinstance(found, str):
        return found
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
) -> Descriptor:
    """Write ``name = tl.make_tensor_descriptor(...)`` over the [rows, head dim] matrix of ``value`` at batch
    index ``batch``, in the buffer under its views. ``rows`` is (the row count's text, the template variable of
    a row, its mask or None), ``cols`` (the head dim's variable, its mask or None): together the region the box
    loads are clipped to, which counts toward the pointer's extents as the pointer form's masked loads would."""
    found = operand_window(builder, value)
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
        value, [*batch, 0, 0], [*batch, f"{row_var}[:, None]", f"{col_var}[None, :]"], mask or None
    )
    at = ptr if base == "0" else f"{ptr} + {base}"
    builder.line(
        f"{name} = tl.make_tensor_descriptor({at}, shape=[{count}, {d}], strides=[{stride}, 1], "
        f"block_shape=[{block[0]}, {block[1]}])"
    )
    return Descriptor(name)
