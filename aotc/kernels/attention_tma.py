"""The Hopper form of the attention kernel's operand loads: q, k and v through in-kernel tensor descriptors
(TMA), as Triton's tutorial 06-fused-attention does on sm_90.

A descriptor ``tl.make_tensor_descriptor(base, shape, strides, block_shape)`` covers one (batch..., head)
entry's [rows, head dim] matrix; ``desc.load([row, 0])`` moves a whole box into shared memory with one
``cp.async.bulk.tensor`` and zero-fills the box elements outside ``shape``, so the tail block past the key
length and the head-dim padding past ``d`` need no mask (the softmax still masks the keys past the length).

The form is taken only where it is valid and its code assembles:
- the target is sm_90 or newer (TMA) and the toolchain's PTX is ISA 8.6 or later: ptxas refuses Triton's
  ``cp.async.bulk.tensor`` into ``.shared::cta`` below it (so with the default CUDA 12.4 driver floor, whose
  PTX is 8.4, the pointer form stays; a floor from CUDA 12.7 on takes this one);
- the dtype is fp16 or bf16 (an fp32 descriptor may round to tf32 on load, which the kernel's IEEE dots
  must not see);
- the operand is a buffer in memory (row-major, so its head dim is contiguous), not a view or cast the kernel
  computes through index math (a head split of a packed QKV keeps the pointer loads);
- its row stride (the head dim, static) is a multiple of 16 bytes, as TMA needs for every dim but the last.
  The base of each entry is then 16-byte aligned too: buffers start 16-byte aligned (kernel_writer's
  ``divisible_args``) and each entry is rows x the row stride further on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aotc.ir.dtypes import DType
from aotc.ir.types import Value

__all__ = ["DESCRIPTOR_DTYPES", "MIN_PTX", "Descriptor", "make_descriptor", "why_not_descriptor"]

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


def why_not_descriptor(builder: Any, value: Value, arch: int, ptx: int | None) -> str | None:
    """None when operand ``value`` of an attention kernel for ``sm_<arch>`` built at PTX ``ptx`` (86: 8.6;
    None: unknown) may load through a descriptor, else why not."""
    if arch < MIN_ARCH:
        return f"sm_{arch} has no TMA (sm_{MIN_ARCH} and newer do)"
    if ptx is None or ptx < MIN_PTX:
        have = "unknown" if ptx is None else f"{ptx // 10}.{ptx % 10}"
        return f"the toolchain's PTX is {have}, and TMA loads need PTX 8.6 (a CUDA 12.7 driver floor) or newer"
    dtype = value.type.dtype
    if dtype not in DESCRIPTOR_DTYPES:
        return f"{dtype.value} operands keep the pointer loads (a descriptor load may round fp32 to tf32)"
    if value.id in builder.inline or value.id in builder.redirects:
        return "the operand is computed in the kernel (a view or a cast), not read from a buffer"
    d = value.type.shape[-1]
    if not isinstance(d, int) or d * dtype.itemsize % ALIGN:
        return f"its row stride, {d} x {dtype.itemsize} bytes, is not a multiple of {ALIGN} bytes"
    return None


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
    index ``batch``. ``rows`` is (the row count's text, the template variable of a row, its mask or None),
    ``cols`` (the head dim's variable, its mask or None): together the region the box loads are clipped to,
    which counts toward the pointer's extents as the pointer form's masked loads would."""
    count, row_var, row_mask = rows
    col_var, col_mask = cols
    d = value.type.shape[-1]
    mask = " & ".join(m for m in (row_mask and f"{row_mask}[:, None]", col_mask and f"{col_mask}[None, :]") if m)
    ptr, base = builder.descriptor_base(
        value, [*batch, 0, 0], [*batch, f"{row_var}[:, None]", f"{col_var}[None, :]"], mask or None
    )
    at = ptr if base == "0" else f"{ptr} + {base}"
    builder.line(
        f"{name} = tl.make_tensor_descriptor({at}, shape=[{count}, {d}], strides=[{d}, 1], "
        f"block_shape=[{block[0]}, {block[1]}])"
    )
    return Descriptor(name)
