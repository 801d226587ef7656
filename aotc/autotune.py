"""Autotuning (``aotc compile --autotune``): contraction tiles measured on the compiling machine's GPU. It sits
with the compiler, above kernels and runtime, since it needs both (DESIGN section 2).

With no GPU, heuristics choose every kernel's tiles (ir/tiles.py, kernels/attention.py) and a
newer target gets its own heuristic arch launch (kernels/scheduler.py). With a GPU at compile time, ``autotune`` times a
short list of candidate tiles for each matmul, conv (implicit GEMM) and attention launch, at one tuning
shape (each dim at its maximum unless given), and records each launch's fastest kernel as its
``ArchLaunch`` for the GPU's target: GPUs running that target's code launch it, every other GPU keeps
the heuristic kernels. The heuristic config is always candidate 0, so tuning never records a slower
kernel than the one it replaces (at the tuning shape).

Candidates are timed together: candidate ``j`` of every tuned launch goes into one full plan, which
runs on the GPU (the cuda backend) while each launch is timed alone between two events
(runtime/backends/cuda/profile.py). A candidate that does not compile, or a plan that does not load or
run, counts as never faster.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from aotc.errors import AotcError, UnsupportedError
from aotc.ir.digest import seal
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.launch import KernelBinary, capability
from aotc.ir.ops import Op
from aotc.ir.ops.reduce import dot_precision
from aotc.ir.schedule import ArchLaunch, Kernel, Schedule, same_launch
from aotc.ir.symbolic_values import evaluate
from aotc.ir.templates import template
from aotc.ir.tiles import DEFAULT_SHARED, MIN_DOT_BLOCK, SHARED_LIMIT, TileConfig, matmul_config, upper
from aotc.ir.variant import Variant
from aotc.kernels.attention import AttentionConfig, attention_config, attention_shape
from aotc.kernels.conv import conv_shape
from aotc.kernels.matmul import DOT_DTYPES, matmul_shape

# (block_m, block_n, block_k for 16-bit inputs, warps, stages): Triton's matmul tutorial and Inductor's
# mm configs. fp32 halves block_k, as the heuristics do.
MATMUL_CANDIDATES = (
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 8, 3),
    (128, 128, 32, 4, 4),
    (64, 256, 32, 4, 4),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (64, 64, 64, 4, 3),
    (128, 32, 32, 4, 4),
    (32, 64, 32, 2, 5),
    (16, 128, 128, 4, 3),
    (16, 64, 256, 4, 3),
)
# (block_m, block_n, warps, stages): FlashAttention-2's and Triton's fused-attention tutorial's tiles.
ATTENTION_CANDIDATES = (
    (128, 128, 8, 2),
    (128, 64, 8, 3),
    (128, 64, 4, 3),
    (128, 32, 4, 3),
    (64, 64, 4, 3),
    (64, 32, 4, 3),
    (64, 128, 8, 2),
    (32, 32, 4, 2),
)

Tile = TileConfig | AttentionConfig
Measure = Callable[[Graph, Schedule, Mapping[str, KernelBinary], Sequence[np.ndarray], Mapping[str, int]], list[float]]
Compile = Callable[[Sequence[Kernel], Sequence[str]], Mapping[str, KernelBinary]]


@dataclass(frozen=True)
class LaunchTuning:
    """One tuned launch: each candidate's tiles and median time (inf: it failed), and the winner."""

    launch: str  # the launch's kernel name in the heuristic plan
    candidates: tuple[tuple[str, float], ...]  # (tiles as text, ms); candidate 0 is the heuristic one
    winner: int
    index: int = -1  # the launch's position in the schedule

    @property
    def speedup(self) -> float:
        best, base = self.candidates[self.winner][1], self.candidates[0][1]
        return base / best if best > 0 and math.isfinite(base) else 1.0


