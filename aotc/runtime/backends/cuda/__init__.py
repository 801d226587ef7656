"""The cuda backend (imported by aotc.runtime.backends on first cuda use; imports the CUDA bindings lazily).

The cuda backend: kernels of a variant's Schedule launched through NVIDIA's driver API (``cuda-bindings``,
imported on first use only), one arena slot per in-flight call, CUDA graphs replayed per shape.

``CudaBackend(driver=None, ordinal=0, graph_cache=16).prepare(variant, binaries) -> CudaProgram``;
``program.run(feeds, env, outputs="numpy" | "device")``; ``backend.close()`` frees everything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aotc.ir.launch import KernelBinary
from aotc.runtime.backends.cuda.arrays import DeviceArray, DeviceInput
from aotc.runtime.backends.cuda.backend import CudaBackend
from aotc.runtime.backends.cuda.driver import CudaError, Device, DeviceInfo
from aotc.runtime.backends.cuda.model import DeviceModel
from aotc.runtime.backends.cuda.program import CudaProgram


def probe(driver: Any = None, ordinal: int = 0) -> DeviceInfo | None:
    """The GPU ``ordinal`` when the bindings, a driver and that GPU are there; None otherwise. Never raises."""
    try:
        device = Device(driver, ordinal)
    except Exception:  # probing decides a default device: any failure just means "no usable GPU"
        return None
    try:
        return device.info
    finally:
        try:
            device.release()
        except Exception:  # releasing a context we just retained; nothing to report to a prober
            pass


def runs_here(binaries: Iterable[KernelBinary], driver: Any = None, ordinal: int = 0) -> bool:
    """Whether a GPU is present and every kernel has code it runs (``device=None`` picks cuda then)."""
    from aotc.runtime.backends.cuda.modules import can_run

    info = probe(driver, ordinal)
    if info is None:
        return False
    try:
        return can_run(list(binaries), info)
    except Exception:  # a malformed binary table means "not runnable here"; loading reports it properly
        return False


__all__ = [
    "CudaBackend",
    "CudaError",
    "CudaProgram",
    "DeviceArray",
    "DeviceInfo",
    "DeviceInput",
    "DeviceModel",
    "probe",
    "runs_here",
]
