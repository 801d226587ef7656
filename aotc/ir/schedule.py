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


# The names the grid goes by in a launch's ``Extents`` (beside its size args' and constexprs' names).
GRID_NAMES = ("grid_x", "grid_y", "grid_z")


@dataclass(frozen=True, slots=True)
class Extents:
    """What a launch's code touches, derived from the index math its template generated (aotc/kernels/reach.py),
    as expressions over the code's own names: its size args and constexprs (by name) and its grid (``GRID_NAMES``).

    Per arg, in ``Kernel.args`` order: the smallest and the largest element offset the code reads or writes
    through it (a flag arg: the slots it stores; ``(0, -1)``: none, as for every size arg). ``ranges`` holds each
    name the derivation read with the interval it assumed (the bounds of what the compiler passed), and
    ``requires`` further facts the code's index math rests on, each ``>= 0`` (a grid within the tiles its
    program ids are decoded into). The reader substitutes what a launch passes and proves, over the symbols'
    ranges, that each name lies in its interval, each requirement holds and each pointer stays inside its
    value (aotc/artifact/binding_checks.py)."""

    lows: tuple[Size, ...]
    highs: tuple[Size, ...]
    ranges: tuple[tuple[str, int, int], ...] = ()
    requires: tuple[Size, ...] = ()


@dataclass(frozen=True, slots=True)
class Kernel:
    """One Triton kernel: its source, what it computes and how to launch it."""

    name: str  # unique in the schedule; the @triton.jit function's name in ``source``
    kind: str  # a KernelKind: its template's name (aotc/ir/templates.py), a str so this module needs no table
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
    # Per-architecture launches: a GPU that runs ``arch``'s code launches that ArchLaunch's kernel instead.
    arch_launches: tuple[ArchLaunch, ...] = ()
    # What its code touches (set by the template that generated it; None: not derived, as in files before
    # schema 6 and hand-written kernels).
    extents: Extents | None = None
    # The launch bound to the graph it computes: aotc.ir.digest.launch_digest of its nodes, code, args and
    # extents, set when the plan is final ("": none, as in files before schema 6).
    digest: str = ""

    def replace(self, **changes: Any) -> Kernel:
        return dataclasses.replace(self, **changes)

    def for_capability(self, capability: tuple[int, int]) -> Kernel:
        """The kernel a GPU of compute capability ``capability`` launches: the arch launch for the newest
        architecture it runs (same major version, minor not above its own), else this kernel."""
        best: tuple[tuple[int, int], Kernel] | None = None
        for v in self.arch_launches:
            cc = arch_capability(v.arch)
            if cc[0] == capability[0] and cc[1] <= capability[1] and (best is None or cc > best[0]):
                best = (cc, v.kernel)
        return self if best is None else best[1]


@dataclass(frozen=True, slots=True)
class ArchLaunch:
    """A kernel generated for one GPU architecture with its own tiles (heuristic or autotuned).

    ``kernel`` computes exactly what its parent does, from the same args, nodes, reads and writes: only
    its name, source, constexprs, warps, stages and grid differ. Its binary is compiled for ``arch`` only.
    """

    arch: str  # a target name: "sm_90"
    kernel: Kernel


def arch_capability(arch: str) -> tuple[int, int]:
    """(9, 0) for "sm_90" (or "sm_90a")."""
    digits = arch.removeprefix("sm_").rstrip("a")
    return int(digits[:-1]), int(digits[-1])


def same_launch(a: Kernel, b: Kernel) -> bool:
    """Whether ``b`` may stand in for ``a`` on some GPU: the same kind, work, memory and arguments."""
    return (a.kind, a.nodes, a.inputs, a.outputs, a.args, a.checks, a.fused) == (
        b.kind,
        b.nodes,
        b.inputs,
        b.outputs,
        b.args,
        b.checks,
        b.fused,
    )


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

    def for_capability(self, capability: tuple[int, int]) -> Schedule:
        """The plan a GPU of ``capability`` runs: each launch's arch launch for it, where one exists."""
        if not any(k.arch_launches for k in self.kernels):
            return self
        return dataclasses.replace(self, kernels=tuple(k.for_capability(capability) for k in self.kernels))

    def codes(self) -> tuple[Kernel, ...]:
        """Every distinct kernel code the plan may launch, arch launches included, by name in first-use order."""
        out: dict[str, Kernel] = {}
        for k in self.kernels:
            out.setdefault(k.name, k)
            for v in k.arch_launches:
                out.setdefault(v.kernel.name, v.kernel)
        return tuple(out.values())


# CUDA's grid limits per axis (x, y, z); what each template launches is its row's grid (aotc/ir/templates.py).
GRID_LIMITS = (2**31 - 1, 65535, 65535)
