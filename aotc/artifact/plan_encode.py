"""Launch plans and kernel code into the FlatBuffer (schema.fbs, versions 3-9). Used by the writer only.

``plan_kernels`` validates what the writer was given (plan_checks.py) and settles the file's kernel
table: one KernelCode per distinct kernel name, in first-use order over the variants' launches. Every launch
it writes is bound (schema 6): a digest and the extents its template derived, each distinct Extents stored
once per schedule in first-use order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import flatbuffers
import numpy as np

from aotc.artifact.code_checks import (
    ARG_KIND_CODES,
    check_arch_binaries,
    check_code,
    code_key,
    derive_driver_floor,
)
from aotc.artifact.fb_build import longs, string, strings, table_vector
from aotc.artifact.generated import ArchLaunch as FbArchLaunch
from aotc.artifact.generated import Buffer as FbBuffer
from aotc.artifact.generated import Cubin as FbCubin
from aotc.artifact.generated import Extents as FbExtents
from aotc.artifact.generated import IndexCheck as FbIndexCheck
from aotc.artifact.generated import KernelCode as FbKernelCode
from aotc.artifact.generated import Launch as FbLaunch
from aotc.artifact.generated import LaunchMeta as FbLaunchMeta
from aotc.artifact.generated import Schedule as FbSchedule
from aotc.artifact.plan_checks import ARCH_VARIANTS, KERNEL_FEATURES, check_schedule
from aotc.errors import ArtifactError
from aotc.ir.launch import KernelBinary, LaunchMeta
from aotc.ir.schedule import Extents, Kernel, Schedule
from aotc.ir.symbolic import to_sexpr
from aotc.ir.variant import Variant

U32_MAX = 2**32 - 1


@dataclass(frozen=True)
class KernelPlan:
    codes: tuple[Kernel, ...] = ()  # the first launch of each distinct kernel, in first-use order
    binaries: Mapping[str, KernelBinary] = field(default_factory=dict)  # by name: every code's, or none
    driver_floor: str = ""  # the oldest CUDA driver every binary loads on; "" with no binaries
    kernel_features: tuple[str, ...] = ()  # what the plans and kernels need (schema.fbs, version 3)


def plan_kernels(variants: Sequence[Variant], binaries: Sequence[KernelBinary]) -> KernelPlan:
    """Checks the binaries against the kernels and each variant's plan against its (verified) graph, in the order
    the reader does (code, then plans); the file's CUDA driver floor is the one its binaries need."""
    codes: dict[str, Kernel] = {}
    plans = [v.plan for v in variants]
    for i, s in enumerate(plans):
        if s is None:
            continue
        if not isinstance(s, Schedule):
            raise ArtifactError(f"variant {i} plan is a {type(s).__name__}, not a Schedule")
        for k in s.codes():
            first = codes.setdefault(k.name, k)
            if code_key(first) != code_key(k):
                raise ArtifactError(
                    f"two launches of kernel {k.name!r} differ in what reaches its binary (source, kind, args' "
                    "names and types, constexprs, warps, stages or divisibility)"
                )
    if isinstance(binaries, Mapping):
        binaries = tuple(binaries.values())
    by_name: dict[str, KernelBinary] = {}
    for b in binaries:
        if not isinstance(b, KernelBinary):
            raise ArtifactError(f"binaries must be KernelBinary objects, got {type(b).__name__}")
        if b.name not in codes:
            raise ArtifactError(f"binary {b.name!r} belongs to no kernel of the plans")
        if by_name.setdefault(b.name, b) is not b:
            raise ArtifactError(f"two binaries are named {b.name!r}")
    if by_name and len(by_name) != len(codes):
        missing = sorted(set(codes) - set(by_name))
        raise ArtifactError(f"kernels {missing[:5]} have no binary (give every kernel one, or none)")
    for name, k in codes.items():
        check_code(k, by_name.get(name), f"kernel {name!r}", bound=True)
    for i, v in enumerate(variants):
        if v.plan is not None:
            check_schedule(v.graph, v.plan, f"variant {i} schedule", bound=True)
    check_arch_binaries(plans, by_name)
    floor = derive_driver_floor(by_name.values()) if by_name else ""
    features: tuple[str, ...] = ()
    if any(s is not None for s in plans):
        features = KERNEL_FEATURES if by_name else KERNEL_FEATURES[:1]
        if any(k.arch_launches for s in plans if s is not None for k in s.kernels):
            features += (ARCH_VARIANTS,)
    return KernelPlan(tuple(codes.values()), {n: by_name[n] for n in codes if n in by_name}, floor, features)


