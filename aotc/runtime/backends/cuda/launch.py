"""Launching one kernel of a schedule: a loaded function, its block and shared memory, and its parameters
packed into a reusable buffer (one ``struct.pack_into`` per launch; the pointer array never changes)."""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any

from aotc.errors import ExecError
from aotc.ir.schedule import Kernel
from aotc.runtime.backends.cuda.driver import Device
from aotc.runtime.backends.cuda.modules import LoadedKernel

# Every parameter gets an 8-byte slot; the driver reads as many bytes as the parameter's type has
# (little-endian, so a 4-byte int sits in the slot's first half).
_SLOT = 8
_FORMATS = {"i32": "i4x", "i64": "q", "fp32": "f4x"}
_MAX_GRID = (2**31 - 1, 65535, 65535)


@dataclass(slots=True)
class Params:
    raw: Any  # the values, one slot each
    pointers: Any  # void*[n]: each slot's address
    address: int  # of ``pointers``: what cuLaunchKernel's kernelParams takes

    def __init__(self, count: int) -> None:
        self.raw = ctypes.create_string_buffer(_SLOT * max(count, 1))
        base = ctypes.addressof(self.raw)
        self.pointers = (ctypes.c_void_p * max(count, 1))(*(base + _SLOT * i for i in range(count)))
        self.address = ctypes.addressof(self.pointers)


class Launch:
    """One kernel of the schedule bound to its loaded function."""

    def __init__(self, kernel: Kernel, loaded: LoadedKernel) -> None:
        meta = loaded.image.meta
        self.kernel = kernel
        self.function = loaded.function
        self.block = meta.threads
        self.shared = meta.shared
        self.num_ctas = meta.num_ctas
        self.global_scratch = (meta.global_scratch_size, max(meta.global_scratch_align, 1))
        self.profile_scratch = (meta.profile_scratch_size, max(meta.profile_scratch_align, 1))
        self.count = len(meta.params)
        self.packer = struct.Struct("<" + "".join("Q" if t.startswith("*") else _FORMATS[t] for t in meta.params))

    def check_grid(self, grid: tuple[int, int, int]) -> None:
        full = (grid[0] * self.num_ctas, grid[1], grid[2])
        for axis, (n, top) in enumerate(zip(full, _MAX_GRID)):
            if n > top:
                raise ExecError(
                    f"kernel {self.kernel.name}: grid {full} exceeds the GPU's limit of {top} on axis {'xyz'[axis]}"
                )

    def scratch_bytes(self, grid: tuple[int, int, int]) -> tuple[int, int]:
        """(global, profile) scratch bytes for a launch over ``grid`` (KERNELS.md: per CTA)."""
        ctas = grid[0] * grid[1] * grid[2] * self.num_ctas
        return ctas * self.global_scratch[0], ctas * self.profile_scratch[0]

    def pack(self, params: Params, values: list[Any]) -> None:
        try:
            self.packer.pack_into(params.raw, 0, *values)
        except struct.error as e:
            raise ExecError(f"kernel {self.kernel.name}: a parameter does not fit its type: {e}") from None

    def args(self, grid: tuple[int, int, int], params: Params) -> tuple[Any, ...]:
        """What ``launch_args`` passes for one prepared launch: its grid and parameter buffer (and, for a cluster
        kernel, its launch config made once, given its stream per launch)."""
        if self.num_ctas == 1:
            return (self.function, grid[0], grid[1], grid[2], self.block, params.address, bool(grid[0] and grid[1]
                    and grid[2]))  # fmt: skip
        return (None, grid, params.address, bool(grid[0] and grid[1] and grid[2]))

    def launch_args(self, device: Device, stream: Any, args: tuple[Any, ...]) -> bool:
        """Launch with prepared ``args`` on ``stream``; False when its grid is empty (nothing launched)."""
        if not args[-1]:
            return False
        drv = device.drv
        if self.num_ctas == 1:
            f, gx, gy, gz, block, address, _ = args
            result = drv.cuLaunchKernel(f, gx, gy, gz, block, 1, 1, self.shared, stream, address, 0)
            if result[0] != device._success:
                device.check(f"cuLaunchKernel({self.kernel.name}, grid={(gx, gy, gz)})", result)
            return True
        self._cluster_launch(device, stream, args[1], args[2])
        return True

    def launch(
        self, device: Device, stream: Any, grid: tuple[int, int, int], params: Params, values: list[Any]
    ) -> None:
        """Pack ``values`` into ``params`` and launch (profiling's per-kernel timing)."""
        if not grid[0] or not grid[1] or not grid[2]:
            return
        self.pack(params, values)
        self.launch_args(device, stream, self.args(grid, params))

    def _cluster_launch(self, device: Device, stream: Any, grid: tuple[int, int, int], address: int) -> None:
        # num_ctas > 1 was compiled as an explicit cluster of num_ctas CTAs along x.
        drv = device.drv
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x = self.num_ctas
        attr.value.clusterDim.y = 1
        attr.value.clusterDim.z = 1
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid[0] * self.num_ctas, grid[1], grid[2]
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.block, 1, 1
        cfg.sharedMemBytes = self.shared
        cfg.hStream = stream
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        device.check(
            f"cuLaunchKernelEx({self.kernel.name}, grid={grid}, cluster={self.num_ctas})",
            drv.cuLaunchKernelEx(cfg, self.function, address, 0),
        )
