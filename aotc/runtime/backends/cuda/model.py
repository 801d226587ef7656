"""What a loaded model keeps on one GPU for all its variants (``DeviceModel``): weights uploaded once and kernel
modules loaded once, shared by every variant's ``CudaProgram``."""

from __future__ import annotations

import threading

import numpy as np

from aotc.errors import ExecError
from aotc.ir.launch import KernelBinary
from aotc.runtime.backends.cuda.arrays import DeviceMemory
from aotc.runtime.backends.cuda.driver import Device
from aotc.runtime.backends.cuda.modules import LoadedKernel, load_kernel, unload
from aotc.runtime.backends.cuda.slots import release_all


class DeviceModel:
    """What a loaded model keeps on one GPU for all its variants: weights and kernel modules."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._weights: dict[str, tuple[np.ndarray, DeviceMemory | None]] = {}
        self._kernels: dict[str, tuple[KernelBinary, LoadedKernel]] = {}
        self._lock = threading.Lock()

    def weight(self, name: str, array: np.ndarray) -> int:
        """The device address of weight ``name`` (uploaded on first use; variants share it)."""
        host = np.ascontiguousarray(array)
        with self._lock:
            have = self._weights.get(name)
            if have is not None:
                if have[0] is not host and (
                    have[0].shape != host.shape or have[0].dtype != host.dtype or not np.array_equal(have[0], host)
                ):
                    raise ExecError(f"weight {name!r} differs between variants of one model")
                return have[1].ptr if have[1] is not None else 0
            mem = DeviceMemory(self.device, host.nbytes, f"weight {name!r}") if host.nbytes else None
            if mem is not None:
                self.device.upload(mem.ptr, host.ctypes.data, host.nbytes, 0)
                self.device.sync(0)
            self._weights[name] = (host, mem)
            return mem.ptr if mem is not None else 0

    def kernel(self, binary: KernelBinary) -> LoadedKernel:
        with self._lock:
            have = self._kernels.get(binary.name)
            if have is not None:
                if have[0] != binary:
                    raise ExecError(f"two different binaries are named {binary.name!r}")
                return have[1]
            loaded = load_kernel(self.device, binary)
            self._kernels[binary.name] = (binary, loaded)
            return loaded

    @property
    def weight_bytes(self) -> int:
        return sum(m.nbytes for _, m in self._weights.values() if m is not None)

    def close(self) -> None:
        with self._lock:
            weights, self._weights = self._weights, {}
            kernels, self._kernels = self._kernels, {}
        release_all(
            [
                *(mem.free for _, mem in weights.values() if mem is not None),
                *(lambda k=loaded: unload(self.device, k) for _, loaded in kernels.values()),
            ]
        )
