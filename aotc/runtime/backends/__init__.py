"""Backends run a verified variant graph. A backend is an object with a ``name`` and
``prepare(graph) -> Program``; a program's ``run(feeds, env)`` takes checked input arrays (in input
order) and the bound symbols, and returns fresh output arrays the caller owns."""

from __future__ import annotations

from aotc.errors import AotcError, UnsupportedError
from aotc.runtime.backends.base import Backend, Program
from aotc.runtime.backends.cpu import CpuBackend

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
    if kind in KNOWN_DEVICES:
        raise UnsupportedError(
            f"device {device!r} is not available: this build of aotc has no {kind} backend for this artifact; use device='cpu'"
        )
    raise AotcError(f"unknown device {device!r}; expected one of {', '.join(map(repr, KNOWN_DEVICES))} or None")


__all__ = ["KNOWN_DEVICES", "Backend", "CpuBackend", "Program", "get_backend"]