@dataclass(frozen=True)
class TuneReport:
    device: str
    arch: str  # the target whose arch launches were recorded
    dims: dict[str, int]
    launches: tuple[LaunchTuning, ...]

    def lines(self) -> list[str]:
        where = ", ".join(f"{k}={v}" for k, v in self.dims.items()) or "static shapes"
        out = [f"autotuned on {self.device} for {self.arch} at {where}: {len(self.launches)} launches"]
        for t in self.launches:
            tiles, ms = t.candidates[t.winner]
            base = t.candidates[0][1]
            keep = "heuristic kept" if t.winner == 0 else f"{t.speedup:.2f}x over the heuristic ({base:.4f} ms)"
            out.append(f"  {t.launch}: {tiles}, {ms:.4f} ms, {keep}; {len(t.candidates)} candidates")
        return out

    def to_meta(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "arch": self.arch,
            "dims": self.dims,
            "launches": [
                {"launch": t.launch, "tiles": t.candidates[t.winner][0], "ms": _finite(t.candidates[t.winner][1]),
                 "heuristic_ms": _finite(t.candidates[0][1]), "candidates": len(t.candidates)}
                for t in self.launches
            ],
        }  # fmt: skip


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def autotune(
    graph: Graph,
    schedule: Schedule,
    targets: Sequence[str],
    *,
    dims: Mapping[str, int] | None = None,
    driver: Any = None,
    measure: Measure | None = None,
    compile: Compile | None = None,
    repeats: int = 10,
    driver_floor: str | None = None,
) -> tuple[Schedule, TuneReport]:
    """``schedule`` with each tuned launch's fastest kernel as its arch launch for this GPU's target.

    ``dims`` binds the graph's symbols for the timing (default: each at its maximum). ``measure`` times
    every launch of a plan (default: the cuda backend's per-kernel profile on GPU 0 through ``driver``);
    ``compile`` builds binaries for one target (default: ``compile_kernels``). ``driver_floor``: the compile's
    CUDA driver floor (default: aotc's), which picks the PTX the candidates are emitted and built for: from 12.7
    on, sm_90 attention candidates load through tensor descriptors, as the compiled artifact's kernels do.
    """
    from aotc.runtime.backends.cuda import probe

    info = probe(driver)
    if info is None:
        raise UnsupportedError(
            "--autotune measures kernels on an NVIDIA GPU, and this machine has none usable (no driver, no GPU, or "
            "cuda-bindings not installed: pip install 'aotc[cuda]'); compile without it to use the heuristic tiles"
        )
    arch = _target_for(info.capability, targets)
    env = tuning_env(graph, dims)
    feeds = tuning_feeds(graph, env)
    measure = measure or _cuda_measure(driver, repeats)
    compile = compile or functools.partial(_compile, floor=driver_floor)
    cap = capability(arch)
    tuned = {i: tile_candidates(graph, k, cap) for i, k in enumerate(schedule.kernels) if is_tunable(graph, k)}
    if not tuned:
        return schedule, TuneReport(info.name, arch, dict(env), ())
    from aotc.kernels.scheduler import schedule_graph

    rounds = max(len(c) for c in tuned.values())
    times: dict[int, list[float]] = {i: [] for i in tuned}
    kernels: dict[int, list[Kernel | None]] = {i: [] for i in tuned}
    for j in range(rounds):
        tiles = {i: c[j] for i, c in tuned.items() if j < len(c) and c[j] is not None}
        try:
            plan = schedule_graph(graph, SimpleNamespace(targets=(arch,), cuda_driver_floor=driver_floor), tiles)
        except UnsupportedError:
            plan = None
        ran = _run_round(graph, schedule, plan, j, arch, tuned, compile, measure, feeds, env) if plan else None
        for i in tuned:
            ok = ran is not None and j < len(tuned[i])
            times[i].append(ran[0][i] if ok else math.inf)  # type: ignore[index]
            kernels[i].append(ran[1][i] if ok else None)  # type: ignore[index]
    out = list(schedule.kernels)
    report = []
    for i, cands in tuned.items():
        best = min(range(len(cands)), key=lambda j: (times[i][j], j))
        text = [_tiles_text(kernels[i][j]) if kernels[i][j] is not None else "failed" for j in range(len(cands))]
        report.append(LaunchTuning(schedule.kernels[i].name, tuple(zip(text, times[i][: len(cands)])), best, i))
        if best == 0 or not math.isfinite(times[i][best]):
            continue
        k = out[i]
        others = tuple(v for v in k.arch_launches if v.arch != arch)
        # the winner was sealed in its candidate plan under another name: sealed again as this launch's arch launch
        winner = seal(graph, kernels[i][best])  # type: ignore[arg-type]
        out[i] = k.replace(arch_launches=(*others, ArchLaunch(arch, winner)))
    return dataclasses.replace(schedule, kernels=tuple(out)), TuneReport(info.name, arch, dict(env), tuple(report))


