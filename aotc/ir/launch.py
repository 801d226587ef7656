"""What a compiled kernel needs at launch, recorded at compile time so the runtime never asks Triton.

The artifact stores one ``KernelBinary`` per kernel of a ``Schedule``: a cubin per requested GPU
architecture, each with its ``LaunchMeta``, plus PTX for the portable fallback. Pure data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from aotc.errors import AotcError, UnsupportedError
from aotc.ir.dtypes import DType

# Triton's tensor-core kernels need Ampere or newer.
MIN_CAPABILITY = 80
_ARCH = re.compile(r"sm_(\d{2,3})a?$")

# A buffer argument's Triton signature type, by the dtype of the value it points to (codegen writes it, the reader
# checks it).
POINTER_TYPE = {
    DType.float32: "*fp32",
    DType.float16: "*fp16",
    DType.bfloat16: "*bf16",
    DType.int32: "*i32",
    DType.int64: "*i64",
    DType.bool: "*i1",
}

# The two pointers Triton appends to every kernel's parameters (global scratch, profile scratch):
# null when the matching scratch size is 0, else a buffer of grid * num_ctas * size bytes.
SCRATCH_PARAMS = ("*i8", "*i8")


@dataclass(frozen=True, slots=True)
class LaunchMeta:
    """How to launch one compiled kernel for one architecture."""

    name: str  # the entry function's name in the cubin / PTX
    arch: str  # the ISA the code targets, from its PTX: "sm_80", "sm_90a", ...
    num_warps: int  # block = 32 * num_warps threads
    num_ctas: int  # grid x is multiplied by this; > 1 on sm_90 needs a cluster launch
    shared: int  # dynamic shared memory bytes (> 48 KiB needs the max-dynamic-shared attribute)
    global_scratch_size: int
    global_scratch_align: int
    profile_scratch_size: int
    profile_scratch_align: int
    params: tuple[str, ...]  # every parameter's type in order: the kernel's args, then SCRATCH_PARAMS
    triton_version: str
    ptx_version: str  # e.g. "8.7"; the driver must support it to JIT the PTX or load its cubin
    enable_fp_fusion: bool  # fused multiply-add contraction: pinned, since it changes the last bits
    # The CUDA release of the ptxas that assembled the cubin ("12.9"): a driver of an older major release
    # cannot load it. "" in files older than schema 5, which did not record it.
    ptxas_version: str = ""
    # The constexprs the binary was compiled with (it bakes them in), by name in the code's order; () in files
    # older than schema 6, which did not record them.
    constexprs: tuple[tuple[str, int], ...] = ()

    @property
    def threads(self) -> int:
        return 32 * self.num_warps


@dataclass(frozen=True, slots=True)
class Cubin:
    """Machine code for one requested architecture (``arch``: "sm_80", "sm_90", ...)."""

    arch: str
    data: bytes  # an ELF image for cuModuleLoadData
    meta: LaunchMeta


@dataclass(frozen=True, slots=True)
class KernelBinary:
    """A kernel compiled ahead of time. ``ptx`` is sm_80 PTX, which newer GPUs can JIT (sm_90a PTX
    runs on Hopper only), launched with ``ptx_meta`` where no cubin fits the device."""

    name: str
    cubins: tuple[Cubin, ...]
    ptx: str
    ptx_meta: LaunchMeta

    def cubin(self, arch: str) -> Cubin:
        for c in self.cubins:
            if c.arch == arch:
                return c
        raise KeyError(f"kernel {self.name} has no cubin for {arch}; it has {[c.arch for c in self.cubins]}")

    @property
    def archs(self) -> tuple[str, ...]:
        return tuple(c.arch for c in self.cubins)


def check_targets(targets: Sequence[str]) -> tuple[str, ...]:
    """Validated, de-duplicated ``sm_XY`` names (``sm_90a`` reads as ``sm_90``), in the order given."""
    if isinstance(targets, str) or not targets:
        raise AotcError(f"targets must be a non-empty list such as ['sm_80', 'sm_90'], got {targets!r}")
    out: list[str] = []
    for t in targets:
        m = _ARCH.match(t) if isinstance(t, str) else None
        if m is None:
            raise AotcError(f"unknown GPU target {t!r}; expected a name such as 'sm_80' or 'sm_90'")
        if int(m.group(1)) < MIN_CAPABILITY:
            raise UnsupportedError(f"GPU target {t!r} is not supported; aotc kernels need sm_{MIN_CAPABILITY} or newer")
        name = f"sm_{m.group(1)}"
        if name not in out:
            out.append(name)
    return tuple(out)


def capability(target: str) -> int:
    """80 for "sm_80": the compute capability a checked target names."""
    return int(check_targets([target])[0].removeprefix("sm_"))


# -- CUDA driver releases and the PTX ISA versions they JIT-compile ------------------------------------------
# One table for the compiler (which PTX version and ptxas serve a driver floor) and the runtime (whether the
# driver in hand can load an image). PTX 7.m shipped with CUDA 11.m, 8.0-8.5 with 12.0-12.5 (12.6 added
# none), 8.6-8.8 with 12.7-12.9, 9.m with 13.m.

# The oldest driver an artifact may declare: Triton's bundled ptxas is 12.x or newer, and Hopper code needs PTX 8.0.
MIN_DRIVER_FLOOR = (12, 0)
DEFAULT_DRIVER_FLOOR = "12.4"  # R550: what many servers still run
# The oldest PTX ISA each GPU architecture's code can be written in (sm_90a: wgmma needs 8.0).
ARCH_MIN_PTX = {80: (7, 0), 86: (7, 1), 87: (7, 4), 89: (7, 8), 90: (8, 0), 100: (8, 6), 103: (8, 8), 120: (8, 7)}


def parse_version(text: str, what: str = "CUDA version") -> tuple[int, int]:
    """ "12.4" -> (12, 4); AotcError naming ``what`` for anything else."""
    m = re.fullmatch(r"\s*(\d{1,3})\.(\d{1,2})\s*", text) if isinstance(text, str) else None
    if m is None:
        raise AotcError(f"{what} must be MAJOR.MINOR such as '12.4', got {text!r}")
    return int(m.group(1)), int(m.group(2))


def version_text(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def driver_for_ptx(ptx: tuple[int, int]) -> tuple[int, int] | None:
    """The oldest CUDA driver release that JIT-compiles PTX ISA ``ptx``; None for an ISA this table lacks."""
    major, minor = ptx
    if major == 7:
        return 11, minor
    if major == 8:
        return 12, minor if minor <= 5 else minor + 1
    if major >= 9:
        return major + 4, minor
    return None


def ptx_for_driver(cuda: tuple[int, int]) -> tuple[int, int]:
    """The newest PTX ISA a CUDA ``cuda`` driver (or ptxas) handles: the inverse of ``driver_for_ptx``."""
    major, minor = cuda
    if major <= 11:
        return 7, minor
    if major == 12:
        return 8, minor if minor <= 5 else minor - 1
    return major - 4, minor


def check_driver_floor(text: str) -> str:
    """A validated ``--cuda-driver-floor`` value, normalized ("12.4")."""
    floor = parse_version(text, "the CUDA driver floor")
    if floor < MIN_DRIVER_FLOOR:
        raise UnsupportedError(
            f"the CUDA driver floor {text!r} is below the oldest aotc can build for "
            f"({version_text(MIN_DRIVER_FLOOR)}: Triton's ptxas is CUDA 12 or newer)"
        )
    return version_text(floor)
