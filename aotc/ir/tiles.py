"""Tile configurations of the contraction templates (matmul, conv), from per-arch heuristics: in ir/ because the
lowering (split-K) and the kernels both size work by them.

Sizes may be symbolic: a heuristic looks at the largest value a dim can take (its upper bound over the
symbols' ranges), so a kernel is sized for the big calls and stays correct (masked) for small ones.
Tables follow the shapes Triton's tutorials and Inductor's mm configs settle on for A100 (sm_80) and
H100 (sm_90): fp32 tiles are half as deep in K as 16-bit ones because each element takes twice the
shared memory, and tiny-M problems (decode steps, GEMV-like linears) use a 16-row tile.

On sm_90 the tile is chosen per shape (``sm90_tile``): the largest tile whose count fills the SMs' waves well,
since one tile size for every N leaves most of a last wave idle (8192 x 768 in 128 x 256 tiles is 192 tiles on
132 SMs: two waves, the second 45% full); and a product of at most 64 rows spreads its columns over enough
CTAs to fill one wave (a 1-row Linear reads its weight from as many SMs as it can).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.symbolic import SymExpr
from aotc.ir.symbolic_values import bounds

ARCHS = ("sm_80", "sm_90")
# tl.dot needs every tile dimension to be at least 16.
MIN_DOT_BLOCK = 16
FMA_BLOCK_K = MIN_DOT_BLOCK  # the K step of an IEEE fp32 (FMA) dot: see matmul_config
# Dynamic shared memory one block may opt in to, by compute capability (CUDA programming guide): what a tile's
# pipeline stages must fit in (autotuning's candidates, the tuned table's configs).
SHARED_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}
DEFAULT_SHARED = 99 * 1024


@dataclass(frozen=True, slots=True)
class TileConfig:
    """One launch configuration of a contraction kernel."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    # a matmul's persistent form (kernels/matmul.py): a fixed grid of sm_90's SM count, each program looping over
    # tiles. Only the tuned table picks it, where it was timed faster; no heuristic does, none having been measured.
    persistent: bool = False

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise UnsupportedError(f"tile config {name}={v!r}: expected a positive power of two")
        if self.group_m < 1 or self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise UnsupportedError(
                f"tile config group_m={self.group_m}, num_warps={self.num_warps}, num_stages={self.num_stages}: "
                "expected group_m >= 1, num_warps a power of two <= 16 and num_stages >= 1"
            )


def check_dot_config(cfg: TileConfig) -> TileConfig:
    """``cfg`` if every tile dim fits tl.dot (at least 16), else UnsupportedError."""
    dims = (("block_m", cfg.block_m), ("block_n", cfg.block_n), ("block_k", cfg.block_k))
    small = [f"{name}={v}" for name, v in dims if v < MIN_DOT_BLOCK]
    if small:
        raise UnsupportedError(f"tile config {', '.join(small)}: tl.dot tiles need every dim >= {MIN_DOT_BLOCK}")
    return cfg


# (block_m, block_n, block_k(16-bit), num_warps, num_stages) per arch. Shared memory per stage is
# (block_m + block_n) * block_k * itemsize; every entry stays under ~150 KiB at its stage count, which both
# A100 (164 KiB) and H100 (227 KiB) give a block. sm_90's tensor-core tiles are SM90_TILES (per shape); its IEEE
# fp32 (FMA) products take these tables' sm_80 large tile.
_LARGE = (128, 128, 64, 8, 3)
_MEDIUM = {
    "sm_80": (64, 128, 64, 4, 4),
    "sm_90": (64, 128, 64, 4, 4),
}
_SMALL_M = {
    "sm_80": (16, 128, 128, 4, 3),
    "sm_90": (16, 128, 128, 4, 3),
}


# SMs of the sm_90 parts the heuristic sizes grids for: H100 SXM and H200 have 132 (the PCIe H100 114, whose
# waves the same tiles fill within a few percent).
SM90_SMS = 132
# sm_90 tensor-core tiles (block_m, block_n, block_k(16-bit), num_warps, num_stages), largest first: 128x256 is
# Triton's tutorial-09 Hopper tile, the smaller ones Inductor's persistent-mm set. ``sm90_tile`` takes the first
# whose wave efficiency reaches MIN_WAVE_EFFICIENCY.
SM90_TILES = (
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 64, 4, 4),
)
MIN_WAVE_EFFICIENCY = 0.9
# tf32x3 splits each operand tile into a tf32 head and remainder in registers: at 128x256 (8 warps) ptxas gives
# it 255 registers and a 360-byte stack (spills, sm_90a, Triton 3.9); at 128x128, 192 registers and no stack.
TF32X3_MAX_AREA = 128 * 128
# At most this many rows: the small-M form (block_m 16..64, columns split until one wave is full, a deep K step).
SMALL_M_ROWS = 64
SM90_SMALL_M_BLOCK_N = (128, 64, 32, 16)
SM90_SMALL_M = (128, 4, 3)  # block_k(16-bit), num_warps, num_stages