# -- encoding ------------------------------------------------------------------------------------


def encode_codes(b: flatbuffers.Builder, plan: KernelPlan) -> int:
    return table_vector(b, [_code(b, k, plan.binaries.get(k.name)) for k in plan.codes])


def encode_schedule(b: flatbuffers.Builder, s: Schedule, code_index: Mapping[str, int]) -> int:
    extents: dict[Extents, int] = {}  # each distinct one, in first-use order (launch, then its arch launches)
    for k in s.kernels:
        for x in (k, *(v.kernel for v in k.arch_launches)):
            if x.extents is None:
                raise ArtifactError(f"launch {k.name!r}: kernel {x.name!r} has no extents")
            extents.setdefault(x.extents, len(extents))
    table = table_vector(b, [_extents(b, x) for x in extents])
    launches = table_vector(b, [_launch(b, k, code_index, extents) for k in s.kernels])
    buffers = table_vector(b, [_buffer(b, x.value, x.nbytes, x.offset, x.first, x.last) for x in s.buffers])
    arena = string(b, to_sexpr(s.arena_bytes))
    view_values = longs(b, [v.value for v in s.views])
    view_bases = longs(b, [v.base for v in s.views])
    declined = strings(b, s.declined)
    FbSchedule.Start(b)
    FbSchedule.AddLaunches(b, launches)
    FbSchedule.AddBuffers(b, buffers)
    FbSchedule.AddArenaBytes(b, arena)
    FbSchedule.AddViewValues(b, view_values)
    FbSchedule.AddViewBases(b, view_bases)
    FbSchedule.AddFlags(b, _u32(s.flags, "schedule flags"))
    FbSchedule.AddDeclined(b, declined)
    FbSchedule.AddExtents(b, table)
    return FbSchedule.End(b)


def _code(b: flatbuffers.Builder, k: Kernel, binary: KernelBinary | None) -> int:
    what = f"kernel {k.name!r}"
    name, source, kind = string(b, k.name), string(b, k.source), string(b, k.kind)
    cnames = strings(b, [c for c, _ in k.constexprs])
    cvalues = longs(b, [v for _, v in k.constexprs])
    divisible = b.CreateNumpyVector(np.array(k.divisible, dtype=np.uint32))
    arg_names = strings(b, [a.name for a in k.args])
    arg_types = strings(b, [a.type for a in k.args])
    cubins = table_vector(b, [_cubin(b, c.arch, c.data, c.meta) for c in binary.cubins] if binary else [])
    ptx = string(b, binary.ptx) if binary else None
    ptx_meta = _meta(b, binary.ptx_meta) if binary else None
    FbKernelCode.Start(b)
    FbKernelCode.AddName(b, name)
    FbKernelCode.AddKind(b, 0)  # the enum of schema 3-7: its template is kind_name
    FbKernelCode.AddSource(b, source)
    FbKernelCode.AddConstexprNames(b, cnames)
    FbKernelCode.AddConstexprValues(b, cvalues)
    FbKernelCode.AddNumWarps(b, _u32(k.num_warps, f"{what} num_warps"))
    FbKernelCode.AddNumStages(b, _u32(k.num_stages, f"{what} num_stages"))
    FbKernelCode.AddDivisible(b, divisible)
    FbKernelCode.AddArgNames(b, arg_names)
    FbKernelCode.AddArgTypes(b, arg_types)
    FbKernelCode.AddCubins(b, cubins)
    if ptx is not None and ptx_meta is not None:
        FbKernelCode.AddPtx(b, ptx)
        FbKernelCode.AddPtxMeta(b, ptx_meta)
    FbKernelCode.AddKindName(b, kind)
    return FbKernelCode.End(b)


