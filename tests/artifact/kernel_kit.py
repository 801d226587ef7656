"""A small scheduled model and fake compiled kernels for the artifact's kernel-table tests (no triton compile)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

from aotc.artifact import plan_encode, write_artifact
from aotc.ir.graph import Graph
from aotc.ir.launch import SCRATCH_PARAMS, Cubin, KernelBinary, LaunchMeta
from aotc.ir.schedule import Kernel, Schedule
from aotc.ir.variant import Variant

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "make_golden.py"


@cache
def golden_model() -> tuple[Graph, Graph, Schedule]:
    """The golden model's source graph, its primitive variant and the variant's schedule."""
    from aotc.kernels.scheduler import schedule_graph
    from aotc.lowering.decompose import decompose

    spec = importlib.util.spec_from_file_location("kernel_kit_golden", GOLDEN)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    src = module.source_graph()
    variant = decompose(src)
    return src, variant, schedule_graph(variant)


def meta(k: Kernel, arch: str, shared: int = 1024) -> LaunchMeta:
    return LaunchMeta(
        name=k.name,
        arch=arch,
        num_warps=k.num_warps,
        num_ctas=1,
        shared=shared,
        global_scratch_size=0,
        global_scratch_align=1,
        profile_scratch_size=0,
        profile_scratch_align=1,
        params=(*[a.type for a in k.args], *SCRATCH_PARAMS),
        triton_version="3.9.0",
        ptx_version="8.4",
        ptxas_version="12.9",
        enable_fp_fusion=True,
        constexprs=tuple(k.constexprs),
    )


def fake_binary(k: Kernel) -> KernelBinary:
    """Cubins for sm_80 and sm_90 (its ISA sm_90a) and sm_80 PTX, with the launch metadata triton would give."""
    ptx = f".version 8.4\n.target sm_80\n.address_size 64\n.visible .entry {k.name}(\n)\n{{\n}}\n"
    cubins = (
        Cubin("sm_80", b"\x7fELF-sm80-" + k.name.encode(), meta(k, "sm_80", 1024)),
        Cubin("sm_90", b"\x7fELF-sm90-" + k.name.encode(), meta(k, "sm_90a", 2048)),
    )
    return KernelBinary(k.name, cubins, ptx, meta(k, "sm_80", 1024))


def fake_binaries(s: Schedule) -> tuple[KernelBinary, ...]:
    """One binary per distinct kernel; an arch launch's code gets its own target's cubin and PTX only."""
    out = {k.name: fake_binary(k) for k in s.kernels}
    for k in s.kernels:
        for v in k.arch_launches:
            b = fake_binary(v.kernel)
            (cubin,) = [c for c in b.cubins if c.arch == v.arch]
            out.setdefault(v.kernel.name, KernelBinary(b.name, (cubin,), b.ptx.replace("sm_80", v.arch), cubin.meta))
    return tuple(out.values())


def write(
    variant: Graph, schedule: Schedule | None, binaries: tuple[KernelBinary, ...] = (), source: Graph | None = None
) -> bytes:
    return write_artifact([Variant(variant, schedule)], source=source, binaries=binaries)


@contextmanager
def unchecked() -> Iterator[None]:
    """The writer with its plan checks off, to make files holding what the reader must refuse."""
    with mock.patch.object(plan_encode, "check_schedule"), mock.patch.object(plan_encode, "check_code"):
        yield


def with_kernel(s: Schedule, index: int, change: Callable[[Kernel], Kernel]) -> Schedule:
    kernels = list(s.kernels)
    kernels[index] = change(kernels[index])
    return _replace(s, kernels=tuple(kernels))


def _replace(s: Schedule, **changes: Any) -> Schedule:
    import dataclasses

    return dataclasses.replace(s, **changes)


replace_schedule = _replace


@contextmanager
def fence_only() -> Iterator[None]:
    """Launches run with their addresses not bounded from their sources (runtime/plan_bounds.py), so a test
    can show the address fence of the interpret backend and the fake driver stopping on its own what the
    source check refuses before any launch."""
    from aotc.runtime import plan_bounds

    with mock.patch.object(plan_bounds, "SOURCE_BOUNDS", False):
        yield


SOURCE_REFUSAL = r"line \d+ \(.*\) reaches offsets -?\d+\.\.-?\d+ of {pointer} .*, outside -?\d+\.\.-?\d+, the extents"
