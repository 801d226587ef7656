"""Which ``ptxas`` and PTX ISA version build each target, so that an artifact loads on every driver from its
floor on (``CompileOptions.cuda_driver_floor``, default CUDA 12.4).

Why it must be chosen rather than left to Triton: Triton assembles each target with whichever ``ptxas`` it
bundles for it (3.9: CUDA 13.4 for sm_90 and newer, 12.9 below) and emits the newest PTX that ``ptxas`` knows
(9.4). A CUDA 13.0 driver cannot JIT PTX 9.4, and no CUDA 12 driver loads a cubin a CUDA 13 ``ptxas`` made.
So for each target aotc picks:

- the ``ptxas``: the newest whose CUDA major release is at most the floor's (cubins load on any driver of
  their major release from 12.0 on: CUDA's minor-version compatibility), preferring the one a user names in
  Triton's own variables (``TRITON_PTXAS_PATH``, ``TRITON_PTXAS_BLACKWELL_PATH``) when it qualifies;
- the PTX version: the newest the floor's driver JIT-compiles and that ``ptxas`` reads, but never below
  what the architecture's code needs (a GPU that new has a newer driver anyway).

Both are in the kernel cache key (the ``ptxas`` by its full version, never by path, so a cache built on one
machine is hit on another with the same Triton), and recorded in each binary's ``LaunchMeta``.
Triton's variables are read here, where their meaning is known; aotc's own settings stay in
``lowering/options.py``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aotc.errors import UnsupportedError
from aotc.ir.launch import ARCH_MIN_PTX, driver_for_ptx, parse_version, ptx_for_driver, version_text

# Triton's variables naming a ptxas to use instead of its bundled ones, in the order aotc prefers them.
PTXAS_VARIABLES = ("TRITON_PTXAS_BLACKWELL_PATH", "TRITON_PTXAS_PATH")
_BUNDLED = ("ptxas-blackwell", "ptxas")  # under triton/backends/nvidia/bin/


@dataclass(frozen=True, slots=True)
class Ptxas:
    path: str
    release: tuple[int, int]  # the CUDA release: (12, 9)
    build: str  # the full version it prints: "12.9.86", part of the cache key
    named_by: str  # the variable that named it, or "triton" for a bundled one

    @property
    def version(self) -> str:
        return version_text(self.release)


@dataclass(frozen=True, slots=True)
class Toolchain:
    """How one target is built: the ``ptxas`` and the PTX ISA version (84 means 8.4, as Triton takes it)."""

    ptxas: Ptxas
    ptx_version: int

    def key(self) -> dict[str, object]:
        return {"ptxas": self.ptxas.build, "ptx_version": self.ptx_version}


def triton_bin() -> Path | None:
    """Triton's bundled tool folder, found without importing Triton (a cache hit must stay cheap)."""
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "backends" / "nvidia" / "bin"


@functools.cache
def _ptxas_version(path: str, mtime: float) -> tuple[tuple[int, int], str] | None:
    # mtime: a ptxas replaced in place is asked again
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"release (\d+)\.(\d+), V(\d+\.\d+\.\d+)", out)
    if found is None:
        return None
    return (int(found.group(1)), int(found.group(2))), found.group(3)


def probe_ptxas(path: str, named_by: str) -> Ptxas | None:
    """The ``ptxas`` at ``path`` with its version, or None when it is missing or does not say its version."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    found = _ptxas_version(path, mtime)
    return None if found is None else Ptxas(path, found[0], found[1], named_by)


def available_ptxas() -> list[Ptxas]:
    """Every usable ``ptxas``: those Triton's variables name first, then Triton's bundled ones."""
    out: list[Ptxas] = []
    for var in PTXAS_VARIABLES:
        path = os.environ.get(var, "").strip()
        if path and (p := probe_ptxas(path, var)) is not None:
            out.append(p)
    folder = triton_bin()
    if folder is not None:
        for name in _BUNDLED:
            if (p := probe_ptxas(str(folder / name), "triton")) is not None:
                out.append(p)
    return out


def choose_toolchain(arch: str, floor: str, candidates: list[Ptxas] | None = None) -> Toolchain:
    """The ``ptxas`` and PTX version that build ``arch`` ("sm_90") for drivers from ``floor`` ("12.4") on."""
    cap = int(arch.removeprefix("sm_").rstrip("a"))
    need_ptx = ARCH_MIN_PTX.get(cap, (8, 0))
    floor_v = parse_version(floor, "the CUDA driver floor")
    candidates = available_ptxas() if candidates is None else candidates
    # A ptxas must read the PTX the architecture needs, and be of a release the floor's driver can load.
    fit = [p for p in candidates if p.release[0] <= floor_v[0] and ptx_for_driver(p.release) >= need_ptx]
    if not fit:
        have = ", ".join(f"{p.path} (CUDA {p.version})" for p in candidates) or "none found"
        need = driver_for_ptx(need_ptx) or need_ptx
        raise UnsupportedError(
            f"no ptxas can build {arch} for CUDA drivers from {floor} on: it needs a CUDA {floor_v[0]}.x ptxas of "
            f"release {version_text(need)} or newer (ptxas found: {have}); set TRITON_PTXAS_PATH to one, or "
            "choose another --cuda-driver-floor"
        )
    named = [p for p in fit if p.named_by != "triton"]
    ptxas = named[0] if named else max(fit, key=lambda p: p.release)
    ptx = max(min(ptx_for_driver(ptxas.release), ptx_for_driver(floor_v)), need_ptx)
    return Toolchain(ptxas, ptx[0] * 10 + ptx[1])
