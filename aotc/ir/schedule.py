"""The launch plan that sits beside a primitive graph: kernels, their arguments, grids and the arena.

A ``Schedule`` is pure data. ``aotc.kernels`` builds it, the artifact stores it and the runtime's
device backends (``interpret``, ``cuda``) execute it without importing the compiler: every size
is a symbolic expression over the graph's symbols, evaluated once per call from the bound dims.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from aotc.ir.symbolic import SymExpr

Size = int | SymExpr

# Triton signature types an argument may have, and the element dtype names pointers carry.
POINTER_TYPES = ("*fp32", "*fp16", "*bf16", "*i32", "*i64", "*i1", "*i8")
SCALAR_TYPES = ("i32", "i64", "fp32")
# The arena, inputs, outputs and weights all start at this alignment.
ALIGN = 256


class KernelKind(str, enum.Enum):
    """What template a kernel came from. Gather, concat, pad, slice, flip and pooling windows are
    index arithmetic inside pointwise or reduction kernels, never kernels of their own."""

    POINTWISE = "pointwise"
    REDUCTION = "reduction"
    MATMUL = "matmul"
    CONV = "conv"
    ATTENTION = "attention"  # flash attention (aotc/kernels/attention.py)


class ArgKind(str, enum.Enum):
    BUFFER = "buffer"  # a pointer to the storage of graph value ``value`` (input, weight, output or arena)
    SIZE = "size"  # an integer computed from the bound symbols: ``size``
    FLAG = "flag"  # a pointer to the call's int32 error-flag array; the kernel writes ``flag`` slots


@dataclass(frozen=True, slots=True)
class Arg:
    """One kernel parameter, in launch order. The two trailing scratch pointers every Triton kernel
    takes (KERNELS.md) are not listed: they follow the last ``Arg`` and come from ``LaunchMeta``."""

    name: str
    type: str  # a Triton signature type: "*fp32", "i32", ...
    kind: ArgKind
    value: int = -1  # BUFFER: the graph value id whose storage is passed
    size: Size = 0  # SIZE: the expression passed


@dataclass(frozen=True, slots=True)
class IndexCheck:
    """An index a kernel bounds-checks: when an id is outside ``[low, high)`` the kernel stores 1
    into flag slot ``slot`` and reads nothing out of bounds; the runtime then raises ``ExecError``."""

    slot: int
    input: str  # the graph input (or value) the ids come from, for the message
    op: str  # e.g. "gather at model.py:12"
    low: Size
    high: Size


@dataclass(frozen=True, slots=True)
class Kernel:
    """One Triton kernel: its source, what it computes and how to launch it."""

    name: str  # unique in the schedule; the @triton.jit function's name in ``source``
    kind: KernelKind
    nodes: tuple[int, ...]  # indices into graph.nodes this kernel computes (views it folds in included)
    inputs: tuple[int, ...]  # value ids it reads from memory
    outputs: tuple[int, ...]  # value ids it writes
    args: tuple[Arg, ...]
    grid: tuple[Size, Size, Size]
    source: str  # a complete module: imports plus one @triton.jit function named ``name``
    constexprs: tuple[tuple[str, int], ...] = ()  # block sizes and other compile-time ints, by name
    num_warps: int = 4
    num_stages: int = 2
    divisible: tuple[int, ...] = ()  # indices into ``args`` proven multiples of 16 (tt.divisibility hints)
    checks: tuple[IndexCheck, ...] = ()
    fused: tuple[str, ...] = ()  # the primitives fused into it, in node order, for inspect/--explain

    def replace(self, **changes: Any) -> Kernel:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Buffer:
    """An intermediate value that lives in the call's arena from kernel ``first`` to ``last``."""

    value: int
    nbytes: Size
    offset: Size  # from the arena's start; a multiple of ALIGN for every binding of the symbols
    first: int  # index of the kernel that writes it
    last: int  # index of the last kernel that reads it


@dataclass(frozen=True, slots=True)
class View:
    """A graph output (or kernel operand) that is a contiguous reshape of another value's storage:
    ``value`` shares the storage of ``base`` (no kernel copies it)."""

    value: int
    base: int


@dataclass(frozen=True, slots=True)
class Schedule:
    kernels: tuple[Kernel, ...]
    buffers: tuple[Buffer, ...]
    arena_bytes: Size
    views: tuple[View, ...] = ()
    flags: int = 0  # error-flag slots one call needs
    declined: tuple[str, ...] = ()  # each fusion the scheduler declined, with its reason (--explain)

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)
