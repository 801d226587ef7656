"""The cuda backend: ``CudaBackend.prepare(variant, binaries)`` building a ``CudaProgram`` over the loaded
model's ``DeviceModel`` (model.py)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aotc.artifact.code_checks import derive_driver_floor
from aotc.errors import ExecError, UnsupportedError
from aotc.ir.launch import KernelBinary
from aotc.ir.schedule import Schedule
from aotc.ir.variant import Variant
from aotc.runtime.backends.cuda.arrays import DeviceInput, adopt
from aotc.runtime.backends.cuda.driver import Device
from aotc.runtime.backends.cuda.model import DeviceModel
from aotc.runtime.backends.cuda.modules import check_driver_floor
from aotc.runtime.backends.cuda.program import CudaProgram
from aotc.runtime.backends.cuda.slots import release_all
from aotc.runtime.backends.cuda.states import DeviceStates
from aotc.runtime.state import StateSpec


class CudaBackend:
    """Runs variants on one GPU. ``driver``: the ``cuda.bindings.driver`` module to use (tests pass a fake);
    ``graph_cache``: how many CUDA graphs (one per concrete shape) each variant keeps, 0 for none;
    ``streams``: how many streams independent branches of a schedule may run on (1: one stream).

    Raises UnsupportedError at construction when there is no usable GPU or the bindings are missing."""

    name = "cuda"

    def __init__(
        self,
        driver: Any = None,
        ordinal: int = 0,
        *,
        graph_cache: int = 16,
        streams: int = 4,
        label: str | None = None,
    ) -> None:
        self.device = Device(driver, ordinal, label)
        self.model = DeviceModel(self.device)
        self.graph_cache = graph_cache
        self.streams = streams
        self._programs: list[CudaProgram] = []
        self.fallbacks: list[str] = []  # arch-specific kernels that did not load, so their base kernel runs
        self._closed = False

    def prepare(self, variant: Variant, binaries: Mapping[str, KernelBinary]) -> CudaProgram:
        if self._closed:
            raise ExecError("the cuda backend was closed")
        graph, schedule = variant.graph, variant.plan
        if schedule is None or not binaries:
            raise UnsupportedError(
                f"device {self.device.label!r} is not available for this artifact: its variant {graph.name!r} has no "
                "compiled kernels; recompile the model with this aotc (aotc compile) to include them, or use device='cpu'"
            )
        check_driver_floor(derive_driver_floor(binaries.values()), self.device.info, binaries.values())
        schedule = self._runnable(schedule, binaries)
        program = CudaProgram(self.model, graph, schedule, binaries, self.graph_cache, self.streams)
        self._programs.append(program)
        return program

    def _runnable(self, schedule: Schedule, binaries: Mapping[str, KernelBinary]) -> Schedule:
        """Each launch's arch launch for this GPU's architecture (its own tiles), where that code loads;
        else the launch's own kernel (a cubin built by a ptxas too new for this driver, say, falls back to the
        base kernel and its portable PTX), with a warning, since it is slower."""
        cap = self.device.info.capability
        kernels = []
        for k in schedule.kernels:
            chosen = k.for_capability(cap)
            binary = binaries.get(chosen.name)
            if chosen is not k and binary is not None:
                try:
                    self.model.kernel(binary)
                except (UnsupportedError, ExecError) as e:
                    warnings.warn(
                        f"kernel {chosen.name} for {self.device.info.arch} does not load ({e}); running its "
                        f"portable kernel {k.name} instead",
                        RuntimeWarning,
                        stacklevel=4,
                    )
                    self.fallbacks.append(chosen.name)
                    chosen = k
            kernels.append(chosen)
        return dataclasses.replace(schedule, kernels=tuple(kernels))

    def state_memory(self, specs: Sequence[StateSpec], env: Mapping[str, int], dims: tuple[int, ...]) -> DeviceStates:
        """A session's states in device memory of its own (states.py)."""
        if self._closed:
            raise ExecError("the cuda backend was closed")
        return DeviceStates(self.device, specs, env, dims)

    def read_state(self, memory: DeviceStates, index: int) -> np.ndarray:
        return memory.read(index)

    def adopt(self, value: Any) -> DeviceInput | None:
        """A GPU tensor given as an input, read in place; None for host arrays."""
        return adopt(value)

    def close(self) -> None:
        """Free every program's device memory and graphs, the weights and the modules; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:  # every program, the weights and the modules are freed even when one fails; the first error is raised
            release_all([*(p.close for p in self._programs), self.model.close])
        finally:
            self._programs.clear()
            self.device.release()

    def __enter__(self) -> CudaBackend:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<CudaBackend {self.device.info}>"
