"""Block sizes, warps and stages from simple per-architecture heuristics (no GPU needed to choose them)."""

from __future__ import annotations

from dataclasses import dataclass

# The largest reduction row kept whole in one block ("persistent"); longer rows loop over blocks.
PERSISTENT_ROW = {80: 8192, 90: 8192}
# Elements of one tile a program holds in registers for pointwise and reduction kernels.
TILE = {80: 4096, 90: 8192}


@dataclass(frozen=True)
class KernelConfig:
    """What the heuristics key on: the oldest target's compute capability (kernels serve every target)."""

    arch: int = 80
    # The PTX ISA version the target is built at (86: 8.6), where known: the Hopper attention and matmul kernels'
    # tensor descriptor loads need 8.6 (kernels/attention_tma.py, kernels/matmul_tma.py).
    ptx: int | None = None

    @property
    def persistent_row(self) -> int:
        return PERSISTENT_ROW.get(self.arch, 8192)

    @property
    def tile(self) -> int:
        return TILE.get(self.arch, 4096)

    def pointwise_block(self, numel_max: int) -> tuple[int, int]:
        """(BLOCK, num_warps) for a flat pointwise kernel over up to ``numel_max`` elements."""
        block = min(1024, next_pow2(numel_max))
        return block, 4 if block >= 512 else max(1, block // 128)

    def reduction(self, rows_max: int, row_max: int) -> tuple[int, int, bool, int]:
        """(XBLOCK, RBLOCK, persistent, num_warps) for ``rows_max`` rows of up to ``row_max`` elements."""
        persistent = row_max <= self.persistent_row
        rblock = next_pow2(row_max) if persistent else 2048
        xblock = max(1, min(next_pow2(rows_max), self.tile // rblock, 64))
        warps = 8 if xblock * rblock >= 4096 else 4 if xblock * rblock >= 1024 else 2
        return xblock, rblock, persistent, warps


def next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p
