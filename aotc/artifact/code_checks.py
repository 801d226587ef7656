"""Checks on kernel code and binaries that the writer (before it writes) and the reader (after it decodes)
share: names, arg types, warps and stages, the source's ``def`` line and what it may hold (``ir.kernel_source``),
each binary's launch metadata (bounded counts, the launch ABI's parameters; from schema 6 the constexprs it was
compiled with, which a cubin bakes in: they must be its code's, so a block size changed in the file beside a
cubin that still uses the old one is refused) and the CUDA driver floor the binaries need. The launch plans that run this code are checked in ``plan_checks``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from aotc.errors import AotcError, ArtifactError
from aotc.ir.kernel_source import check_kernel_source
from aotc.ir.launch import (
    ARCH_MIN_PTX,
    MIN_DRIVER_FLOOR,
    POINTER_TYPE,
    SCRATCH_PARAMS,
    Cubin,
    KernelBinary,
    LaunchMeta,
    driver_for_ptx,
    parse_version,
    version_text,
)
from aotc.ir.schedule import ArgKind, Kernel, Schedule
from aotc.ir.templates import BY_KIND, KernelKind

FLAG_TYPE = "*i32"
SIZE_TYPES = ("i32", "i64")
ARG_TYPES = frozenset((*POINTER_TYPE.values(), *SIZE_TYPES))
_ARCH = re.compile(r"sm_[0-9]{2,3}a?")
MAX_WARPS = 32
MAX_STAGES = 16
# Bounds on the launch metadata's counts: a cluster's largest size, far more shared memory than any GPU has
# per block (228 KiB on sm_90), and scratch bytes and alignment per CTA far above what Triton asks for.
MAX_CTAS = 16
MAX_SHARED = 1 << 20
MAX_SCRATCH = 1 << 24
MAX_SCRATCH_ALIGN = 1 << 12
# An in-kernel tensor descriptor (tl.make_tensor_descriptor) compiled for sm_90 or newer is a 128-byte CUtensorMap
# the kernel writes into its CTA's global scratch (KERNELS.md: attention's q, k, v, out take 512 bytes), which the
# driver reads 64-byte aligned; below sm_90 Triton lowers descriptors to pointer math and needs none.
DESCRIPTOR_BYTES, DESCRIPTOR_ALIGN, DESCRIPTOR_ARCH = 128, 64, 90
_MAKES_DESCRIPTOR = re.compile(r"\btl\.make_tensor_descriptor\(")
# The KernelKind enum codes of schema 3-7 (schema.fbs), by the templates they name; part of the format: never
# renumber. From schema 8 a kernel's kind is stored as its template's name (KernelCode.kind_name).
LEGACY_KIND_CODES = {
    KernelKind.POINTWISE: 0,
    KernelKind.REDUCTION: 1,
    KernelKind.MATMUL: 2,
    KernelKind.CONV: 3,
    KernelKind.ATTENTION: 4,
}
ARG_KIND_CODES = {ArgKind.BUFFER: 0, ArgKind.SIZE: 1, ArgKind.FLAG: 2}


def fail(what: str, msg: str) -> ArtifactError:
    return ArtifactError(f"{what}: {msg}")


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


def check_code(
    k: Kernel, binary: KernelBinary | None, what: str, bound: bool = False, whole_source: bool = True
) -> None:
    """A kernel's code: names, types, warps, its source's ``def`` line, and its binary's launch metadata
    (``bound``: schema 6 and the writer, with the constexprs each binary was compiled with).

    ``whole_source``: also parse the source and hold it to what codegen writes (``check_kernel_source``). The
    writer does; the reader does not, because the one backend that runs source text, interpret, checks it when it
    loads (aotc/runtime/backends/interpret.py), and cpu and cuda never read it: parsing every kernel cost a
    verified load about a seventh of its decode time (8 ms of GPT-2-small's ~55 ms). Either way the source is
    bound to its launches by their digests, so a corrupted or edited source is still refused by the reader."""
    if not isinstance(k.name, str) or not k.name.isidentifier():
        raise fail(what, f"kernel name {k.name!r} is not an identifier")
    if BY_KIND.get(k.kind) is None:
        raise fail(
            what, f"kernel kind {str(k.kind)[:60]!r} is not a template of this aotc (it knows {sorted(BY_KIND)})"
        )
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
    if whole_source:
        check_kernel_source(k.source, k.name)  # only what codegen writes: the interpret backend runs this text
    if binary is not None:
        check_binary(k, binary, what, bound)


_PARAM_ANNOTATION = re.compile(r":.*$", re.S)


def source_params(source: str, name: str) -> list[str] | None:
    """The parameter names of ``def name(...)`` in ``source`` (annotations dropped); None if absent."""
    if not isinstance(source, str):
        return None
    m = re.search(rf"^def\s+{re.escape(name)}\s*\(([^)]*)\)\s*:", source, re.M)
    if m is None:
        return None
    return [_PARAM_ANNOTATION.sub("", p).strip() for p in m.group(1).split(",") if p.strip()]


def check_arch_binaries(schedules: Iterable[Schedule | None], binaries: Mapping[str, KernelBinary]) -> None:
    """With binaries stored, each arch launch's code has a cubin for the target it serves."""
    if not binaries:
        return
    for s in schedules:
        for k in s.kernels if s is not None else ():
            for v in k.arch_launches:
                b = binaries.get(v.kernel.name)
                if b is None or v.arch not in b.archs:
                    raise fail(
                        f"kernel {k.name!r} arch launch {v.arch}", f"code {v.kernel.name!r} has no {v.arch} cubin"
                    )


def check_binary(k: Kernel, b: KernelBinary, what: str, bound: bool = False) -> None:
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
        check_meta(k, c.meta, (c.arch, c.arch + "a"), f"{what} {c.arch} cubin", bound)
    if not isinstance(b.ptx, str) or not re.search(rf"\.entry\s+{re.escape(k.name)}\s*\(", b.ptx):
        raise fail(what, f"its PTX has no entry {k.name}")
    check_meta(k, b.ptx_meta, None, f"{what} PTX", bound)


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


def check_meta(k: Kernel, m: LaunchMeta, archs: Iterable[str] | None, what: str, bound: bool = False) -> None:
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
    # the runtime sizes each launch's scratch (per CTA, times the grid) and its cluster by these: bounded first
    limits = (
        ("num_ctas", m.num_ctas, MAX_CTAS),
        ("shared", m.shared, MAX_SHARED),
        ("global_scratch_size", m.global_scratch_size, MAX_SCRATCH),
        ("profile_scratch_size", m.profile_scratch_size, MAX_SCRATCH),
        ("global_scratch_align", m.global_scratch_align, MAX_SCRATCH_ALIGN),
        ("profile_scratch_align", m.profile_scratch_align, MAX_SCRATCH_ALIGN),
    )
    for name, value, top in limits:
        if value > top:
            raise fail(what, f"launch metadata {name} {value} is above {top}")
    _check_descriptor_scratch(k, m, what)
    if not m.triton_version or not m.ptx_version or not isinstance(m.enable_fp_fusion, bool):
        raise fail(what, "launch metadata lacks its versions or fp-fusion flag")
    if bound and tuple(m.constexprs) != tuple(k.constexprs):
        raise fail(
            what,
            f"it was compiled with constexprs {dict(m.constexprs)}, but its code says {dict(k.constexprs)}: a binary "
            "bakes its block sizes in, so grids and extents checked against the code's would not hold for it",
        )


def _check_descriptor_scratch(k: Kernel, m: LaunchMeta, what: str) -> None:
    """A binary for sm_90 or newer whose source makes tensor descriptors has per-CTA global scratch for each (the
    runtime sizes the launch's scratch from the metadata alone: less would let one CTA's descriptors overwrite
    the next CTA's, or run past the buffer)."""
    arch = re.fullmatch(r"sm_(\d+)a?", str(m.arch))
    count = len(_MAKES_DESCRIPTOR.findall(k.source)) if isinstance(k.source, str) else 0
    if arch is None or int(arch.group(1)) < DESCRIPTOR_ARCH or not count:
        return
    need = count * DESCRIPTOR_BYTES
    if m.global_scratch_size < need or m.global_scratch_align < DESCRIPTOR_ALIGN:
        raise fail(
            what,
            f"its source makes {count} tensor descriptors, {need} bytes of global scratch per CTA aligned to "
            f"{DESCRIPTOR_ALIGN}, but its launch metadata gives {m.global_scratch_size} bytes aligned to "
            f"{m.global_scratch_align}",
        )