def autotuned_sources(schedule: Schedule, report: TuneReport) -> dict[tuple[int, str], Any]:
    """Where the tuned launches' tiles for the GPU's target come from now (the compiler's ``tile_sources``): a
    measured winner here is ``autotune``; a launch that kept its heuristic keeps the scheduler's record."""
    from aotc.kernels.tuned import AUTOTUNE, TileChoice

    out: dict[tuple[int, str], Any] = {}
    for t in report.launches:
        if t.winner != 0 and 0 <= t.index < len(schedule.kernels):
            tiles, ms = t.candidates[t.winner]
            out[t.index, report.arch] = TileChoice(AUTOTUNE, None, report.device, ms, _finite(t.candidates[0][1]),
                                                   tiles)  # fmt: skip
    return out


def _run_round(
    graph: Graph,
    base: Schedule,
    plan: Schedule,
    j: int,
    arch: str,
    tuned: Mapping[int, list[Tile | None]],
    compile: Compile,
    measure: Measure,
    feeds: Sequence[np.ndarray],
    env: Mapping[str, int],
) -> tuple[dict[int, float], dict[int, Kernel]] | None:
    """Candidate ``j`` of every tuned launch in one plan: each launch's time and kernel, or None if it failed."""
    if len(plan.kernels) != len(base.kernels):
        return None
    kernels = list(plan.kernels)
    for i in tuned:
        k = kernels[i]
        if not same_launch(base.kernels[i], k):
            return None
        # Named for the launch, the target and the candidate: the winner keeps this name, so its binary
        # is in the compile cache already when the artifact's kernels are compiled.
        kernels[i] = seal(graph, _renamed(k, f"{base.kernels[i].name}_{arch.replace('_', '')}t{j}"))
    plan = dataclasses.replace(plan, kernels=tuple(kernels))
    try:
        binaries = compile(plan.kernels, (arch,))
        ms = measure(graph, plan, binaries, feeds, env)
    except AotcError:
        return None
    return {i: ms[i] for i in tuned}, {i: kernels[i] for i in tuned}


def _renamed(k: Kernel, name: str) -> Kernel:
    return k.replace(name=name, source=k.source.replace(f"def {k.name}(", f"def {name}(", 1))


def _tiles_text(k: Kernel) -> str:
    return " ".join(f"{n}={v}" for n, v in k.constexprs) + f" warps={k.num_warps} stages={k.num_stages}"


