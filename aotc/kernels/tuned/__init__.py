"""Tiles tuned offline (part of aotc.kernels, importing only aotc.ir and aotc.kernels): a table per arch
(``sm_90.json`` here) the scheduler consults before the heuristics.

The table is filled away from the compiler: scripts/tune_bundle.py compiles candidate configs of the benchmark
kernels to cubins here, the GPU check's ``tune`` step times them on a lent GPU (aotc/runtime/backends/cuda/
tune_run.py), and scripts/tune_merge.py merges the timings into the table (aotc/kernels/tuned/merge.py). Keys:
keys.py; the file, lookup order and refusals: table.py; the legal tile space: configs.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aotc.errors import UnsupportedError
from aotc.ir.graph import Graph
from aotc.ir.types import Node
from aotc.kernels.tuned.keys import kernel_key, tuning_env
from aotc.kernels.tuned.table import (
    AUTOTUNE,
    EXACT,
    HEURISTIC,
    RELAXED,
    TileChoice,
    TunedTableWarning,
    choose,
    load_table,
)

__all__ = [
    "AUTOTUNE",
    "EXACT",
    "HEURISTIC",
    "RELAXED",
    "TileChoice",
    "TunedTableWarning",
    "choose",
    "current_toolchain",
    "kernel_key",
    "load_table",
    "table_tiles",
    "tuning_target",
]


def current_toolchain(arch: str, floor: str) -> dict[str, Any] | None:
    """The toolchain this compile builds ``arch`` with, as table entries record it; None when it cannot build
    (no Triton or no ptxas: only entries with the toolchain relaxed can match)."""
    from aotc.kernels.aot import triton_version
    from aotc.kernels.toolchain import choose_toolchain

    try:
        chain = choose_toolchain(arch, floor)
        return {"triton": triton_version(), "ptxas": chain.ptxas.version, "ptx_version": chain.ptx_version}
    except UnsupportedError:
        return None


def tuning_target(arch: str, floor: str) -> tuple[dict[str, Any] | None, tuple[int, int | None]]:
    """The toolchain a compile at driver floor ``floor`` builds ``arch`` ("sm_90") with (``current_toolchain``),
    and the (compute capability, PTX version) a kernel key takes its load form from."""
    chain = current_toolchain(arch, floor)
    return chain, (int(arch.removeprefix("sm_").rstrip("a")), chain["ptx_version"] if chain else None)


def table_tiles(
    graph: Graph, root: Node | None, nodes: Iterable[int], arch: str, options: Any, group: Any = None
) -> TileChoice:
    """Where the tiles of a launch rooted at ``root`` (or computing the node group ``group`` whole: a
    recurrence) computing ``nodes`` come from on ``arch`` ("sm_90"), for a compile with ``options`` (a
    CompileOptions: its driver floor picks the toolchain, its ``tune_dims`` the shape dynamic dims are bucketed
    at)."""
    if root is None and group is None:
        return TileChoice(HEURISTIC, None, note="not tuned")
    table = load_table(arch)
    if table is None or not table.entries:  # the common case: no key, no toolchain probe
        return TileChoice(HEURISTIC, None, note=f"no tuned table for {arch}")
    dims: Mapping[str, int] = dict(getattr(options, "tune_dims", ()) or ())
    floor = getattr(options, "cuda_driver_floor", None)
    if floor is None:
        from aotc.ir.launch import DEFAULT_DRIVER_FLOOR

        floor = DEFAULT_DRIVER_FLOOR
    chain, target = tuning_target(arch, floor)
    key = kernel_key(graph, root, sorted(nodes), tuning_env(graph, dims), group, target)
    if key is None:
        return TileChoice(HEURISTIC, None, note="not tuned")
    return choose(key["template"], key, arch, chain)