def _cubin(b: flatbuffers.Builder, arch: str, data: bytes, meta: LaunchMeta) -> int:
    arch_off = string(b, arch)
    data_off = b.CreateByteVector(data)
    meta_off = _meta(b, meta)
    FbCubin.Start(b)
    FbCubin.AddArch(b, arch_off)
    FbCubin.AddData(b, data_off)
    FbCubin.AddMeta(b, meta_off)
    return FbCubin.End(b)


def _meta(b: flatbuffers.Builder, m: LaunchMeta) -> int:
    what = f"launch metadata of {m.name!r}"
    name, arch = string(b, m.name), string(b, m.arch)
    params = strings(b, m.params)
    triton, ptx, ptxas = string(b, m.triton_version), string(b, m.ptx_version), string(b, m.ptxas_version)
    cnames = strings(b, [c for c, _ in m.constexprs])
    cvalues = longs(b, [v for _, v in m.constexprs])
    FbLaunchMeta.Start(b)
    FbLaunchMeta.AddName(b, name)
    FbLaunchMeta.AddArch(b, arch)
    FbLaunchMeta.AddNumWarps(b, _u32(m.num_warps, what))
    FbLaunchMeta.AddNumCtas(b, _u32(m.num_ctas, what))
    FbLaunchMeta.AddShared(b, _u32(m.shared, what))
    FbLaunchMeta.AddGlobalScratchSize(b, _u32(m.global_scratch_size, what))
    FbLaunchMeta.AddGlobalScratchAlign(b, _u32(m.global_scratch_align, what))
    FbLaunchMeta.AddProfileScratchSize(b, _u32(m.profile_scratch_size, what))
    FbLaunchMeta.AddProfileScratchAlign(b, _u32(m.profile_scratch_align, what))
    FbLaunchMeta.AddParams(b, params)
    FbLaunchMeta.AddTritonVersion(b, triton)
    FbLaunchMeta.AddPtxVersion(b, ptx)
    FbLaunchMeta.AddEnableFpFusion(b, 1 if m.enable_fp_fusion else 0)
    FbLaunchMeta.AddPtxasVersion(b, ptxas)
    FbLaunchMeta.AddConstexprNames(b, cnames)
    FbLaunchMeta.AddConstexprValues(b, cvalues)
    return FbLaunchMeta.End(b)


def _launch(b: flatbuffers.Builder, k: Kernel, code_index: Mapping[str, int], extents: Mapping[Extents, int]) -> int:
    code = code_index[k.name]
    nodes = b.CreateNumpyVector(np.array(k.nodes, dtype=np.uint32))
    inputs, outputs = longs(b, k.inputs), longs(b, k.outputs)
    kinds = b.CreateNumpyVector(np.array([ARG_KIND_CODES[a.kind] for a in k.args], dtype=np.uint8))
    values = longs(b, [a.value for a in k.args])
    sizes = strings(b, [to_sexpr(a.size) for a in k.args])
    grid = strings(b, [to_sexpr(g) for g in k.grid])
    checks = table_vector(b, [_check(b, c.slot, c.input, c.op, c.low, c.high) for c in k.checks])
    fused = strings(b, k.fused)
    arch_launches = [_arch_launch(b, v.arch, code_index[v.kernel.name], v.kernel, extents) for v in k.arch_launches]
    arch_launches_off = table_vector(b, arch_launches) if arch_launches else None
    digest = string(b, k.digest)
    FbLaunch.Start(b)
    FbLaunch.AddCode(b, code)
    FbLaunch.AddNodes(b, nodes)
    FbLaunch.AddInputs(b, inputs)
    FbLaunch.AddOutputs(b, outputs)
    FbLaunch.AddArgKinds(b, kinds)
    FbLaunch.AddArgValues(b, values)
    FbLaunch.AddArgSizes(b, sizes)
    FbLaunch.AddGrid(b, grid)
    FbLaunch.AddChecks(b, checks)
    FbLaunch.AddFused(b, fused)
    if arch_launches_off is not None:
        FbLaunch.AddArchLaunches(b, arch_launches_off)
    FbLaunch.AddDigest(b, digest)
    FbLaunch.AddExtents(b, extents[k.extents])  # type: ignore[index]
    return FbLaunch.End(b)


