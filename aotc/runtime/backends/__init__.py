"""The backends that run a verified variant (imported by aotc.runtime only; import aotc.ir, aotc.artifact).

Backends run a verified variant. A backend is an object with a ``name`` and ``prepare(variant, binaries) ->
Program`` (base.py: the variant's graph and launch plan, and the artifact's kernel binaries by name, empty when it
has none; the cpu backends read the graph only); a program's ``run(feeds, env)`` takes checked input arrays (in
input order) and the bound symbols, and returns fresh output arrays the caller owns (cuda: ``run(...,
outputs="device")`` keeps them on the GPU). The cuda backend (aotc/runtime/backends/cuda/) is imported only when asked for.

``cpu`` is onnxruntime over the artifact's verified graphs, written as ONNX at load (backends/onnxrt.py), when
onnxruntime is installed, else the numpy references (backends/cpu.py), which ``reference`` picks explicitly."""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any, NamedTuple

from aotc.errors import AotcError, UnsupportedError
from aotc.runtime.backends.base import Backend, Program
from aotc.runtime.backends.cpu import CpuBackend
from aotc.runtime.backends.interpret import InterpretBackend

# Devices aotc knows of; only those with a backend in this build can be picked.
KNOWN_DEVICES = ("cpu", "reference", "cuda", "interpret")
ONNXRUNTIME_HINT = "pip install 'aotc[cpu]'"


class CpuSettings(NamedTuple):
    """How the cpu backend runs onnxruntime: its intra-op ``threads`` (None: its default) and whether they
    ``spin`` waiting for work between calls (its default; a server turns it off, see ``load``)."""

    threads: int | None = None
    spin: bool = True


ORT_DEFAULTS = CpuSettings()


def get_backend(device: str | None, artifact: Any = None, *, cpu: CpuSettings = ORT_DEFAULTS) -> Backend:
    """The backend for ``device`` and ``artifact`` (an Artifact; None: the cpu runs the references); None picks cpu.
    ``cpu``: how the cpu backend runs onnxruntime."""
    if device is None:
        return cpu_backend(artifact, cpu)
    if not isinstance(device, str):
        raise AotcError(f"device must be a string such as 'cpu', got {type(device).__name__}")
    kind = device.strip().lower().split(":", 1)[0]
    if kind == "cpu":
        return cpu_backend(artifact, cpu)
    if kind == "reference":
        return CpuBackend(name="reference")
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


def default_backend(binaries: object = None, artifact: Any = None, *, cpu: CpuSettings = ORT_DEFAULTS) -> Backend:
    """What ``device=None`` runs on once the artifact is read: cuda when a GPU is present and every kernel in
    ``binaries`` (an iterable of KernelBinary; None when the artifact has none) has code for it, else cpu.
    Probing never raises: any failure picks cpu."""
    if binaries is None:
        return cpu_backend(artifact, cpu)
    try:
        from aotc.runtime.backends.cuda import CudaBackend, runs_here

        if runs_here(binaries):  # type: ignore[arg-type]
            return CudaBackend()
    except Exception:  # a GPU that probes fine but fails to open still leaves the cpu
        pass
    return cpu_backend(artifact, cpu)


def cpu_backend(artifact: Any = None, cpu: CpuSettings = ORT_DEFAULTS) -> Backend:
    """onnxruntime over the artifact's graphs when it is installed, else the numpy references (and one warning
    says what to install). A variant with an op that has no ONNX form runs on the references either way."""
    if artifact is None:
        return CpuBackend()
    if importlib.util.find_spec("onnxruntime") is None:
        warnings.warn(
            f"aotc: device='cpu' runs the numpy references (slow): {ONNXRUNTIME_HINT} to run it on onnxruntime",
            RuntimeWarning,
            stacklevel=3,
        )
        return CpuBackend()
    from aotc.runtime.backends.onnxrt import OrtBackend

    # The source graph runs only when the file binds it to the variants (the reader checked its digest).
    source = artifact.source if getattr(artifact, "source_bound", False) else None
    return OrtBackend(
        artifact.constants, threads=cpu.threads, spin=cpu.spin, variants=len(artifact.variants), source=source
    )


def _ordinal(device: str) -> int:
    _, _, index = device.strip().partition(":")
    if not index:
        return 0
    if not index.isdigit():
        raise AotcError(f"device {device!r}: the GPU index after 'cuda:' must be a non-negative integer")
    return int(index)


__all__ = [
    "KNOWN_DEVICES",
    "Backend",
    "CpuBackend",
    "CpuSettings",
    "InterpretBackend",
    "Program",
    "cpu_backend",
    "default_backend",
    "get_backend",
]
