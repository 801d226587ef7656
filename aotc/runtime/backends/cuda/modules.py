"""Which compiled image of a kernel a GPU runs, and loading it: the cubin for the GPU's arch, else the
portable PTX JIT-compiled by the driver, else a clear error naming the GPU, its arch and what the artifact has."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.artifact.code_checks import derive_driver_floor
from aotc.errors import AotcError, UnsupportedError, VerifyError
from aotc.ir.launch import SCRATCH_PARAMS, KernelBinary, LaunchMeta, driver_for_ptx, parse_version
from aotc.ir.schedule import Kernel
from aotc.runtime.backends.cuda.driver import CudaError, Device, DeviceInfo, needs_shared_optin

# The PTX the portable fallback holds targets this arch; any GPU at or above it can JIT it.
PTX_ARCH = (8, 0)


@dataclass(frozen=True, slots=True)
class Image:
    """One loadable image: ``kind`` "cubin" or "ptx", the bytes handed to the driver and how to launch it."""

    kind: str
    arch: str
    data: bytes
    meta: LaunchMeta


def parse_arch(arch: str) -> tuple[int, int, bool]:
    """ "sm_90a" -> (9, 0, True): capability and whether the code is arch-specific (runs on that GPU only)."""
    body = arch.removeprefix("sm_")
    specific = body.endswith("a")
    digits = body.rstrip("a")
    if not digits.isdigit() or len(digits) < 2:
        raise VerifyError(f"kernel arch {arch!r} is not of the form sm_XY")
    return int(digits[:-1]), int(digits[-1]), specific


def runs_on(arch: str, capability: tuple[int, int]) -> bool:
    """A cubin for ``arch`` runs on GPUs of the same major version and at least its minor one; an
    arch-specific one ("sm_90a") on exactly that capability."""
    major, minor, specific = parse_arch(arch)
    if specific:
        return (major, minor) == capability
    return major == capability[0] and minor <= capability[1]


def ptx_driver_needs(ptx_version: str) -> tuple[int, int] | None:
    """The oldest CUDA driver (major, minor) that JIT-compiles this PTX ISA version; None when unknown."""
    try:
        return driver_for_ptx(parse_version(ptx_version))
    except AotcError:
        return None


def driver_release(info: DeviceInfo) -> tuple[int, int]:
    return info.driver_version // 1000, info.driver_version % 1000 // 10


def cubin_loads(meta: LaunchMeta, info: DeviceInfo) -> bool:
    """Whether the driver can load a cubin: one from a ptxas of a newer major CUDA release it cannot (files
    before schema 5 do not say which ptxas built theirs: the load itself then decides)."""
    if not meta.ptxas_version:
        return True
    try:
        return parse_version(meta.ptxas_version)[0] <= driver_release(info)[0]
    except AotcError:
        return False


def check_driver_floor(floor: str, info: DeviceInfo, binaries: Iterable[KernelBinary] = ()) -> None:
    """UnsupportedError when the GPU's driver is older than the artifact's floor (``""``: none recorded), naming
    the first of ``binaries`` that needs it (a Hopper attention kernel's TMA loads need PTX 8.6, for one)."""
    if not floor:
        return
    need = parse_version(floor, "the artifact's CUDA driver floor")
    if driver_release(info) < need:
        which = next((b for b in binaries if derive_driver_floor([b]) == floor), None)
        why = ""
        if which is not None:
            ptx = max((m.ptx_version for m in (which.ptx_meta, *(c.meta for c in which.cubins))), key=parse_version)
            why = f" (kernel {which.name} is PTX {ptx})"
        raise UnsupportedError(
            f"this artifact's kernels need a CUDA {floor} driver or newer{why}; {info.name} has a CUDA "
            f"{info.driver_cuda} driver: update the NVIDIA driver, or recompile with --cuda-driver-floor "
            f"{info.driver_cuda}"
        )


def choose_image(binary: KernelBinary, info: DeviceInfo) -> Image:
    """The image of ``binary`` the GPU ``info`` runs: its best cubin, else the PTX, else UnsupportedError."""
    # The cubin is filed under the requested arch ("sm_90") but its code may be arch-specific ("sm_90a",
    # in its metadata): that decides where it runs.
    fitting = [
        c for c in binary.cubins if runs_on(c.meta.arch or c.arch, info.capability) and cubin_loads(c.meta, info)
    ]
    if fitting:
        # Prefer the exact (and arch-specific) build, then the newest compatible minor version.
        best = max(fitting, key=lambda c: parse_arch(c.meta.arch or c.arch))
        return Image("cubin", best.arch, best.data, best.meta)
    if binary.ptx and info.capability >= PTX_ARCH:
        check_ptx_driver(binary.name, binary.ptx_meta, info)
        return Image("ptx", "ptx", binary.ptx.encode() + b"\0", binary.ptx_meta)
    too_new = [c for c in binary.cubins if runs_on(c.meta.arch or c.arch, info.capability)]
    if too_new:
        c = too_new[0]
        raise UnsupportedError(
            f"kernel {binary.name}'s {c.arch} cubin was built by a CUDA {c.meta.ptxas_version} ptxas, which "
            f"{info.name}'s CUDA {info.driver_cuda} driver cannot load, and the artifact has no PTX it can use "
            "instead: update the NVIDIA driver, or recompile with --cuda-driver-floor "
            f"{info.driver_cuda}"
        )
    has = ", ".join(binary.archs) or "none"
    ptx = "" if binary.ptx else " and no PTX"
    raise UnsupportedError(
        f"kernel {binary.name} has no code for {info.name} ({info.arch}): the artifact has cubins for {has}{ptx}; "
        f"recompile with --target {info.arch}"
    )


def check_ptx_driver(name: str, meta: LaunchMeta, info: DeviceInfo) -> None:
    need = ptx_driver_needs(meta.ptx_version)
    have = driver_release(info)
    if need is not None and have < need:
        raise UnsupportedError(
            f"kernel {name} is PTX {meta.ptx_version}, which needs a CUDA {need[0]}.{need[1]} driver to compile; "
            f"{info.name} has driver CUDA {info.driver_cuda}: update the NVIDIA driver, or compile for {info.arch}"
        )


def can_run(binaries: Iterable[KernelBinary], info: DeviceInfo) -> bool:
    """Whether the driver meets the binaries' floor and every kernel has an image this GPU runs (for picking
    a device)."""
    binaries = list(binaries)
    try:
        check_driver_floor(derive_driver_floor(binaries), info, binaries)
        for b in binaries:
            choose_image(b, info)
    except (UnsupportedError, VerifyError):
        return False
    return True


def check_signature(kernel: Kernel, meta: LaunchMeta) -> None:
    """The compiled parameter list must be the schedule's args then the two scratch pointers."""
    want = tuple(a.type for a in kernel.args) + SCRATCH_PARAMS
    if tuple(meta.params) != want:
        raise VerifyError(
            f"kernel {kernel.name}: its binary takes ({', '.join(meta.params)}) but the schedule passes "
            f"({', '.join(want)}); the artifact's kernels do not match its schedule"
        )
    if meta.num_warps < 1 or meta.num_ctas < 1 or meta.shared < 0:
        raise VerifyError(f"kernel {kernel.name}: bad launch metadata {meta}")


@dataclass(slots=True)
class LoadedKernel:
    name: str
    module: Any
    function: Any
    image: Image


def load_kernel(device: Device, binary: KernelBinary) -> LoadedKernel:
    """Load the image ``binary`` has for this GPU and set what its launch needs (large shared memory).

    A cubin the driver refuses (e.g. built by a newer toolkit) falls back to the PTX when there is one."""
    image = choose_image(binary, device.info)
    try:
        return load_image(device, binary.name, image)
    except CudaError as e:
        if image.kind != "cubin" or not binary.ptx or device.info.capability < PTX_ARCH:
            raise _load_error(binary.name, image, device.info, e) from None
        first = e
    ptx = Image("ptx", "ptx", binary.ptx.encode() + b"\0", binary.ptx_meta)
    check_ptx_driver(binary.name, ptx.meta, device.info)
    try:
        return load_image(device, binary.name, ptx)
    except CudaError as e:
        raise UnsupportedError(
            f"kernel {binary.name} does not load on {device.info}: its {image.arch} cubin fails with {first.name} "
            f"and its PTX {ptx.meta.ptx_version} with {e.name}"
        ) from None


def _load_error(name: str, image: Image, info: DeviceInfo, e: CudaError) -> UnsupportedError:
    return UnsupportedError(
        f"kernel {name} does not load on {info}: its {image.arch} {image.kind} (PTX {image.meta.ptx_version}, "
        f"Triton {image.meta.triton_version}) fails with {e.name}"
    )


def load_image(device: Device, name: str, image: Image) -> LoadedKernel:
    """Load exactly ``image`` (no fallback) and set what its launch needs; CudaError when the driver refuses it."""
    drv = device.drv
    device.make_current()
    # Handed over by address: every version of the bindings takes an int for a host pointer.
    buf = np.frombuffer(image.data, np.uint8)
    module = device.get("cuModuleLoadData", drv.cuModuleLoadData(buf.ctypes.data))
    try:
        function = device.get("cuModuleGetFunction", drv.cuModuleGetFunction(module, image.meta.name.encode()))
        shared = image.meta.shared
        if needs_shared_optin(shared):
            if shared > device.info.shared_optin:
                raise UnsupportedError(
                    f"kernel {name} needs {shared} bytes of shared memory; {device.info} allows "
                    f"{device.info.shared_optin} per block"
                )
            attr = drv.CUfunction_attribute
            static = device.get(
                "cuFuncGetAttribute", drv.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function)
            )
            device.check(
                "cuFuncSetAttribute",
                drv.cuFuncSetAttribute(
                    function, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, device.info.shared_optin - static
                ),
            )
    except BaseException:
        device.check("cuModuleUnload", drv.cuModuleUnload(module))
        raise
    return LoadedKernel(name, module, function, image)


def unload(device: Device, kernel: LoadedKernel) -> None:
    device.make_current()
    device.check("cuModuleUnload", device.drv.cuModuleUnload(kernel.module))