def _arch_launch(b: flatbuffers.Builder, arch: str, code: int, k: Kernel, extents: Mapping[Extents, int]) -> int:
    arch_off = string(b, arch)
    grid_off = strings(b, [to_sexpr(g) for g in k.grid])
    digest = string(b, k.digest)
    FbArchLaunch.Start(b)
    FbArchLaunch.AddArch(b, arch_off)
    FbArchLaunch.AddCode(b, code)
    FbArchLaunch.AddGrid(b, grid_off)
    FbArchLaunch.AddDigest(b, digest)
    FbArchLaunch.AddExtents(b, extents[k.extents])  # type: ignore[index]
    return FbArchLaunch.End(b)


def _extents(b: flatbuffers.Builder, x: Extents) -> int:
    lows = strings(b, [to_sexpr(e) for e in x.lows])
    highs = strings(b, [to_sexpr(e) for e in x.highs])
    names = strings(b, [n for n, _, _ in x.ranges])
    range_lows, range_highs = longs(b, [lo for _, lo, _ in x.ranges]), longs(b, [hi for _, _, hi in x.ranges])
    requires = strings(b, [to_sexpr(e) for e in x.requires])
    FbExtents.Start(b)
    FbExtents.AddLows(b, lows)
    FbExtents.AddHighs(b, highs)
    FbExtents.AddRangeNames(b, names)
    FbExtents.AddRangeLows(b, range_lows)
    FbExtents.AddRangeHighs(b, range_highs)
    FbExtents.AddRequires(b, requires)
    return FbExtents.End(b)


def _check(b: flatbuffers.Builder, slot: int, input: str, op: str, low: object, high: object) -> int:
    offs = [string(b, x) for x in (input, op, to_sexpr(low), to_sexpr(high))]  # type: ignore[arg-type]
    FbIndexCheck.Start(b)
    FbIndexCheck.AddSlot(b, _u32(slot, "index check slot"))
    FbIndexCheck.AddInput(b, offs[0])
    FbIndexCheck.AddOp(b, offs[1])
    FbIndexCheck.AddLow(b, offs[2])
    FbIndexCheck.AddHigh(b, offs[3])
    return FbIndexCheck.End(b)


def _buffer(b: flatbuffers.Builder, value: int, nbytes: object, offset: object, first: int, last: int) -> int:
    n, o = string(b, to_sexpr(nbytes)), string(b, to_sexpr(offset))  # type: ignore[arg-type]
    FbBuffer.Start(b)
    FbBuffer.AddValue(b, value)
    FbBuffer.AddNbytes(b, n)
    FbBuffer.AddOffset(b, o)
    FbBuffer.AddFirst(b, first)
    FbBuffer.AddLast(b, last)
    return FbBuffer.End(b)


# -- helpers -------------------------------------------------------------------------------------


def _u32(x: int, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= U32_MAX:
        raise ArtifactError(f"{what}: {x!r} is not an unsigned 32-bit int")
    return x
