"""Scaled dot-product attention (the SDPA op) as one flash-attention kernel for inference.

One program owns BLOCK_M query rows of one (batch..., head) entry and walks the keys in BLOCK_N
steps with an online softmax: a running row max ``m_i``, a running denominator ``l_i`` and an fp32
accumulator rescaled whenever the max grows, so the [Lq, Lk] score matrix never exists. q, k, v and
the mask are read through the builder, so a head split (reshape + permute of a fused QKV projection),
the head repeat of grouped-query attention (reshape + broadcast) or a mask broadcast over heads and
queries is index arithmetic, never a copy.

Numerics follow the op table's reference (aotc/ir/ops/nn.py ``_sdpa_ref``): ``softmax(q k^T * scale
[+ float mask] [masked where a bool mask or the causal triangle is False]) v``. Dots accumulate in
fp32 (fp32 inputs in IEEE precision), the probabilities are rounded to v's dtype for the second dot
as the decomposition does, and a row whose keys are all masked comes out 0, as PyTorch's SDPA gives
(its safe softmax) and the reference does; a row with any finite score is never NaN, however the masked
keys fall into blocks (the row max used for rescaling is 0 while it is still -inf). Without a float mask the scale
is folded with log2(e) so the softmax runs on exp2; with one, scores stay in natural units so a
mask of finfo.min cannot overflow to -inf (HF BERT's fully padded rows stay uniform, as in numpy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.schedule import Kernel
from aotc.ir.symbolic import SymExpr, add, floordiv, mul, sym
from aotc.ir.symbolic_values import bounds
from aotc.ir.templates import KernelKind
from aotc.ir.tiles import upper
from aotc.ir.types import Node, Value
from aotc.kernels.contraction_emit import (
    anchor_index,
    cdiv,
    full_tile,
    grid_with_batch,
    is_multiple,
    mask_and,
    reserve,
    size_text,
    unravel,
)
from aotc.kernels.pointwise_ops import TL_DTYPE
from aotc.kernels.reach import GRID_X, GRID_Y

if TYPE_CHECKING:
    from aotc.kernels.config import KernelConfig
    from aotc.kernels.fusion import KernelPlan

__all__ = ["AttentionConfig", "attention_config", "emit_attention", "emit_plan", "why_not_attention"]

Size = int | SymExpr
ATTENTION_DTYPES = (DType.float32, DType.float16, DType.bfloat16)
MIN_HEAD_DIM, MAX_HEAD_DIM = 1, 256
LOG2E = 1.4426950408889634
FIXED_NAMES = (
    *("pid_m", "pid_b", "tiles", "offs_m", "offs_n", "offs_d", "offs_e", "mask_m", "mask_n", "mask_d", "mask_e"),
    *("q", "kt", "vt", "s", "keep", "m_i", "l_i", "acc", "m_new", "m_use", "alpha", "p", "n0", "hi", "out"),
)


@dataclass(frozen=True, slots=True)
class AttentionConfig:
    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n"):
            b = getattr(self, name)
            if b < 16 or b & (b - 1):
                raise UnsupportedError(f"attention config {name}={b}: expected a power of two >= 16 (tl.dot tiles)")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise UnsupportedError(f"attention config num_warps={self.num_warps}: expected 1, 2, 4, 8 or 16")
        if self.num_stages < 1:
            raise UnsupportedError(f"attention config num_stages={self.num_stages}: expected >= 1")


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """``out[batch] = attention(q[q_batch], k[k_batch], v[v_batch])`` with (lq, d) x (lk, d) x (lk, e)."""

    batch: tuple[Size, ...]
    lq: Size
    lk: Size
    d: int
    e: int


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def attention_shape(node: Node) -> AttentionShape:
    q, k, v = (x.type.shape for x in node.inputs[:3])
    out = node.outputs[0].type.shape
    d, e = q[-1], v[-1]
    if not isinstance(d, int) or not isinstance(e, int):
        raise UnsupportedError(f"attention template: head dims must be static, got {d} and {e}")
    return AttentionShape(tuple(out[:-2]), q[-2], k[-2], d, e)


def why_not_attention(node: Node) -> str | None:
    """None when the template can emit ``node`` (an SDPA node), else the reason (for --explain)."""
    if node.op is not Op.SDPA:
        return f"{node.op.value} is not scaled_dot_product_attention"
    q, k, v = node.inputs[:3]
    dt = q.type.dtype
    if dt not in ATTENTION_DTYPES:
        return f"attention in {dt.value} (the kernel takes float32, float16 and bfloat16)"
    for name, x in (("query/key", q), ("value", v)):
        hd = x.type.shape[-1]
        if not isinstance(hd, int):
            return f"{name} head dim {hd} is symbolic (the kernel pads a static head dim to a power of two)"
        if not MIN_HEAD_DIM <= hd <= MAX_HEAD_DIM:
            return f"{name} head dim {hd} is outside [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}]"
    out = node.outputs[0].type.shape
    if len(node.inputs) > 3:
        m = node.inputs[3].type.shape
        if len(m) > len(out):
            return f"mask rank {len(m)} exceeds the output rank {len(out)}"
        full = out[:-1] + (k.type.shape[-2],)
        for md, od in zip(m, full[len(full) - len(m) :]):
            if md != 1 and md != od:
                return f"mask shape {m} does not broadcast to the scores {full} without growing them"
    return None


def attention_config(
    lq_max: int, lk_max: int, head_dim: int, dtype: DType, arch_hint: str | int | None = None
) -> AttentionConfig:
    """Per-arch heuristics (no GPU needed): FlashAttention-2's tiles, smaller for fp32 (twice the
    registers per element) and wide heads, shrunk to the problem so a decode step wastes no rows."""
    arch = _arch(arch_hint)
    dp = max(16, _pow2(head_dim))
    wide = dtype is DType.float32
    if dp <= 64:
        bm, bn, warps = (64, 32, 4) if wide else (128, 64, 4)
    elif dp <= 128:
        bm, bn, warps = (64, 32, 4) if wide else (128, 64 if arch < 90 else 128, 8)
    else:
        bm, bn, warps = (32, 32, 4) if wide else (64, 32, 8)
    bm = max(16, min(bm, _pow2(max(1, lq_max))))
    bn = max(16, min(bn, _pow2(max(1, lk_max))))
    stages = 3 if arch >= 80 and dp <= 128 else 2
    return AttentionConfig(bm, bn, warps if bm >= 64 else 4, stages)


def _arch(hint: str | int | None) -> int:
    if hint is None:
        return 80
    if isinstance(hint, int):
        return hint
    text = str(hint).removeprefix("sm_").rstrip("a")
    if not text.isdigit():
        raise UnsupportedError(f"attention arch_hint {hint!r}: expected 'sm_80', 'sm_90' or an int like 90")
    return int(text)


def emit_attention(
    builder: Any,
    node: Node,
    *,
    arch_hint: str | int | None = None,
    config: AttentionConfig | None = None,
    name: str = "attention",
) -> Kernel:
    """Emit the SDPA ``node`` into ``builder`` and return the finished Kernel (kind ATTENTION).

    ``builder`` is a fresh KernelBuilder whose ``inline`` holds the views (and casts) feeding q, k, v
    and the mask, but not the SDPA output, which the kernel stores. Grid: (query tiles, batch x heads, 1),
    the batch moving onto axis x when it may exceed CUDA's y limit.
    """
    reason = why_not_attention(node)
    if reason is not None:
        raise UnsupportedError(f"attention template: {reason}")
    q, k, v = node.inputs[:3]
    mask = node.inputs[3] if len(node.inputs) > 3 else None
    out = node.outputs[0]
    dtype = q.type.dtype
    node_index = anchor_index(builder, node)
    shape = attention_shape(node)
    ranges = builder.graph.ranges
    cfg = config or attention_config(upper(shape.lq, ranges), upper(shape.lk, ranges), shape.d, dtype, arch_hint)
    block_d, block_e = max(16, _pow2(shape.d)), max(16, _pow2(shape.e))
    scale = node.attrs.get("scale")
    scale = 1.0 / math.sqrt(shape.d) if scale is None else float(scale)
    float_mask = mask is not None and mask.type.dtype is not DType.bool
    # exp2 with log2(e) folded into the scale, unless an additive mask must stay in natural units
    exp, qk_scale = ("tl.exp", scale) if float_mask else ("tl.exp2", scale * LOG2E)
    batch_names = [f"b{i}" for i in range(len(shape.batch))]
    reserve(builder, (*FIXED_NAMES, *batch_names))

    lq, lk = size_text(builder, shape.lq, "q_len"), size_text(builder, shape.lk, "kv_len")
    batch_count = _prod(shape.batch)
    grid, batch_on_x = grid_with_batch(cdiv(shape.lq, cfg.block_m), batch_count, ranges)
    builder.line("pid_m = tl.program_id(0)")
    out_batch = ["0"] * len(shape.batch)
    r, bm = builder.reach, sym("BLOCK_M")
    tiles_m: Size = GRID_X  # pid_m's count
    if batch_count != 1:
        if batch_on_x:
            builder.line(f"tiles = tl.cdiv({lq}, BLOCK_M)")
            builder.line("pid_b = pid_m // tiles")
            builder.line("pid_m = pid_m % tiles")
            tiles_m = cdiv(builder.arg(shape.lq), bm)
            r.bound("pid_b", add(floordiv(add(GRID_X, -1), tiles_m), 1))
        else:
            builder.line("pid_b = tl.program_id(1)")
            r.bound("pid_b", GRID_Y)
        out_batch = unravel(builder, "pid_b", shape.batch, batch_names)
    q_b, k_b, v_b = (_operand_batch(out_batch, x.type.shape[:-2], shape.batch) for x in (q, k, v))

    builder.line("offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    builder.line("offs_d = tl.arange(0, BLOCK_D)")
    builder.line("offs_e = tl.arange(0, BLOCK_E)")
    mask_m = None if is_multiple(builder, shape.lq, cfg.block_m) else "mask_m"
    if mask_m:
        builder.line(f"mask_m = offs_m < {lq}")
    mask_d = None if block_d == shape.d else "mask_d"
    if mask_d:
        builder.line(f"mask_d = offs_d < {shape.d}")
    mask_e = None if block_e == shape.e else "mask_e"
    if mask_e:
        builder.line(f"mask_e = offs_e < {shape.e}")
    mask_n = None if is_multiple(builder, shape.lk, cfg.block_n) else "mask_n"
    r.bound("offs_m", mul(tiles_m, bm))
    r.guard("mask_m[:, None]", "offs_m", 0, builder.arg(shape.lq))
    # keys: n0 < hi <= lk (causal: hi = min(lk, ...))
    r.bound("offs_n", mul(cdiv(builder.arg(shape.lk), sym("BLOCK_N")), sym("BLOCK_N")))
    for term in ("mask_n[None, :]", "mask_n[:, None]"):
        r.guard(term, "offs_n", 0, builder.arg(shape.lk))
    for axis, size, block in (("d", shape.d, "BLOCK_D"), ("e", shape.e, "BLOCK_E")):
        r.bound(f"offs_{axis}", sym(block))
        for term in (f"mask_{axis}[None, :]", f"mask_{axis}[:, None]"):
            r.guard(term, f"offs_{axis}", 0, size)

    q_mask = mask_and(_col(mask_m), _row(mask_d))
    with builder.reading_as("q"):
        q_tile = builder.load(q, [*q_b, "offs_m[:, None]", "offs_d[None, :]"], q_mask)
    q_tile = full_tile(builder, q_tile, "(BLOCK_M, BLOCK_D)", dtype, "q")
    builder.line('m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)')
    builder.line("l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)")
    builder.line("acc = tl.zeros((BLOCK_M, BLOCK_E), dtype=tl.float32)")
    causal = bool(node.attrs.get("is_causal", False))
    # causal: keys past the block's last query row are masked for every row, so skip their blocks
    builder.line(f"hi = tl.minimum({lk}, (pid_m + 1) * BLOCK_M)" if causal else f"hi = {lk}")
    precision = ', input_precision="ieee"' if dtype is DType.float32 else ""
    with builder.block("for n0 in range(0, hi, BLOCK_N)"):
        builder.line("offs_n = n0 + tl.arange(0, BLOCK_N)")
        if mask_n:
            builder.line(f"mask_n = offs_n < {lk}")
        with builder.reading_as("k"):
            k_tile = builder.load(k, [*k_b, "offs_n[None, :]", "offs_d[:, None]"], mask_and(_col(mask_d), _row(mask_n)))
        k_tile = full_tile(builder, k_tile, "(BLOCK_D, BLOCK_N)", dtype, "kt")
        builder.line(f"s = tl.dot({q_tile}, {k_tile}{precision}) * {qk_scale!r}")
        keep = [_row(mask_n)] if mask_n else []
        if causal:
            keep.append("(offs_n[None, :] <= offs_m[:, None])")
        if mask is not None:
            with builder.reading_as("mask"):
                m_tile = _load_mask(builder, mask, out_batch, shape, mask_m, mask_n)
            if float_mask:
                builder.line(f"s = s + tl.cast({m_tile}, tl.float32)")  # a constant mask loads as a literal
            else:
                keep.append(f"({m_tile} != 0)")
        if keep:
            builder.line(f"keep = {' & '.join(keep)}")
            builder.line('s = tl.where(keep, s, float("-inf"))')
        builder.line("m_new = tl.maximum(m_i, tl.max(s, 1))")
        # while a row has seen only masked keys its max is -inf; rescale from 0 so -inf - -inf never happens
        builder.line('m_use = tl.where(m_new == float("-inf"), 0.0, m_new)')
        builder.line(f"alpha = {exp}(m_i - m_use)")
        builder.line(f"p = {exp}(s - m_use[:, None])")
        builder.line("l_i = l_i * alpha + tl.sum(p, 1)")
        with builder.reading_as("v"):
            v_tile = builder.load(v, [*v_b, "offs_n[:, None]", "offs_e[None, :]"], mask_and(_col(mask_n), _row(mask_e)))
        v_tile = full_tile(builder, v_tile, "(BLOCK_N, BLOCK_E)", dtype, "vt")
        probs = "p" if dtype is DType.float32 else f"p.to({TL_DTYPE[dtype]})"
        builder.line(f"acc = acc * alpha[:, None] + tl.dot({probs}, {v_tile}{precision})")
        builder.line("m_i = m_new")
    # a fully masked row has l_i = 0 and acc = 0: out 0, as PyTorch's SDPA gives (any other row has l_i >= 1)
    builder.line("out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]")
    if bounds(shape.lk, ranges)[0] <= 0:
        builder.line(f"out = tl.where({lk} > 0, out, 0.0)")  # no keys at all: the reference's empty sum, 0
    out_index = [*out_batch, "offs_m[:, None]", "offs_e[None, :]"]
    result = "out" if dtype is DType.float32 else f"out.to({TL_DTYPE[dtype]})"
    builder.store(out, out_index, result, mask_and(_col(mask_m), _row(mask_e)))
    return builder.finish(
        name=name,
        kind=KernelKind.ATTENTION,
        grid=grid,
        constexprs=(("BLOCK_M", cfg.block_m), ("BLOCK_N", cfg.block_n), ("BLOCK_D", block_d), ("BLOCK_E", block_e)),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        extra_nodes=(node_index,),
    )


def emit_plan(b: Any, kp: KernelPlan, name: str, config: KernelConfig, tiles: AttentionConfig | None = None) -> Kernel:
    """The template table's emitter (aotc/ir/templates.py): ``kp``'s SDPA node."""
    assert kp.root is not None
    return emit_attention(b, kp.root, arch_hint=f"sm_{config.arch}", name=name, config=tiles)


def _load_mask(
    builder: Any, mask: Value, out_batch: Sequence[str], shape: AttentionShape, mask_m: str | None, mask_n: str | None
) -> str:
    """The mask tile at (rows, keys): broadcast dims read index 0, so a [B, 1, 1, Lk] padding mask
    loads one [1, BLOCK_N] row per block."""
    full = (*shape.batch, shape.lq, shape.lk)
    idx = [*out_batch, "offs_m[:, None]", "offs_n[None, :]"]
    lead = len(full) - mask.type.rank
    index = ["0" if md == 1 and full[lead + i] != 1 else idx[lead + i] for i, md in enumerate(mask.type.shape)]
    rows = index[-2] != "0" if mask.type.rank >= 2 else False
    cols = index[-1] != "0" if mask.type.rank >= 1 else False  # a scalar mask is one value for every score
    return builder.load(mask, index, mask_and(_col(mask_m) if rows else None, _row(mask_n) if cols else None), "0")


def _operand_batch(out_batch: Sequence[str], batch: Sequence[Size], out_dims: Sequence[Size]) -> list[str]:
    """An operand's batch index: the output's, or 0 along dims it broadcasts (static 1)."""
    lead = len(out_dims) - len(batch)
    return ["0" if d == 1 and out_dims[lead + i] != 1 else out_batch[lead + i] for i, d in enumerate(batch)]


def _col(m: str | None) -> str | None:
    return f"{m}[:, None]" if m else None


def _row(m: str | None) -> str | None:
    return f"{m}[None, :]" if m else None


def _prod(dims: Sequence[Size]) -> Size:
    out: Size = 1
    for d in dims:
        out = mul(out, d)
    return out
