"""The launch plan that sits beside a primitive graph: kernels, their arguments, grids and the arena.

A ``Schedule`` is pure data. ``aotc.kernels`` builds it, the artifact stores it and the runtime's
device backends (``interpret``, ``cuda``) execute it without importing the compiler: every size
is a symbolic expression over the graph's symbols, evaluated once per call from the bound dims.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aotc.ir.ops import Op
from aotc.ir.symbolic import SymExpr, add, floordiv, mul, smax

if TYPE_CHECKING:
    from aotc.ir.graph import Graph
    from aotc.ir.types import Node

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
    value (aotc/artifact/plan_checks.py)."""

    lows: tuple[Size, ...]
    highs: tuple[Size, ...]
    ranges: tuple[tuple[str, int, int], ...] = ()
    requires: tuple[Size, ...] = ()


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
    # Per-architecture alternatives: a GPU that runs ``arch``'s code launches the variant's kernel instead.
    variants: tuple[ArchVariant, ...] = ()
    # What its code touches (set by the template that generated it; None: not derived, as in files before
    # schema 6 and hand-written kernels).
    extents: Extents | None = None
    # The launch bound to the graph it computes: aotc.ir.digest.launch_digest of its nodes, code, args and
    # extents, set when the plan is final ("": none, as in files before schema 6).
    digest: str = ""

    def replace(self, **changes: Any) -> Kernel:
        return dataclasses.replace(self, **changes)

    def for_capability(self, capability: tuple[int, int]) -> Kernel:
        """The kernel a GPU of compute capability ``capability`` launches: the variant for the newest
        architecture it runs (same major version, minor not above its own), else this kernel."""
        best: tuple[tuple[int, int], Kernel] | None = None
        for v in self.variants:
            cc = arch_capability(v.arch)
            if cc[0] == capability[0] and cc[1] <= capability[1] and (best is None or cc > best[0]):
                best = (cc, v.kernel)
        return self if best is None else best[1]


@dataclass(frozen=True, slots=True)
class ArchVariant:
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
        """The plan a GPU of ``capability`` runs: each launch's variant for it, where one exists."""
        if not any(k.variants for k in self.kernels):
            return self
        return dataclasses.replace(self, kernels=tuple(k.for_capability(capability) for k in self.kernels))

    def codes(self) -> tuple[Kernel, ...]:
        """Every distinct kernel code the plan may launch, variants included, by name in first-use order."""
        out: dict[str, Kernel] = {}
        for k in self.kernels:
            out.setdefault(k.name, k)
            for v in k.variants:
                out.setdefault(v.kernel.name, v.kernel)
        return tuple(out.values())


# -- what a launch's grid may be -----------------------------------------------------------------

# CUDA's grid limits per axis (x, y, z).
GRID_LIMITS = (2**31 - 1, 65535, 65535)
_REDUCTIONS = frozenset((Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD, Op.ARGMAX, Op.ARGMIN))


def grid_need(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """Per axis, the most programs the template of ``k.kind`` launches for ``k``'s nodes, outputs and block sizes
    (aotc/kernels/: pointwise.py, scatter.py, reduction.py, matmul.py, conv.py, attention.py); a program past
    it would work on tiles outside its outputs. ValueError when ``k`` lacks what its template has."""
    rule = GRID_NEEDS.get(k.kind)
    if rule is None:
        raise ValueError(f"kernel kind {k.kind!r} is not a KernelKind")
    return rule(graph, k)


def _cdiv(a: Size, b: int) -> Size:
    return floordiv(add(a, b - 1), b)


def _numel(shape: tuple[Size, ...]) -> Size:
    out: Size = 1
    for d in shape:
        out = mul(out, d)
    return out


def _block(k: Kernel, name: str) -> int:
    v = dict(k.constexprs).get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"a {k.kind.value} kernel needs a positive {name} constexpr, got {v!r}")
    return v


def _anchor(graph: Graph, k: Kernel, op: Op, rank: int) -> Node:
    """The one ``op`` node a launch of a contraction template computes (operands and output of rank >= ``rank``)."""
    found = [graph.nodes[i] for i in k.nodes if graph.nodes[i].op is op]
    if len(found) != 1:
        raise ValueError(f"a {k.kind.value} launch computes {len(found)} {op.value} nodes, not 1")
    node = found[0]
    if len(node.inputs) < 2 or min(x.type.rank for x in (*node.inputs[:2], *node.outputs)) < rank:
        raise ValueError(f"its {op.value} node does not have the operands the template takes")
    return node


