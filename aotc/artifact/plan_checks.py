"""Checks on launch plans and kernel code that the writer (before it writes) and the reader (after it
decodes) share: a plan the writer accepts is exactly a plan the reader accepts.

Every expression parses as the graph's (no index variables), names only the variant's symbols and has
sound bounds (``ir.symbolic.bounds``: a divisor that may be <= 0 is refused). Memory-plan checks:

- each buffer's offset is a multiple of 256 for every binding of the symbols (proved with
  ``ir.symbolic.divisor`` from the symbols' ``multiple_of``; an offset that cannot be proved so is refused);
- at two bindings, every symbol at its maximum and every symbol at its minimum (each rounded to its
  ``multiple_of``), each buffer holds its value's bytes, lies inside the arena, and buffers whose
  lifetimes (``first``..``last`` launches) overlap do not overlap in memory. Guards may narrow the
  symbols further; these two bindings are the ones every symbol range contains.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

from aotc.errors import AotcError, ArtifactError, ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.launch import (
    ARCH_MIN_PTX,
    MIN_DRIVER_FLOOR,
    SCRATCH_PARAMS,
    Cubin,
    KernelBinary,
    LaunchMeta,
    driver_for_ptx,
    parse_version,
    version_text,
)
from aotc.ir.ops import Op
from aotc.ir.schedule import ALIGN, ArgKind, Kernel, KernelKind, Schedule, Size, same_launch
from aotc.ir.symbolic import SymExpr, bounds, divisor, evaluate

POINTER_TYPE = {
    DType.float32: "*fp32",
    DType.float16: "*fp16",
    DType.bfloat16: "*bf16",
    DType.int32: "*i32",
    DType.int64: "*i64",
    DType.bool: "*i1",
}
FLAG_TYPE = "*i32"
SIZE_TYPES = ("i32", "i64")
ARG_TYPES = frozenset((*POINTER_TYPE.values(), *SIZE_TYPES))
_ARCH = re.compile(r"sm_[0-9]{2,3}a?")
MAX_WARPS = 32
MAX_STAGES = 16

# Enum codes of schema.fbs; part of the format: never renumber.
KIND_CODES = {
    KernelKind.POINTWISE: 0,
    KernelKind.REDUCTION: 1,
    KernelKind.MATMUL: 2,
    KernelKind.CONV: 3,
    KernelKind.ATTENTION: 4,
}
ARG_KIND_CODES = {ArgKind.BUFFER: 0, ArgKind.SIZE: 1, ArgKind.FLAG: 2}
GRAPH_FEATURES = ("graph",)
# "kernels": launch plans and kernel code; "binaries": cubins and PTX (absent when compiled with no targets)
KERNEL_FEATURES = ("kernels", "binaries")
# Named by files whose launches carry per-target variants (schema >= 4).
ARCH_VARIANTS = "arch_variants"
KNOWN_KERNEL_FEATURES = (*KERNEL_FEATURES, ARCH_VARIANTS)
_TARGET = re.compile(r"sm_[0-9]{2,3}")


def fail(what: str, msg: str) -> ArtifactError:
    return ArtifactError(f"{what}: {msg}")


class Space:
    """A variant's symbols: their ranges, multiples and the two bindings the memory plan is checked at."""

    def __init__(self, graph: Graph) -> None:
        self.ranges = {s.name: (s.min, s.max) for s in graph.symbols}
        self.multiples = {s.name: s.multiple_of for s in graph.symbols}
        m = self.multiples
        self.at_max = {s.name: s.max // m[s.name] * m[s.name] for s in graph.symbols}
        self.at_min = {s.name: -(-s.min // m[s.name]) * m[s.name] for s in graph.symbols}

    def check(self, e: Size, what: str, nonneg: bool = False) -> tuple[int, int]:
        """``e``'s bounds; refuses unknown symbols, divisors that may be <= 0, and (``nonneg``) an expression
        whose lower bound is negative and which is negative at the symbols' max or min."""
        if isinstance(e, bool) or not isinstance(e, (int, SymExpr)):
            raise fail(what, f"expected an integer expression, got {type(e).__name__}")
        if isinstance(e, SymExpr):
            unknown = sorted(e.free_symbols() - set(self.ranges))
            if unknown:
                raise fail(what, f"expression {e} uses symbols {unknown} the variant does not declare")
        try:
            lo, hi = bounds(e, self.ranges, self.multiples)
        except ShapeError as err:
            raise fail(what, f"expression {e}: {err}") from None
        if nonneg and lo < 0:
            # interval bounds are loose for some sound expressions (cdiv(b*(s+127)*8, 1024) - b): check the two
            # bindings the memory plan is checked at
            for env in self.bindings():
                if evaluate(e, env) < 0:
                    raise fail(what, f"expression {e} is negative ({evaluate(e, env)}) at {dict(env)}")
        return lo, hi

    def bindings(self) -> tuple[Mapping[str, int], Mapping[str, int]]:
        return self.at_max, self.at_min


def graph_values(graph: Graph) -> tuple[dict[int, DType], set[int], set[int]]:
    """Each value id's dtype, the constant values and the graph inputs."""
    dtypes = {v.id: v.type.dtype for v in graph.inputs}
    consts: set[int] = set()
    for n in graph.nodes:
        for o in n.outputs:
            dtypes[o.id] = o.type.dtype
        if n.op is Op.CONSTANT:
            consts.update(o.id for o in n.outputs)
    return dtypes, consts, {v.id for v in graph.inputs}


def check_schedule(graph: Graph, s: Schedule, what: str) -> None:
    """Everything a variant's plan refers to exists in ``graph`` and its memory plan is sound."""
    space = Space(graph)
    dtypes, consts, inputs = graph_values(graph)
    outputs = {v.id for v in graph.outputs}
    if isinstance(s.flags, bool) or not isinstance(s.flags, int) or s.flags < 0:
        raise fail(what, f"flags must be a non-negative int, got {s.flags!r}")
    slots: set[int] = set()
    for i, k in enumerate(s.kernels):
        _check_launch(graph, k, space, dtypes, consts | inputs, s.flags, slots, f"{what} launch {i} ({k.name})")
    space.check(s.arena_bytes, f"{what} arena_bytes", nonneg=True)
    seen: set[int] = set()
    for j, b in enumerate(s.buffers):
        bw = f"{what} buffer {j}"
        if b.value not in dtypes or b.value in consts | inputs | outputs:
            raise fail(bw, f"value %{b.value} is not an intermediate of the graph")
        if b.value in seen:
            raise fail(bw, f"value %{b.value} has two buffers")
        seen.add(b.value)
        if not 0 <= b.first <= b.last < len(s.kernels):
            raise fail(bw, f"lifetime {b.first}..{b.last} is not within the {len(s.kernels)} launches")
        space.check(b.nbytes, f"{bw} nbytes", nonneg=True)
        space.check(b.offset, f"{bw} offset", nonneg=True)
        if divisor(b.offset, space.multiples) % ALIGN:
            raise fail(bw, f"offset {b.offset} is not provably a multiple of {ALIGN}")
    _check_arena(graph, s, space, what)
    views: set[int] = set()
    for j, v in enumerate(s.views):
        vw = f"{what} view {j}"
        if v.value not in outputs or v.value in views or v.value in seen:
            raise fail(vw, f"value %{v.value} is not a graph output stored once")
        if v.base not in dtypes:
            raise fail(vw, f"base %{v.base} is not a value of the graph")
        views.add(v.value)
    if not all(isinstance(d, str) for d in s.declined):
        raise fail(what, "declined reasons must be strings")


def _check_launch(
    graph: Graph,
    k: Kernel,
    space: Space,
    dtypes: Mapping[int, DType],
    read_only: set[int],
    flags: int,
    slots: set[int],
    what: str,
) -> None:
    n = len(graph.nodes)
    if any(not 0 <= i < n for i in k.nodes) or list(k.nodes) != sorted(set(k.nodes)):
        raise fail(what, f"nodes {list(k.nodes)[:8]} are not increasing indices below {n}")
    fused = tuple(graph.nodes[i].op.value for i in k.nodes)
    if tuple(k.fused) != fused:
        raise fail(what, f"fused ops {list(k.fused)} are not those of its nodes {list(fused)}")
    for vid in (*k.inputs, *k.outputs):
        if vid not in dtypes:
            raise fail(what, f"reads or writes value %{vid}, which is not in the graph")
    for vid in k.outputs:
        if vid in read_only:
            raise fail(what, f"writes value %{vid}, a graph input or constant")
    has_flag = False
    for j, a in enumerate(k.args):
        aw = f"{what} arg {j} ({a.name})"
        if a.kind is ArgKind.BUFFER:
            if a.value not in dtypes:
                raise fail(aw, f"value %{a.value} is not in the graph")
            if a.type != POINTER_TYPE[dtypes[a.value]]:
                raise fail(aw, f"type {a.type} does not fit value %{a.value} of dtype {dtypes[a.value].value}")
            if a.size != 0:
                raise fail(aw, f"a buffer arg has size {a.size}")
        elif a.kind is ArgKind.SIZE:
            if a.type not in SIZE_TYPES or a.value != -1:
                raise fail(aw, f"a size arg has type {a.type} and value {a.value}")
            space.check(a.size, aw)
        elif a.kind is ArgKind.FLAG:
            if a.type != FLAG_TYPE or a.value != -1 or a.size != 0:
                raise fail(aw, f"a flag arg must be {FLAG_TYPE} with no value or size")
            has_flag = True
        else:
            raise fail(aw, f"unknown arg kind {a.kind!r}")
    if len(k.grid) != 3:
        raise fail(what, f"grid has {len(k.grid)} dims, expected 3")
    for d, g in enumerate(k.grid):
        space.check(g, f"{what} grid[{d}]", nonneg=True)
    if bool(k.checks) != has_flag:
        raise fail(what, "a launch has a flag arg exactly when it has index checks")
    for c in k.checks:
        if not 0 <= c.slot < flags or c.slot in slots:
            raise fail(what, f"index check slot {c.slot} is taken or not below the schedule's {flags} flags")
        slots.add(c.slot)
        if not isinstance(c.input, str) or not isinstance(c.op, str):
            raise fail(what, "an index check's input and op must be strings")
        space.check(c.low, f"{what} check low")
        space.check(c.high, f"{what} check high")
    archs: set[str] = set()
    for v in k.variants:
        vw = f"{what} variant {v.arch!r}"
        if not isinstance(v.arch, str) or not _TARGET.fullmatch(v.arch) or v.arch in archs:
            raise fail(vw, "expected a target such as 'sm_90', once per launch")
        archs.add(v.arch)
        if v.kernel.variants or not same_launch(k, v.kernel):
            raise fail(vw, "its kernel does not take the launch's args, nodes, reads, writes and checks")
        if len(v.kernel.grid) != 3:
            raise fail(vw, f"grid has {len(v.kernel.grid)} dims, expected 3")
        for d, g in enumerate(v.kernel.grid):
            space.check(g, f"{vw} grid[{d}]", nonneg=True)


def _check_arena(graph: Graph, s: Schedule, space: Space, what: str) -> None:
    types = {o.id: o.type for n in graph.nodes for o in n.outputs}
    for env in space.bindings():
        arena = evaluate(s.arena_bytes, env)
        spans = []
        for j, b in enumerate(s.buffers):
            t = types[b.value]
            need = math.prod(evaluate(d, env) for d in t.shape) * t.dtype.itemsize
            nbytes, offset = evaluate(b.nbytes, env), evaluate(b.offset, env)
            if nbytes < need or offset + nbytes > arena:
                raise fail(
                    f"{what} buffer {j}",
                    f"at {dict(env)} it holds {nbytes} bytes at {offset} for a {need}-byte value in a {arena}-byte arena",
                )
            spans.append((offset, offset + nbytes, b.first, b.last, j))
        spans.sort()
        for x in range(len(spans)):
            _, a1, af, al, aj = spans[x]
            for y in range(x + 1, len(spans)):
                b0, _, bf, bl, bj = spans[y]
                if b0 >= a1:
                    break
                if af <= bl and bf <= al:
                    raise fail(what, f"buffers {aj} and {bj} are live together and overlap at {dict(env)}")


# -- kernel code ---------------------------------------------------------------------------------


def code_key(k: Kernel) -> tuple:
    """What a kernel's binary depends on (and what the file stores once per KernelCode)."""
    return (
        k.name,
        k.kind,
        k.source,
        tuple((a.name, a.type) for a in k.args),
        tuple(k.constexprs),
        k.num_warps,
        k.num_stages,
        tuple(k.divisible),
    )


def check_code(k: Kernel, binary: KernelBinary | None, what: str) -> None:
    """A kernel's code: names, types, warps, its source's ``def`` line, and its binary's launch metadata."""
    if not isinstance(k.name, str) or not k.name.isidentifier():
        raise fail(what, f"kernel name {k.name!r} is not an identifier")
    if k.kind not in KIND_CODES:
        raise fail(what, f"kernel kind {k.kind!r} is not a KernelKind")
    names = [a.name for a in k.args]
    cnames = [c for c, _ in k.constexprs]
    if not all(isinstance(x, str) and x.isidentifier() for x in (*names, *cnames)):
        raise fail(what, "arg and constexpr names must be identifiers")
    if len(set(names + cnames)) != len(names) + len(cnames):
        raise fail(what, f"arg and constexpr names repeat: {names + cnames}")
    for a in k.args:
        if a.type not in ARG_TYPES:
            raise fail(what, f"arg {a.name} has unknown type {a.type!r}")
    if any(isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63 for _, v in k.constexprs):
        raise fail(what, "constexpr values must be 64-bit ints")
    if not (isinstance(k.num_warps, int) and 1 <= k.num_warps <= MAX_WARPS and k.num_warps & (k.num_warps - 1) == 0):
        raise fail(what, f"num_warps {k.num_warps} is not a power of two up to {MAX_WARPS}")
    if not (isinstance(k.num_stages, int) and 1 <= k.num_stages <= MAX_STAGES):
        raise fail(what, f"num_stages {k.num_stages} is not in [1, {MAX_STAGES}]")
    div = list(k.divisible)
    if div != sorted(set(div)) or any(not 0 <= i < len(k.args) for i in div):
        raise fail(what, f"divisible {div} are not increasing arg indices below {len(k.args)}")
    params = source_params(k.source, k.name)
    if params is None:
        raise fail(what, f"its source has no `def {k.name}(...):` line")
    if params != names + cnames:
        raise fail(what, f"its source's parameters {params} are not its args then constexprs {names + cnames}")
    if binary is not None:
        check_binary(k, binary, what)


_PARAM_ANNOTATION = re.compile(r":.*$", re.S)


def source_params(source: str, name: str) -> list[str] | None:
    """The parameter names of ``def name(...)`` in ``source`` (annotations dropped); None if absent."""
    if not isinstance(source, str):
        return None
    m = re.search(rf"^def\s+{re.escape(name)}\s*\(([^)]*)\)\s*:", source, re.M)
    if m is None:
        return None
    return [_PARAM_ANNOTATION.sub("", p).strip() for p in m.group(1).split(",") if p.strip()]


def check_variant_binaries(schedules: Iterable[Schedule | None], binaries: Mapping[str, KernelBinary]) -> None:
    """With binaries stored, each variant's code has a cubin for the target it serves."""
    if not binaries:
        return
    for s in schedules:
        for k in s.kernels if s is not None else ():
            for v in k.variants:
                b = binaries.get(v.kernel.name)
                if b is None or v.arch not in b.archs:
                    raise fail(f"kernel {k.name!r} variant {v.arch}", f"code {v.kernel.name!r} has no {v.arch} cubin")


def check_binary(k: Kernel, b: KernelBinary, what: str) -> None:
    if b.name != k.name:
        raise fail(what, f"its binary is named {b.name!r}")
    archs = [c.arch for c in b.cubins]
    if len(set(archs)) != len(archs):
        raise fail(what, f"cubin targets repeat: {archs}")
    for c in b.cubins:
        if not isinstance(c, Cubin) or not isinstance(c.arch, str) or not _ARCH.fullmatch(c.arch):
            raise fail(what, f"cubin target {getattr(c, 'arch', c)!r} is not an sm_XX architecture")
        if not isinstance(c.data, bytes) or not c.data:
            raise fail(what, f"the {c.arch} cubin is empty")
        check_meta(k, c.meta, (c.arch, c.arch + "a"), f"{what} {c.arch} cubin")
    if not isinstance(b.ptx, str) or not re.search(rf"\.entry\s+{re.escape(k.name)}\s*\(", b.ptx):
        raise fail(what, f"its PTX has no entry {k.name}")
    check_meta(k, b.ptx_meta, None, f"{what} PTX")


def _images(b: KernelBinary) -> list[tuple[LaunchMeta, str]]:
    return [*((c.meta, f"{c.arch} cubin") for c in b.cubins), (b.ptx_meta, "PTX")]


def _arch_min_ptx(m: LaunchMeta) -> tuple[int, int]:
    return ARCH_MIN_PTX.get(int(str(m.arch)[3:].rstrip("a")), (0, 0))


def derive_driver_floor(binaries: Iterable[KernelBinary]) -> str:
    """The oldest CUDA driver release every image loads on, which the file states as its floor: the release
    of its newest PTX (but for PTX an architecture itself needs: a GPU that new has a newer driver anyway)
    and of its newest ptxas's major version (cubins load on any later driver of their major release)."""
    floor = MIN_DRIVER_FLOOR
    for b in binaries:
        for m, _ in _images(b):
            try:
                ptx = parse_version(m.ptx_version, "PTX version")
                ptxas = parse_version(m.ptxas_version, "ptxas version") if m.ptxas_version else None
            except AotcError as e:
                raise ArtifactError(f"kernel {b.name!r}: {e}") from None
            if ptx > _arch_min_ptx(m):
                floor = max(floor, driver_for_ptx(ptx) or floor)
            if ptxas is not None:
                floor = max(floor, (ptxas[0], 0))
    return version_text(floor)


def check_meta(k: Kernel, m: LaunchMeta, archs: Iterable[str] | None, what: str) -> None:
    if not isinstance(m, LaunchMeta):
        raise fail(what, f"launch metadata is a {type(m).__name__}")
    if m.name != k.name:
        raise fail(what, f"launch metadata names kernel {m.name!r}")
    if (archs is not None and m.arch not in archs) or not _ARCH.fullmatch(str(m.arch)):
        raise fail(what, f"launch metadata targets {m.arch!r}")
    want = (*[a.type for a in k.args], *SCRATCH_PARAMS)
    if tuple(m.params) != want:
        raise fail(what, f"params {list(m.params)} are not the args' types + 2 scratch pointers {list(want)}")
    if m.num_warps != k.num_warps:
        raise fail(what, f"num_warps {m.num_warps} != the kernel's {k.num_warps}")
    ints: Sequence[int] = (m.num_ctas, m.global_scratch_align, m.profile_scratch_align)
    if any(x < 1 for x in ints) or m.shared < 0 or m.global_scratch_size < 0 or m.profile_scratch_size < 0:
        raise fail(what, "launch metadata has a negative size or a zero count/alignment")
    if not m.triton_version or not m.ptx_version or not isinstance(m.enable_fp_fusion, bool):
        raise fail(what, "launch metadata lacks its versions or fp-fusion flag")