def wave_efficiency(tiles: int, sms: int = SM90_SMS) -> float:
    """The share of the launched waves' CTA slots that hold a tile: ``tiles / (ceil(tiles / sms) * sms)``."""
    return tiles / (-(-tiles // sms) * sms)


def _tiles(m: int, n: int, bm: int, bn: int) -> int:
    return -(-m // bm) * -(-n // bn)


def sm90_tile(m: int, n: int, max_area: int = 256 * 256) -> tuple[int, int, int, int, int]:
    """The sm_90 tile (block_m, block_n, block_k(16-bit), num_warps, num_stages) for an m x n output.

    m <= SMALL_M_ROWS: block_m the rows rounded up to a power of two (16 to 64), block_n the widest of
    SM90_SMALL_M_BLOCK_N whose tiles fill one wave (else the narrowest). Otherwise the first (largest) of
    SM90_TILES whose wave efficiency is at least MIN_WAVE_EFFICIENCY; when none is (fewer tiles than SMs, or
    an awkward count), the one with the least work on the busiest SM (waves x tile area), the larger on ties.
    Tiles over ``max_area`` outputs are left out (TF32X3_MAX_AREA: tf32x3 holds split operands in registers).
    """
    if m <= SMALL_M_ROWS:
        bm = _pow2_at_least(m, MIN_DOT_BLOCK, SMALL_M_ROWS)
        bn = next((b for b in SM90_SMALL_M_BLOCK_N if _tiles(m, n, bm, b) >= SM90_SMS), SM90_SMALL_M_BLOCK_N[-1])
        return (bm, bn, *SM90_SMALL_M)
    tiles = [t for t in SM90_TILES if t[0] * t[1] <= max_area]
    for tile in tiles:
        if wave_efficiency(_tiles(m, n, tile[0], tile[1])) >= MIN_WAVE_EFFICIENCY:
            return tile
    return min(tiles, key=lambda t: -(-_tiles(m, n, t[0], t[1]) // SM90_SMS) * t[0] * t[1])


def upper(dim: int | SymExpr, ranges: Mapping[str, tuple[int, int]]) -> int:
    """The largest value ``dim`` takes for any binding of its symbols."""
    return dim if isinstance(dim, int) else bounds(dim, ranges)[1]


def _pow2_at_least(n: int, lo: int, hi: int) -> int:
    b = lo
    while b < n and b < hi:
        b *= 2
    return b


def check_arch(arch: str | int | None) -> str:
    """The table to use for a target: ``"sm_86"`` or ``86`` (a compute capability) picks the newest
    table not newer than it; ``None`` picks sm_80, whose configs also run (a little slower) on sm_90."""
    if arch is None:
        return "sm_80"
    cc = arch
    if isinstance(arch, str) and arch.startswith("sm_") and arch[3:].isdigit():
        cc = int(arch[3:])
    if isinstance(cc, bool) or not isinstance(cc, int) or cc < 80:
        raise UnsupportedError(f"arch hint {arch!r}: expected a target like 'sm_80' or 90 (compute capability >= 80)")
    return "sm_90" if cc >= 90 else "sm_80"


def matmul_config(
    m: int,
    n: int,
    k: int,
    dtype: DType,
    arch: str | int | None = None,
    dot: bool = True,
    precision: str = "ieee",
) -> TileConfig:
    """A config for an (m x k) @ (k x n) product whose dims are at most m, n, k (upper bounds). ``precision`` is
    a float32 dot's input precision ("ieee", "tf32" or "tf32x3": the last two run on tensor cores)."""
    arch = check_arch(arch)
    if not dot:
        # Integer products multiply a (BM, BK, BN) tile in registers instead of on tensor cores.
        return TileConfig(_pow2_at_least(m, MIN_DOT_BLOCK, 32), _pow2_at_least(n, MIN_DOT_BLOCK, 32), 8, 8, 4, 1)
    fma = dtype is DType.float32 and precision == "ieee"
    if arch == "sm_90" and not fma:
        bm, bn, bk, warps, stages = sm90_tile(m, n, TF32X3_MAX_AREA if precision == "tf32x3" else 256 * 256)
    elif m <= 16:
        bm, bn, bk, warps, stages = _SMALL_M[arch]
    elif m * n <= 256 * 256:
        bm, bn, bk, warps, stages = _MEDIUM[arch]
    else:
        # IEEE fp32 dots run on FMA units, not wgmma: a 128x256 fp32 accumulator would spill registers.
        bm, bn, bk, warps, stages = _LARGE
    if dtype is DType.float32 and not fma:
        bk //= 2  # a tf32 element takes twice a 16-bit one's shared memory per stage
    elif fma:
        # An IEEE fp32 dot is an FMA loop Triton unrolls BM*BN*BK/threads times per K step, so its code (and the
        # time LLVM and ptxas take over it) grows with BK. The least tl.dot takes: CUDA-core GEMMs step K by 8
        # (CUTLASS's SIMT tiles are 128x128x8), and each accumulator adds the same products in the same order
        # however K is stepped. GPT-2's fp32 matmuls compile in 60% of the time they took at BK = 32.
        bk = FMA_BLOCK_K
    # Never tile far past a small static dim: 64 columns of a 17-wide product waste less than 256.
    bm = min(bm, _pow2_at_least(m, MIN_DOT_BLOCK, bm))
    bn = min(bn, _pow2_at_least(n, MIN_DOT_BLOCK, bn))
    bk = min(bk, _pow2_at_least(k, MIN_DOT_BLOCK, bk))
    if bm * bn <= 64 * 64:
        warps = min(warps, 4)
    return TileConfig(bm, bn, bk, 8, warps, stages)


def direct_conv_config(rows: int, channels: int, arch: str | int | None = None) -> TileConfig:
    """A config for the depthwise (direct) convolution: rows = N*OH*OW, channels = C_out. No K tile."""
    check_arch(arch)
    bm = _pow2_at_least(rows, 16, 128)
    bc = _pow2_at_least(channels, 1, 32)
    return TileConfig(bm, bc, 1, 1, 4, 1)
