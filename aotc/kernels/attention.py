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
keys fall into blocks (the row max used for rescaling is 0 while it is still -inf).

The key walk is split so most blocks carry no mask (Triton's tutorial 06-fused-attention does the same):
- the main loop covers the keys below ``lk_full`` (the key length rounded down to BLOCK_N) with no key mask
  and no select; where the length is not a known multiple of BLOCK_N one masked tail block follows;
- causal: blocks wholly at or below the diagonal for every row of the query tile (keys below the tile's
  first row, rounded down to BLOCK_N) run in the main loop; only the diagonal blocks take the causal mask,
  and query tiles run in reverse order, so the tiles with the most keys start first.
Without a float mask the row max is taken over the raw scores and ``p = exp2(s * qk_scale - m)`` (log2(e)
folded into the scale) is one FFMA per score. With one, scores stay in natural units (``s * scale + mask``,
then ``exp``), so a mask of finfo.min cannot overflow to -inf (HF BERT's fully padded rows stay uniform, as in
numpy). Two loops, no ``if``: the source-bounds check reads each loop's range as the bound of its keys.

On Hopper (an sm_90 arch launch whose PTX is 8.6 or newer), q, k and v load through in-kernel tensor descriptors
(TMA) wherever each is a buffer, or a strided view of one (a packed QKV's head split, a GQA head repeat), with
16-byte aligned rows (kernels/attention_tma.py), and the output stores through one where its rows are aligned; an
operand that keeps its pointer loads there (or an output its pointer store) has a comment saying why. The portable pointer form stays the base kernel, what sm_80 and the interpreter run.
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
from aotc.kernels.attention_tma import Descriptor, make_descriptor, store_output, why_not_descriptor, why_not_tma
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
    *("offs_t", "mask_t", "lk_full", "band", "q_desc", "k_desc", "v_desc", "out_desc"),
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
    registers per element) and wide heads, shrunk to the problem so a decode step wastes no rows. Hopper
    (sm_90) takes Inductor's H100 tiles: 128 x 128 for head dims to 64, 128 x 64 with 8 warps to 128 (128 x 128
    with 8 warps there needs 224 KiB of shared memory: one CTA per SM). d64 runs 8 warps, not Inductor's 4:
    with 4 this kernel's causal form needs 255 registers and spills (ptxas for sm_90a, 3 stages)."""
    arch = _arch(arch_hint)
    dp = max(16, _pow2(head_dim))
    wide = dtype is DType.float32
    if dp <= 64:
        bm, bn, warps = (64, 32, 4) if wide else ((128, 128, 8) if arch >= 90 else (128, 64, 4))
    elif dp <= 128:
        bm, bn, warps = (64, 32, 4) if wide else (128, 64, 8)
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
    ptx: int | None = None,
) -> Kernel:
    """Emit the SDPA ``node`` into ``builder`` and return the finished Kernel (kind ATTENTION).

    ``ptx``: the PTX ISA version the kernel will be built at (86: 8.6; None: not known). With sm_90 and PTX 8.6
    or newer, q, k and v load, and the output stores, through tensor descriptors where each is valid for it
    (kernels/attention_tma.py).

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
    # exp2 with log2(e) folded into the scale, unless an additive mask must stay in natural units; a positive
    # scale keeps the max over raw scores the max over scaled ones, so it folds into the exponent's FFMA
    exp, qk_scale = ("tl.exp", scale) if float_mask else ("tl.exp2", scale * LOG2E)
    fold = not float_mask and scale > 0
    causal = bool(node.attrs.get("is_causal", False))
    batch_names = [f"b{i}" for i in range(len(shape.batch))]
    reserve(builder, (*FIXED_NAMES, *batch_names))

    lq, lk = size_text(builder, shape.lq, "q_len"), size_text(builder, shape.lk, "kv_len")
    batch_count = _prod(shape.batch)
    grid, batch_on_x = grid_with_batch(cdiv(shape.lq, cfg.block_m), batch_count, ranges)
    builder.line("pid_m = tl.program_id(0)")
    out_batch = ["0"] * len(shape.batch)
    r, bm, bn = builder.reach, sym("BLOCK_M"), sym("BLOCK_N")
    tiles_m: Size = GRID_X  # pid_m's count
    tiles_text = "tl.num_programs(0)"
    if batch_count != 1:
        if batch_on_x:
            builder.line(f"tiles = tl.cdiv({lq}, BLOCK_M)")
            builder.line("pid_b = pid_m // tiles")
            builder.line("pid_m = pid_m % tiles")
            tiles_m, tiles_text = cdiv(builder.arg(shape.lq), bm), "tiles"
            r.bound("pid_b", add(floordiv(add(GRID_X, -1), tiles_m), 1))
        else:
            builder.line("pid_b = tl.program_id(1)")
            r.bound("pid_b", GRID_Y)
        out_batch = unravel(builder, "pid_b", shape.batch, batch_names)
    if causal:  # the last query tile sees the most keys: start it first, so the last wave runs short programs
        builder.line(f"pid_m = {tiles_text} - 1 - pid_m")
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
    r.bound("offs_m", mul(tiles_m, bm))
    r.guard("mask_m[:, None]", "offs_m", 0, builder.arg(shape.lq))
    # keys of the unmasked loop: n0 + BLOCK_N <= lk_full; of the masked ones: n0 < lk, lanes kept by mask_t
    lk_arg = builder.arg(shape.lk)
    r.bound("offs_n", lk_arg)  # lk_full <= lk: the looser bound the load-time proof discharges (no min(...))
    r.bound("offs_t", mul(cdiv(lk_arg, bn), bn))
    for term in ("mask_t[None, :]", "mask_t[:, None]"):
        r.guard(term, "offs_t", 0, lk_arg)
    for axis, size, block in (("d", shape.d, "BLOCK_D"), ("e", shape.e, "BLOCK_E")):
        r.bound(f"offs_{axis}", sym(block))
        for term in (f"mask_{axis}[None, :]", f"mask_{axis}[:, None]"):
            r.guard(term, f"offs_{axis}", 0, size)

    arch = _arch(arch_hint)
    tma = why_not_tma(arch, ptx, dtype)
    desc: dict[str, bool] = {}
    for role, x in (("q", q), ("k", k), ("v", v)):
        why = tma or why_not_descriptor(builder, x, arch, ptx)
        desc[role] = why is None
        if tma is None and why is not None:  # a Hopper launch keeping an operand's pointer loads says why (--explain)
            builder.line(f"# {role} keeps pointer loads: {why}")
    q_mask = mask_and(_col(mask_m), _row(mask_d))
    with builder.reading_as("q"):
        if desc["q"]:
            rows = (lq, "offs_m", mask_m)
            q_desc = make_descriptor(builder, q, q_b, rows, ("offs_d", mask_d), ("BLOCK_M", "BLOCK_D"), "q_desc")
            builder.line(f"q = {q_desc.load('pid_m * BLOCK_M')}")
            q_tile = "q"
        else:
            q_tile = builder.load(q, [*q_b, "offs_m[:, None]", "offs_d[None, :]"], q_mask)
            q_tile = full_tile(builder, q_tile, "(BLOCK_M, BLOCK_D)", dtype, "q")
    descs: dict[str, Descriptor] = {}
    for role, x, batch, axis in (("k", k, k_b, "d"), ("v", v, v_b, "e")):
        if desc[role]:
            with builder.reading_as(role):
                rows = (lk, "offs_t", "mask_t")
                cols = (f"offs_{axis}", mask_d if axis == "d" else mask_e)
                block = ("BLOCK_N", f"BLOCK_{axis.upper()}")
                descs[role] = make_descriptor(builder, x, batch, rows, cols, block, f"{role}_desc")
    builder.line('m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)')
    builder.line("l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)")
    builder.line("acc = tl.zeros((BLOCK_M, BLOCK_E), dtype=tl.float32)")
    body = _Body(
        q_tile, k, v, mask, float_mask, out_batch, tuple(k_b), tuple(v_b), shape, dtype, lk, mask_m, mask_d, mask_e,
        ', input_precision="ieee"' if dtype is DType.float32 else "", exp, qk_scale, fold, descs.get("k"),
        descs.get("v"),
    )  # fmt: skip
    aligned = is_multiple(builder, shape.lk, cfg.block_n)
    lk_full = lk if aligned else "lk_full"
    if not aligned:
        builder.line(f"lk_full = {lk} // BLOCK_N * BLOCK_N")
    if causal:
        # keys past the tile's last row are masked for every row: skip their blocks; keys below its first row
        # (rounded down to a block) are kept for every row: no mask there
        builder.line(f"hi = tl.minimum({lk}, (pid_m + 1) * BLOCK_M)")
        builder.line(f"band = tl.minimum(pid_m * BLOCK_M // BLOCK_N * BLOCK_N, {lk_full})")
        main, edge = "band", ("band", "hi")
    else:
        main, edge = lk_full, None if aligned else ("lk_full", lk)
    with builder.block(f"for n0 in range(0, {main}, BLOCK_N)"):
        _key_block(builder, body, "offs_n", None, causal=False)
    if edge is not None:  # the tail block, or the diagonal ones (the key mask bounds a start that is no constant)
        with builder.block(f"for n0 in range({edge[0]}, {edge[1]}, BLOCK_N)"):
            _key_block(builder, body, "offs_t", "mask_t", causal=causal)
    # a fully masked row has l_i = 0 and acc = 0: out 0, as PyTorch's SDPA gives (any other row has l_i >= 1)
    builder.line("out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]")
    if bounds(shape.lk, ranges)[0] <= 0:
        builder.line(f"out = tl.where({lk} > 0, out, 0.0)")  # no keys at all: the reference's empty sum, 0
    out_index = [*out_batch, "offs_m[:, None]", "offs_e[None, :]"]
    result = "out" if dtype is DType.float32 else f"out.to({TL_DTYPE[dtype]})"
    box = ((out_batch, "pid_m * BLOCK_M"), (lq, "offs_m", mask_m), ("offs_e", mask_e), ("BLOCK_M", "BLOCK_E"))
    if tma is not None or not store_output(builder, out, dtype, *box, result):  # TMA clips the box as masked
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
    return emit_attention(b, kp.root, arch_hint=f"sm_{config.arch}", name=name, config=tiles, ptx=config.ptx)


@dataclass(frozen=True, slots=True)
class _Body:
    """What every key block of one kernel reads: the q tile's text, the operands, their batch indices and the
    softmax's form (``fold``: the max over raw scores, the scale inside the exponent's FFMA)."""

    q_tile: str
    k: Value
    v: Value
    mask: Value | None
    float_mask: bool
    out_batch: Sequence[str]
    k_b: Sequence[str]
    v_b: Sequence[str]
    shape: AttentionShape
    dtype: DType
    lk: str
    mask_m: str | None
    mask_d: str | None
    mask_e: str | None
    precision: str
    exp: str
    qk_scale: float
    fold: bool
    k_desc: Descriptor | None = None  # k and v through tensor descriptors (Hopper), else pointer loads
    v_desc: Descriptor | None = None


def _key_block(builder: Any, b: _Body, offs: str, key_mask: str | None, *, causal: bool) -> None:
    """One BLOCK_N step of the online softmax at keys ``offs`` (masked by ``key_mask`` when given), the causal
    triangle applied when ``causal``. A block with no select and no float mask has only finite scores, so its
    new row max is finite and needs no -inf guard."""
    if key_mask or causal or b.mask is not None or b.k_desc is None or b.v_desc is None:  # descriptors need no lanes
        builder.line(f"{offs} = n0 + tl.arange(0, BLOCK_N)")
    if key_mask:
        builder.line(f"{key_mask} = {offs} < {b.lk}")
    if b.k_desc is not None:  # the box past the key length and the head dim loads as zeros
        builder.line(f"kt = {b.k_desc.load('n0')}.T")
        k_tile = "kt"
    else:
        with builder.reading_as("k"):
            k_tile = builder.load(
                b.k, [*b.k_b, f"{offs}[None, :]", "offs_d[:, None]"], mask_and(_col(b.mask_d), _row(key_mask))
            )
        k_tile = full_tile(builder, k_tile, "(BLOCK_D, BLOCK_N)", b.dtype, "kt")
    dot = f"tl.dot({b.q_tile}, {k_tile}{b.precision})"
    builder.line(f"s = {dot}" if b.fold else f"s = {dot} * {b.qk_scale!r}")
    keep = [_row(key_mask)] if key_mask else []
    if causal:
        keep.append(f"({offs}[None, :] <= offs_m[:, None])")
    if b.mask is not None:
        with builder.reading_as("mask"):
            m_tile = _load_mask(builder, b.mask, b, offs, key_mask)
        if b.float_mask:
            builder.line(f"s = s + tl.cast({m_tile}, tl.float32)")  # a constant mask loads as a literal
        else:
            keep.append(f"({m_tile} != 0)")
    if keep:
        builder.line(f"keep = {' & '.join(keep)}")
        builder.line('s = tl.where(keep, s, float("-inf"))')
    builder.line(f"m_new = tl.maximum(m_i, tl.max(s, 1){f' * {b.qk_scale!r}' if b.fold else ''})")
    m_ref = "m_new"
    if keep or b.float_mask:
        # while a row has seen only masked keys its max is -inf; rescale from 0 so -inf - -inf never happens
        builder.line('m_use = tl.where(m_new == float("-inf"), 0.0, m_new)')
        m_ref = "m_use"
    builder.line(f"alpha = {b.exp}(m_i - {m_ref})")
    scores = f"s * {b.qk_scale!r}" if b.fold else "s"
    builder.line(f"p = {b.exp}({scores} - {m_ref}[:, None])")
    builder.line("l_i = l_i * alpha + tl.sum(p, 1)")
    if b.v_desc is not None:
        builder.line(f"vt = {b.v_desc.load('n0')}")
        v_tile = "vt"
    else:
        with builder.reading_as("v"):
            v_tile = builder.load(
                b.v, [*b.v_b, f"{offs}[:, None]", "offs_e[None, :]"], mask_and(_col(key_mask), _row(b.mask_e))
            )
        v_tile = full_tile(builder, v_tile, "(BLOCK_N, BLOCK_E)", b.dtype, "vt")
    probs = "p" if b.dtype is DType.float32 else f"p.to({TL_DTYPE[b.dtype]})"
    builder.line(f"acc = acc * alpha[:, None] + tl.dot({probs}, {v_tile}{b.precision})")
    builder.line("m_i = m_new")


def _load_mask(builder: Any, mask: Value, b: _Body, offs: str, key_mask: str | None) -> str:
    """The mask tile at (rows, keys): broadcast dims read index 0, so a [B, 1, 1, Lk] padding mask
    loads one [1, BLOCK_N] row per block."""
    full = (*b.shape.batch, b.shape.lq, b.shape.lk)
    idx = [*b.out_batch, "offs_m[:, None]", f"{offs}[None, :]"]
    lead = len(full) - mask.type.rank
    index = ["0" if md == 1 and full[lead + i] != 1 else idx[lead + i] for i, md in enumerate(mask.type.shape)]
    rows = index[-2] != "0" if mask.type.rank >= 2 else False
    cols = index[-1] != "0" if mask.type.rank >= 1 else False  # a scalar mask is one value for every score
    return builder.load(mask, index, mask_and(_col(b.mask_m) if rows else None, _row(key_mask) if cols else None), "0")


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