def _target_for(cap: tuple[int, int], targets: Sequence[str]) -> str:
    """The newest target whose code this GPU runs (same major version, minor not above its own)."""
    fits = [t for t in targets if capability(t) // 10 == cap[0] and capability(t) % 10 <= cap[1]]
    if not fits:
        raise UnsupportedError(
            f"--autotune: this GPU is sm_{cap[0]}{cap[1]}, but the kernels are compiled for {list(targets)}, none of "
            f"which it runs; add --target sm_{cap[0]}{cap[1]}"
        )
    return max(fits, key=capability)


# -- the tuning shape ------------------------------------------------------------------------------


def tuning_env(graph: Graph, dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """Each symbol at ``dims``' value or at its maximum (rounded down to its multiple_of)."""
    dims = dict(dims or {})
    names = {s.name for s in graph.symbols}
    unknown = sorted(set(dims) - names)
    if unknown:
        raise AotcError(f"--tune-dim {unknown[0]}: the model has no dim of that name; its dims are {sorted(names)}")
    env = {}
    for s in graph.symbols:
        v = dims.get(s.name, s.max // s.multiple_of * s.multiple_of)
        if isinstance(v, bool) or not isinstance(v, int) or not s.min <= v <= s.max or v % s.multiple_of:
            raise AotcError(
                f"--tune-dim {s.name}={v!r}: expected an int in [{s.min}, {s.max}] that is a multiple of {s.multiple_of}"
            )
        env[s.name] = v
    return env


def tuning_feeds(graph: Graph, env: Mapping[str, int], seed: int = 0) -> list[np.ndarray]:
    """Inputs at ``env``: normal floats, zero integers (an id every gather accepts), true booleans."""
    rng = np.random.default_rng(seed)
    out = []
    for v in graph.inputs:
        shape = tuple(evaluate(d, env) for d in v.type.shape)
        dt = v.type.dtype
        if dt.is_float:
            out.append(rng.standard_normal(shape).astype(dt.np))
        elif dt is DType.bool:
            out.append(np.ones(shape, np.bool_))
        else:
            out.append(np.zeros(shape, dt.np))
    return out


# -- candidates ------------------------------------------------------------------------------------


def is_tunable(graph: Graph, k: Kernel) -> bool:
    """Launches whose template row says how to tune them (matmul and attention tiles; a convolution's as implicit
    GEMM, but not the depthwise kernel's) and that compute the node they are rooted at."""
    node = _root(graph, k)
    if node is None or not template(k.kind).tuning:
        return False
    return node.op is not Op.CONV or not conv_shape(node).depthwise


def _root(graph: Graph, k: Kernel) -> Any:
    """The node of ``k``'s that its template is rooted at, if any."""
    roots = template(k.kind).roots
    for i in k.nodes:
        if graph.nodes[i].op in roots:
            return graph.nodes[i]
    return None


def tile_candidates(graph: Graph, k: Kernel, cap: int) -> list[Tile | None]:
    """The configs to time for launch ``k`` on a GPU of compute capability ``cap`` (e.g. 90): None (the
    heuristic config) first, then the table's entries shrunk to the problem, distinct, fitting shared memory."""
    node = _root(graph, k)
    ranges = graph.ranges
    limit = SHARED_LIMIT.get(cap, DEFAULT_SHARED)
    out: list[Tile | None] = [None]
    seen: set[Tile] = set()
    tuning = template(k.kind).tuning
    if tuning == "attention":
        shape = attention_shape(node)
        dtype = node.outputs[0].type.dtype
        lq, lk = upper(shape.lq, ranges), upper(shape.lk, ranges)
        seen.add(attention_config(lq, lk, shape.d, dtype, cap))
        dp = max(16, _pow2(shape.d))
        item = dtype.itemsize
        for bm, bn, warps, stages in ATTENTION_CANDIDATES:
            bm, bn = max(16, min(bm, _pow2(lq))), max(16, min(bn, _pow2(lk)))
            if (bm * dp + 2 * bn * dp) * item * stages > limit:
                continue
            cfg = AttentionConfig(bm, bn, warps if bm >= 64 else min(warps, 4), stages)
            if cfg not in seen:
                seen.add(cfg)
                out.append(cfg)
        return out
    if node.op is Op.MATMUL:
        s = matmul_shape(node)
        m, n, kk = upper(s.rows, ranges), upper(s.n, ranges), upper(s.k, ranges)
    else:
        s = conv_shape(node)
        m, n, kk = upper(s.rows, ranges), s.c_out_group, s.c_in_group * s.taps
    dtype = node.outputs[0].type.dtype
    if dtype not in DOT_DTYPES:
        return out  # integer products: one register-tile config
    seen.add(matmul_config(m, n, kk, dtype, cap, True, dot_precision(node.attrs)))
    item = node.inputs[0].type.dtype.itemsize
    for bm, bn, bk, warps, stages in MATMUL_CANDIDATES:
        if item == 4:
            bk //= 2
        bm = max(MIN_DOT_BLOCK, min(bm, _pow2(m)))
        bn = max(MIN_DOT_BLOCK, min(bn, _pow2(n)))
        bk = max(MIN_DOT_BLOCK, min(bk, _pow2(kk)))
        if (bm + bn) * bk * item * stages > limit:
            continue
        cfg = TileConfig(bm, bn, bk, 8, warps if bm * bn > 64 * 64 else min(warps, 4), stages)
        if cfg not in seen:
            seen.add(cfg)
            out.append(cfg)
    return out


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


# -- defaults: compile with Triton, time on the GPU --------------------------------------------------


def _compile(kernels: Sequence[Kernel], targets: Sequence[str], floor: str | None = None) -> Mapping[str, KernelBinary]:
    from aotc.kernels.aot import AotOptions, compile_kernels

    return compile_kernels(kernels, targets=targets, options=AotOptions(cuda_driver_floor=floor) if floor else None)


def _cuda_measure(driver: Any, repeats: int) -> Measure:
    def measure(
        graph: Graph,
        plan: Schedule,
        binaries: Mapping[str, KernelBinary],
        feeds: Sequence[np.ndarray],
        env: Mapping[str, int],
    ) -> list[float]:
        from aotc.runtime.backends.cuda import CudaBackend
        from aotc.runtime.backends.cuda.profile import profile

        # A plan the GPU cannot load or run (too much shared memory, ...) raises CudaError, an AotcError.
        with CudaBackend(driver=driver, graph_cache=0) as backend:
            program = backend.prepare(Variant(graph, plan), binaries)
            return [t.ms for t in profile(program, feeds, env, repeats)]

    return measure