def _largest(xs: Iterable[Size]) -> Size:
    out: Size | None = None
    for x in dict.fromkeys(xs):
        out = x if out is None else smax(out, x)
    return 0 if out is None else out


def _batched(tiles: Size, batch: Size, k: Kernel) -> tuple[Size, Size, Size]:
    """The batch on grid axis y where the code reads it there (codegen's ``tl.program_id(1)``), else folded
    into axis x (a batch that may exceed axis y's limit)."""
    if not isinstance(k.source, str):
        raise ValueError("its source is not text")
    return (tiles, batch, 1) if "tl.program_id(1)" in k.source else (mul(tiles, batch), 1, 1)


def _flat_need(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """Pointwise: a BLOCK of elements per program over its outputs' elements (a scatter's writes: over the
    updates'). Reduction: XBLOCK rows per program over its reductions' results."""
    if k.kind is KernelKind.REDUCTION:
        block = _block(k, "XBLOCK")
        shapes = [o.type.shape for i in k.nodes if graph.nodes[i].op in _REDUCTIONS for o in graph.nodes[i].outputs]
        if not shapes:
            raise ValueError("a reduction launch computes no reduction")
    else:
        block = _block(k, "BLOCK")
        written = set(k.outputs)
        shapes = [o.type.shape for i in k.nodes for o in graph.nodes[i].outputs if o.id in written]
        shapes += [graph.nodes[i].inputs[-1].type.shape for i in k.nodes if graph.nodes[i].op is Op.SCATTER]
    return (_largest(_cdiv(_numel(s), block) for s in shapes), 1, 1)


def _matmul_need(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """BLOCK_M x BLOCK_N output tiles per batch entry; a batch that B does not vary over rides in the rows."""
    node = _anchor(graph, k, Op.MATMUL, 2)
    out, b = node.outputs[0].type.shape, node.inputs[1].type.shape
    fold = all(d == 1 for d in b[:-2])
    count = _numel(out[:-2])
    rows = mul(count, out[-2]) if fold else out[-2]
    tiles = mul(_cdiv(rows, _block(k, "BLOCK_M")), _cdiv(out[-1], _block(k, "BLOCK_N")))
    return _batched(tiles, 1 if fold else count, k)


def _conv_need(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """BLOCK_M rows (image and output position) x BLOCK_N output channels of one group per program, the groups
    on axis y; a depthwise convolution's direct kernel covers every channel on axis x."""
    node = _anchor(graph, k, Op.CONV, 3)
    out, w = node.outputs[0].type.shape, node.inputs[1].type.shape
    groups = node.attrs.get("groups", 1)
    if isinstance(groups, bool) or not isinstance(groups, int) or not isinstance(w[0], int) or groups < 1:
        raise ValueError(f"conv with groups {groups!r} and {w[0]} output channels")
    tiles = _cdiv(mul(out[0], _numel(out[2:])), _block(k, "BLOCK_M"))
    if w[1] == 1 and groups > 1:  # depthwise
        return (mul(tiles, _cdiv(w[0], _block(k, "BLOCK_N"))), 1, 1)
    return (mul(tiles, _cdiv(w[0] // groups, _block(k, "BLOCK_N"))), groups, 1)


def _attention_need(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """BLOCK_M query rows of one batch entry per program."""
    node = _anchor(graph, k, Op.SDPA, 2)
    out, lq = node.outputs[0].type.shape, node.inputs[0].type.shape[-2]
    return _batched(_cdiv(lq, _block(k, "BLOCK_M")), _numel(out[:-2]), k)


# One row per kernel kind: the grid its template launches (see grid_need).
GRID_NEEDS: dict[KernelKind, Callable[[Graph, Kernel], tuple[Size, Size, Size]]] = {
    KernelKind.POINTWISE: _flat_need,
    KernelKind.REDUCTION: _flat_need,
    KernelKind.MATMUL: _matmul_need,
    KernelKind.CONV: _conv_need,
    KernelKind.ATTENTION: _attention_need,
}
