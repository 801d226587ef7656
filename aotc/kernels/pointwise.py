"""The pointwise template: one flat block of the output's elements per program."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aotc.ir.index import unflatten
from aotc.ir.schedule import Kernel, Size
from aotc.ir.symbolic import add, floordiv, mul, sym
from aotc.ir.symbolic_values import bounds
from aotc.ir.templates import KernelKind
from aotc.ir.types import Shape, Value
from aotc.kernels import index_text as ix
from aotc.kernels.config import KernelConfig
from aotc.kernels.emit import KernelBuilder, numel
from aotc.kernels.reach import GRID_X

if TYPE_CHECKING:
    from aotc.kernels.fusion import KernelPlan


def emit_pointwise(b: KernelBuilder, outputs: Sequence[Value], name: str, config: KernelConfig) -> Kernel:
    """Computes every value of ``outputs`` (one shape) at each element and stores it.

    ``offs`` walks the elements in row-major order; each dim's index is unravelled from it once, and
    every fused view turns that index into its operand's index.
    """
    shape = outputs[0].type.shape
    n = numel(shape)
    n_max = bounds(n, b.graph.ranges, b.graph.multiples)[1]
    block, warps = config.pointwise_block(max(1, n_max))
    b.line("pid = tl.program_id(0)")
    start = "pid.to(tl.int64) * BLOCK" if b.wide(n) else "pid * BLOCK"
    b.line(f"offs = {start} + tl.arange(0, BLOCK)")
    b.line(f"mask = offs < {b.size_arg(n, 'n_elements')}")
    flat_reach(b, n)
    index = unravel_into(b, "offs", shape, "x")
    env: dict[int, str] = {}
    for v in outputs:  # a later output reads an earlier one at the same element: from the register
        env[v.id] = b.compute(v, index, "mask", env)
        b.store(v, index, env[v.id], "mask")
    grid = (floordiv(add(n, block - 1), block), 1, 1)
    return b.finish(name, KernelKind.POINTWISE, grid, (("BLOCK", block),), num_warps=warps, num_stages=1)


def emit_plan(b: KernelBuilder, kp: KernelPlan, name: str, config: KernelConfig, tiles: Any = None) -> Kernel:
    """The template table's emitter (aotc/ir/templates.py): every value ``kp`` stores."""
    return emit_pointwise(b, kp.outputs, name, config)


def flat_reach(b: KernelBuilder, n: Size) -> None:
    """What ``offs`` holds: ``pid * BLOCK + tl.arange(0, BLOCK)``, and below ``n`` where ``mask`` keeps a lane."""
    b.reach.bound("offs", mul(GRID_X, sym("BLOCK")))
    b.reach.guard("mask", "offs", 0, b.arg(n))


def unravel_into(b: KernelBuilder, linear: str, shape: Shape, stem: str) -> list[str]:
    """Names one variable per dim holding the row-major index of ``linear`` (size-1 dims are ``0``).

    They are bound as index expressions of ``linear`` (below the element count wherever the mask keeps a
    lane), so an offset that takes them row-major again simplifies back to ``linear``."""
    flat = b.index_var(linear, numel(shape))
    return ["0" if ix.is_one(d) else b.let_index(stem, e) for d, e in zip(shape, unflatten(flat, shape))]
