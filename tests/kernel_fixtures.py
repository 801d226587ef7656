"""Hand-written kernels as launch records (``Kernel``), for the tests that launch or compile a kernel of their own
rather than one the scheduler generated: what such a test does not exercise (nodes, values) stays empty."""

from __future__ import annotations

from collections.abc import Sequence

from aotc.ir.schedule import Arg, ArgKind, IndexCheck, Kernel, Size
from aotc.ir.templates import KernelKind

# What every kernel module aotc writes starts with.
HEADER = "import triton\nimport triton.language as tl\n\n"

# out = x + y over n elements, BLOCK per program.
ADD = (
    HEADER
    + """
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
"""
)


def ptr(name: str, value: int, type_: str = "*fp32") -> Arg:
    """A buffer pointer argument; ``value`` is the graph value (or, in a hand-run launch, the argument's position)."""
    return Arg(name, type_, ArgKind.BUFFER, value)


def size(name: str, expr: Size, type_: str = "i32") -> Arg:
    return Arg(name, type_, ArgKind.SIZE, size=expr)


def flag(name: str = "flags_ptr") -> Arg:
    return Arg(name, "*i32", ArgKind.FLAG)


def hand_kernel(
    name: str,
    source: str,
    args: Sequence[Arg],
    grid: tuple[Size, Size, Size],
    constexprs: Sequence[tuple[str, int]] = (),
    *,
    kind: KernelKind = KernelKind.POINTWISE,
    nodes: tuple[int, ...] = (),
    inputs: tuple[int, ...] = (),
    outputs: tuple[int, ...] = (),
    num_warps: int = 4,
    num_stages: int = 2,
    divisible: tuple[int, ...] = (),
    checks: Sequence[IndexCheck] = (),
) -> Kernel:
    return Kernel(
        name=name,
        kind=kind,
        nodes=nodes,
        inputs=inputs,
        outputs=outputs,
        args=tuple(args),
        grid=grid,
        source=source,
        constexprs=tuple(constexprs),
        num_warps=num_warps,
        num_stages=num_stages,
        divisible=divisible,
        checks=tuple(checks),
    )
