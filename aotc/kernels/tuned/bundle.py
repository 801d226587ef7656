"""Candidate bundles: for each tunable launch of a graph, the heuristic's kernel and a grid of other tile
configs, compiled here (no GPU) to cubins for one arch, in one zip file the GPU check's ``tune`` step times
(aotc/runtime/backends/cuda/tune_run.py reads it; scripts/tune_bundle.py builds it).

The file: ``index.json`` (format, arch, toolchain, build figures, and per key its kernel key, tuning shape,
buffers and candidates: tiles, launch metadata, grid and arguments at the tuning shape) and
``cubins/<name>.cubin`` per candidate. No PTX: a bundle is for one arch's GPUs. With ``sources``, also
``kernels.pickle`` (each candidate's ``Kernel``), which only the fake driver of a dry run needs (it runs the
Triton source under the interpreter) and which only this repository's own scripts write and read.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aotc.errors import UnsupportedError
from aotc.ir.digest import seal
from aotc.ir.graph import Graph
from aotc.ir.launch import DEFAULT_DRIVER_FLOOR
from aotc.ir.schedule import ArgKind, Kernel
from aotc.ir.symbolic_values import evaluate
from aotc.ir.templates import template
from aotc.ir.tiles import SM90_SMS, SM90_TILES
from aotc.kernels.tuned.configs import Tile, tile_from_json, tile_to_json
from aotc.kernels.tuned.keys import kernel_key

BUNDLE_FORMAT = 1
# The Hopper attention grid (issue 27): BLOCK_M x BLOCK_N x stages x warps.
ATTENTION_GRID = tuple(
    (bm, bn, stages, warps) for bm in (64, 128) for bn in (32, 64, 128) for stages in (2, 3, 4) for warps in (4, 8)
)
# (block_m, block_n, block_k for 16-bit operands, warps, stages): Triton's matmul tutorials and Inductor's
# H100 mm configs, plus small-M tiles for decode-like rows. fp32 (an FMA dot) steps K by 16 (ir/tiles.py).
GEMM_GRID = (
    (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 256, 32, 8, 4), (256, 64, 64, 8, 3), (64, 256, 64, 8, 3),
    (128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 128, 32, 4, 4), (128, 128, 128, 8, 2), (64, 256, 32, 4, 4),
    (128, 64, 64, 4, 4), (128, 64, 32, 4, 4), (64, 128, 64, 4, 4), (64, 128, 32, 4, 4), (64, 64, 64, 4, 3),
    (64, 64, 128, 4, 3), (32, 64, 64, 4, 4), (32, 128, 64, 4, 4), (16, 128, 128, 4, 3), (16, 64, 256, 4, 3),
    (16, 256, 64, 4, 4), (32, 256, 64, 8, 3),
)  # fmt: skip
FP32_BLOCK_K = 16
# A recurrence's (rows per program, warps): fewer rows spread a batch over more SMs, more warps split each step's
# dots (its steps run one after another, so the launch is latency-bound). No 64 rows: at the benchmark's batch 64
# that is one program on one SM, and each candidate takes ~10 s to build (a 10-step LSTM loop).
RECURRENT_GRID = tuple((bm, warps) for bm in (16, 32) for warps in (1, 2, 4, 8))


@dataclass
class Candidate:
    name: str
    tiles: dict[str, int]
    heuristic: bool
    kernel: Kernel


@dataclass
class KeyCase:
    """One kernel key: the launch it was taken from and its candidates (the heuristic's first)."""

    label: str
    key: dict[str, Any]
    graph: Graph
    env: dict[str, int]
    candidates: list[Candidate] = field(default_factory=list)


def key_cases(
    graph: Graph,
    env: Mapping[str, int],
    label: str,
    arch: str = "sm_90",
    keep: Callable[[dict], bool] | None = None,
    floor: str = DEFAULT_DRIVER_FLOOR,
) -> list[KeyCase]:
    """A KeyCase per distinct key among ``graph``'s tunable launches at the tuning shape ``env`` (``keep``
    filters the keys), each with the heuristic's kernel and every legal grid config, shrunk to the problem, as
    a compile at the CUDA driver floor ``floor`` emits them (its PTX version picks the load form: the key's
    ``loads``)."""
    from aotc.kernels.fusion import plan_fusion
    from aotc.kernels.tuned import tuning_target

    options = SimpleNamespace(targets=(arch,), cuda_driver_floor=floor)
    _, target = tuning_target(arch, floor)
    base = schedule_with(graph, options, {})
    plans = plan_fusion(graph).kernels  # the schedule's launches, one per plan, in order
    out: list[KeyCase] = []
    seen: set[str] = set()
    for i, (k, kp) in enumerate(zip(base.kernels, plans, strict=True)):
        if not template(k.kind).tuning or (kp.root is None and kp.group is None):
            continue
        key = kernel_key(graph, kp.root, k.nodes, env, kp.group, target)
        if key is None or (keep is not None and not keep(key)):
            continue
        text = json.dumps(key, sort_keys=True)
        if text in seen:
            continue
        seen.add(text)
        case = KeyCase(f"{label}/{_key_label(key)}", key, graph, dict(env))
        tag = f"t{len(out)}" if not label else _ident(label)
        case.candidates.append(
            Candidate(f"{tag}_k{i}_h", heuristic_tiles(k), True, _renamed(graph, k, f"{tag}_k{i}_h"))
        )
        for j, tile in enumerate(grid_tiles(key, arch, case.candidates[0].tiles)):
            try:
                cand = schedule_with(graph, options, {i: tile}).kernels[i]
            except UnsupportedError:
                continue
            name = f"{tag}_k{i}_c{j}"
            case.candidates.append(Candidate(name, tile_to_json(tile), False, _renamed(graph, cand, name)))
        out.append(case)
    return out


def schedule_with(graph: Graph, options: Any, tiles: Mapping[int, Any]) -> Any:
    from aotc.kernels.scheduler import schedule_graph

    return schedule_graph(graph, options, tiles)


def heuristic_tiles(k: Kernel) -> dict[str, int]:
    c = dict(k.constexprs)
    if k.kind == "recurrent_cell":
        return {"block_m": c["BLOCK_M"], "num_warps": k.num_warps}
    tiles = {"block_m": c["BLOCK_M"], "block_n": c["BLOCK_N"]}
    if k.kind == "attention":
        return {**tiles, "num_warps": k.num_warps, "num_stages": k.num_stages}
    return {**tiles, "block_k": c["BLOCK_K"], "group_m": c.get("GROUP_M", 8), "num_warps": k.num_warps,
            "num_stages": k.num_stages}  # fmt: skip


def grid_tiles(key: Mapping[str, Any], arch: str, heuristic: Mapping[str, int]) -> list[Tile]:
    """The grid's configs for ``key``, each shrunk to the problem, legal on ``arch`` and not the heuristic's."""
    kind = key["template"]
    seen = [dict(heuristic)]
    out: list[Tile] = []
    b = key["buckets"]
    if kind == "recurrent_cell":
        raw = [{"block_m": max(16, min(bm, _pow2(b["rows"]))), "num_warps": w} for bm, w in RECURRENT_GRID]
    elif kind == "attention":
        raw = [
            {"block_m": min(bm, max(16, b["q_len"])), "block_n": min(bn, max(16, b["kv_len"])), "num_warps": w,
             "num_stages": s}
            for bm, bn, s, w in ATTENTION_GRID
        ]  # fmt: skip
    else:
        static = key["static"]
        m, n, kk = b["rows"], static.get("n", b.get("n", 1)), static.get("k", b.get("k", 1))
        fp32 = key["dtypes"][0] == "float32"
        raw = [_gemm_tiles(row, m, n, kk, fp32) for row in GEMM_GRID]
        if kind == "matmul" and b["batch"] == 1:
            raw += [dict(t, persistent=True) for t in _persistent_tiles(m, n, kk, fp32)]
    for tiles in raw:
        if tiles in seen:
            continue
        seen.append(tiles)
        try:
            out.append(tile_from_json(kind, tiles, key, arch))
        except UnsupportedError:
            continue
    return out


def _persistent_tiles(m: int, n: int, k: int, fp32: bool) -> list[dict[str, int]]:
    """The persistent form's candidates for an m x n x k product: Inductor's persistent-mm tiles (SM90_TILES),
    each where it makes more tiles than the fixed grid has programs (with fewer, each program runs one tile at
    most and the form only adds its loop)."""
    tiles = [_gemm_tiles(row, m, n, k, fp32) for row in SM90_TILES]
    # SM90_SMS: matmul.PERSISTENT_PROGRAMS, the persistent form's fixed grid
    return [t for t in tiles if -(-m // t["block_m"]) * -(-n // t["block_n"]) > SM90_SMS]


def _gemm_tiles(row: tuple[int, ...], m: int, n: int, k: int, fp32: bool) -> dict[str, int]:
    """A (block_m, block_n, block_k, warps, stages) grid row shrunk to an m x n x k product (fp32, an FMA dot,
    steps K by FP32_BLOCK_K)."""
    bm, bn, bk, w, s = row
    return {"block_m": max(16, min(bm, _pow2(m))), "block_n": max(16, min(bn, _pow2(n))),
            "block_k": max(16, min(FP32_BLOCK_K if fp32 else bk, _pow2(k))), "group_m": 8, "num_warps": w,
            "num_stages": s}  # fmt: skip


def write_bundle(
    path: str | Path,
    cases: Sequence[KeyCase],
    arch: str,
    compiled: Mapping[str, Any],
    toolchain: Mapping[str, Any],
    built: Mapping[str, Any],
    sources: bool = False,
) -> dict[str, Any]:
    """The bundle file of ``cases`` whose candidates ``compiled`` holds (name -> Compiled or an error message:
    a candidate that did not compile is listed with its error and no cubin); returns its index."""
    index: dict[str, Any] = {"format": BUNDLE_FORMAT, "arch": arch, "toolchain": dict(toolchain),
                             "built": dict(built), "keys": []}  # fmt: skip
    kernels: dict[str, Kernel] = {}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, case in enumerate(cases):
            buffers: dict[int, dict[str, Any]] = {}
            rows = []
            for c in case.candidates:
                result = compiled.get(c.name, "not compiled")
                row: dict[str, Any] = {"name": c.name, "tiles": c.tiles, "heuristic": c.heuristic}
                if isinstance(result, str):
                    rows.append({**row, "error": result[:500]})
                    continue
                row["meta"] = _meta_json(result.meta)
                row["cubin"] = f"cubins/{c.name}.cubin"
                row["grid"] = [evaluate(g, case.env) for g in c.kernel.grid]
                row["args"] = _args(case, c.kernel, buffers)
                z.writestr(row["cubin"], result.cubin)
                kernels[c.name] = c.kernel
                rows.append(row)
            index["keys"].append({"id": f"key{n}", "label": case.label, "kernel": case.key, "env": case.env,
                                  "buffers": [{"value": v, **b} for v, b in sorted(buffers.items())],
                                  "candidates": rows})  # fmt: skip
        z.writestr("index.json", json.dumps(index, indent=1))
        if sources:
            z.writestr("kernels.pickle", pickle.dumps(kernels))
    return index


def compile_cases(
    cases: Sequence[KeyCase], arch: str, jobs: int | None = None, floor: str = DEFAULT_DRIVER_FLOOR
) -> tuple[dict[str, Any], float]:
    """Every candidate's cubin (through the kernel cache) built with the toolchain of the driver floor ``floor``
    (the one ``key_cases`` emitted them for), and the wall seconds it took."""
    from aotc.kernels.aot import AotOptions, compile_cubins

    start = time.perf_counter()
    kernels = [c.kernel for case in cases for c in case.candidates]
    options = AotOptions(jobs=jobs, cuda_driver_floor=floor)
    return compile_cubins(kernels, arch, options), time.perf_counter() - start


def _args(case: KeyCase, k: Kernel, buffers: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    types = {v.id: v.type for v in case.graph.inputs}
    types.update({o.id: o.type for n in case.graph.nodes for o in n.outputs})
    out: list[dict[str, Any]] = []
    for a in k.args:
        if a.kind is ArgKind.BUFFER:
            t = types[a.value]
            numel = 1
            for d in t.shape:
                numel *= evaluate(d, case.env)
            buffers[a.value] = {"bytes": max(numel * t.dtype.itemsize, 1), "dtype": t.dtype.value}
            out.append({"buffer": a.value})
        elif a.kind is ArgKind.SIZE:
            out.append({"int": evaluate(a.size, case.env)})
        else:  # the error-flag array: zeros, one int32 per check
            out.append({"flags": max(len(k.checks), 1)})
    return out


def _meta_json(meta: Any) -> dict[str, Any]:
    return {f.name: list(v) if isinstance(v := getattr(meta, f.name), tuple) else v for f in dataclasses.fields(meta)}


def _renamed(graph: Graph, k: Kernel, name: str) -> Kernel:
    return seal(graph, k.replace(name=name, source=k.source.replace(f"def {k.name}(", f"def {name}(", 1)))


def _key_label(key: Mapping[str, Any]) -> str:
    dims = {**key["static"], **key["buckets"]}
    return f"{key['template']} {key['dtypes'][0]} {key['epilogue']} " + " ".join(f"{k}={v}" for k, v in dims.items())


def _ident(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text)


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


__all__ = [
    "ATTENTION_GRID",
    "GEMM_GRID",
    "RECURRENT_GRID",
    "KeyCase",
    "compile_cases",
    "grid_tiles",
    "key_cases",
    "write_bundle",
]
