"""Backends run a verified variant graph. A backend is an object with a ``name`` and
``prepare(graph) -> Program`` (the interpret backend also takes the variant's ``Schedule``, the cuda backend
``schedule`` and ``binaries``); a program's ``run(feeds, env)`` takes checked input arrays (in input order) and
the bound symbols, and returns fresh output arrays the caller owns (cuda: ``run(..., outputs="device")`` keeps
them on the GPU). The cuda backend (aotc/runtime/backends/cuda/) is imported only when asked for."""

from __future__ import annotations

from aotc.errors import AotcError, UnsupportedError
from aotc.runtime.backends.base import Backend, Program
from aotc.runtime.backends.cpu import CpuBackend
from aotc.runtime.backends.interpret import InterpretBackend

# Devices aotc knows of; only those with a backend in this build can be picked.
KNOWN_DEVICES = ("cpu", "cuda", "interpret")


def get_backend(device: str | None) -> Backend:
    """The backend for ``device``; None picks the best available (cpu, until the cuda backend lands)."""
    if device is None:
        return CpuBackend()
    if not isinstance(device, str):
        raise AotcError(f"device must be a string such as 'cpu', got {type(device).__name__}")
    kind = device.strip().lower().split(":", 1)[0]
    if kind == "cpu":
        return CpuBackend()
    if kind == "interpret":
        return InterpretBackend()
    if kind == "cuda":
        from aotc.runtime.backends.cuda import CudaBackend  # the driver bindings load only now

        return CudaBackend(ordinal=_ordinal(device), label=device)
    if kind in KNOWN_DEVICES:
        raise UnsupportedError(
            f"device {device!r} is not available: this build of aotc has no {kind} backend for this artifact; use device='cpu'"
        )
    raise AotcError(f"unknown device {device!r}; expected one of {', '.join(map(repr, KNOWN_DEVICES))} or None")


def default_backend(binaries: object = None) -> Backend:
    """What ``device=None`` runs on once the artifact is read: cuda when a GPU is present and every kernel in
    ``binaries`` (an iterable of KernelBinary; None when the artifact has none) has code for it, else cpu.
    Probing never raises: any failure picks cpu."""
    if binaries is None:
        return CpuBackend()
    try:
        from aotc.runtime.backends.cuda import CudaBackend, runs_here

        if runs_here(binaries):  # type: ignore[arg-type]
            return CudaBackend()
    except Exception:  # a GPU that probes fine but fails to open still leaves the cpu
        pass
    return CpuBackend()


def _ordinal(device: str) -> int:
    _, _, index = device.strip().partition(":")
    if not index:
        return 0
    if not index.isdigit():
        raise AotcError(f"device {device!r}: the GPU index after 'cuda:' must be a non-negative integer")
    return int(index)


__all__ = ["KNOWN_DEVICES", "Backend", "CpuBackend", "InterpretBackend", "Program", "default_backend", "get_backend"]
