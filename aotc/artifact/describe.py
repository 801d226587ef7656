"""What an artifact holds, as a JSON-able dict (``aotc inspect --json``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aotc.artifact.reader import Artifact
from aotc.ir.graph import Graph
from aotc.ir.schedule import Kernel, Schedule
from aotc.ir.state import state_chains
from aotc.ir.symbolic import mul, to_infix
from aotc.ir.symbolic_values import bounds
from aotc.ir.types import TensorType
from aotc.ir.variant import Variant


def describe(artifact: Artifact) -> dict[str, Any]:
    """Versions, interface, symbols, guards, op counts and sizes. Top-level inputs, outputs, symbols and
    guards are those of the first variant; ``variants`` lists each one."""
    first = artifact.variants[0].graph
    arenas = [_arena_at_max(v.graph, v.plan) for v in artifact.variants if v.plan is not None]
    return {
        "format_version": artifact.format_version,
        "schema_version": artifact.schema_version,
        "producer_version": artifact.producer_version,
        "model_name": artifact.name,
        "file_size": artifact.file_size,
        # read_artifact returns only artifacts whose every checked checksum matched; with
        # verify_weights=False (aotc inspect) the segments' checksums were not computed
        "checksums": "ok" if artifact.weights_verified else "header ok, segments not verified",
        "segments_verified": artifact.weights_verified,
        # every launch bound to its graph (digest) and proved inside its buffers (extents): schema >= 6
        "plans_bound": artifact.plans_bound,
        "inputs": _inputs(first),
        "outputs": [{"index": i, **_type(o.type)} for i, o in enumerate(first.outputs[: first.num_results])],
        # state that lives across calls (a KV cache): a session holds one copy, its bytes at the symbols' maxima
        "states": _states(first),
        "state_bytes_per_session": sum(st["bytes"] for st in _states(first)),
        "output_tree": first.output_tree,
        "symbols": _symbols(first),
        "guards": _guards(first),
        "variants": [_variant(i, v.graph, v.plan) for i, v in enumerate(artifact.variants)],
        "source": None
        if artifact.source is None
        else {"nodes": len(artifact.source.nodes), "op_counts": artifact.source.op_counts()},
        "constants": len(artifact.constants),
        "weight_bytes": artifact.weight_bytes,
        "meta": artifact.meta,
        "features": list(artifact.features),
        "kernel_features": list(artifact.kernel_features),
        "unusable_kernel_features": list(artifact.unusable_kernel_features),
        "kernels": _kernels(artifact),
        "toolchain": _toolchain(artifact),
        "arena_bytes": max(arenas) if arenas else None,
        "arena_by_dim": _arena_by_dim(artifact.variants),
        "onnx": _onnx(artifact),
    }


def _onnx(artifact: Artifact) -> dict[str, Any]:
    """The ONNX model the file stores for tools (the cpu backend writes its own from the variant graph): its size
    and the compiler's summary of it (kept in meta["onnx"], since the reader never parses ONNX), or why the file
    has none."""
    summary = artifact.meta.get("onnx")
    summary = summary if isinstance(summary, dict) else {}
    if artifact.onnx is None:
        reason = summary.get("reason")
        if not isinstance(reason, str):
            reason = "the file stores none" if artifact.schema_version >= 7 else "written before schema 7"
        return {"stored": False, "reason": reason}
    widened = summary.get("widened_from")
    return {
        "stored": True,
        "bytes": len(artifact.onnx),
        "nodes": summary.get("nodes"),
        "weights": summary.get("weights"),
        "computes_in": "float32",
        "widened_from": [w for w in widened if isinstance(w, str)] if isinstance(widened, list) else [],
    }


def _variant(index: int, g: Graph, s: Schedule | None) -> dict[str, Any]:
    return {
        "launches": None if s is None else len(s.kernels),
        "arena_bytes": None if s is None else _arena_at_max(g, s),
        "index": index,
        "name": g.name,
        "inputs": _inputs(g),
        "symbols": _symbols(g),
        "guards": _guards(g),
        "nodes": len(g.nodes),
        "op_counts": g.op_counts(),
        "constants": len(g.constants),
    }


def _arena_at_max(g: Graph, s: Schedule) -> int:
    """The arena's size bound over every binding of the symbols. ``ir.symbolic.bounds`` gives a sound upper
    bound (exact for the sums and products of symbols arena sizes are; evaluating at each symbol's max would
    not be sound for an expression that is not monotone in its symbols)."""
    ranges = {x.name: (x.min, x.max) for x in g.symbols}
    return bounds(s.arena_bytes, ranges, {x.name: x.multiple_of for x in g.symbols})[1]


def _arena_by_dim(variants: Sequence[Variant]) -> dict[str, int]:
    """Per dim, the arena's bound with that dim over its range and every other dim at its minimum (the largest over
    the variants), largest first: which dim's maximum the arena grows with, so a user knows which range to narrow."""
    out: dict[str, int] = {}
    for v in variants:
        g, s = v.graph, v.plan
        if s is None:
            continue
        mins = {x.name: (x.min, x.min) for x in g.symbols}
        multiples = {x.name: x.multiple_of for x in g.symbols}
        for x in g.symbols:
            hi = bounds(s.arena_bytes, {**mins, x.name: (x.min, x.max)}, multiples)[1]
            out[x.name] = max(out.get(x.name, 0), hi)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _toolchain(artifact: Artifact) -> dict[str, Any] | None:
    """What built the binaries (Triton; per image kind, the PTX ISA and ptxas release) and the oldest CUDA
    driver they load on. None when the file has no binaries."""
    if not artifact.kernels:
        return None
    images: dict[str, set[tuple[str, str]]] = {}
    tritons = set()
    for b in artifact.kernels.values():
        for key, m in [*((f"{c.arch} cubin", c.meta) for c in b.cubins), ("PTX", b.ptx_meta)]:
            images.setdefault(key, set()).add((m.ptx_version, m.ptxas_version or "unknown"))
            tritons.add(m.triton_version)
    return {
        "cuda_driver_floor": artifact.cuda_driver_floor,
        "triton": sorted(tritons),
        "images": {k: [{"ptx": p, "ptxas": a} for p, a in sorted(v)] for k, v in sorted(images.items())},
    }


def _kernels(artifact: Artifact) -> list[dict[str, Any]]:
    """One entry per distinct kernel, in the order the variants first launch them."""
    first: dict[str, Kernel] = {}
    launches: dict[str, int] = {}
    arch_launch_of: dict[str, str] = {}  # an arch launch's code -> the code it stands in for
    for variant in artifact.variants:
        for k in variant.plan.kernels if variant.plan is not None else ():
            first.setdefault(k.name, k)
            launches[k.name] = launches.get(k.name, 0) + 1
            for v in k.arch_launches:
                first.setdefault(v.kernel.name, v.kernel)
                launches[v.kernel.name] = launches.get(v.kernel.name, 0) + 1
                arch_launch_of.setdefault(v.kernel.name, k.name)
    out = []
    for name, k in first.items():
        binary = artifact.kernels.get(name)
        shared = {c.arch: c.meta.shared for c in binary.cubins} if binary is not None else {}
        out.append(
            {
                "name": name,
                "kind": k.kind.value,
                "targets": list(binary.archs) if binary is not None else [],
                "ptx": binary is not None,
                "ops": list(k.fused),
                "num_warps": k.num_warps,
                "num_stages": k.num_stages,
                # dynamic shared memory bytes: the most any target's cubin takes, and per target
                "shared": max(shared.values()) if shared else None,
                "shared_by_target": shared,
                "launches": launches[name],
                "tiles": dict(k.constexprs),
                "arch_launch_of": arch_launch_of.get(name),
            }
        )
    return out


def _type(t: TensorType) -> dict[str, Any]:
    return {"dtype": t.dtype.value, "shape": [to_infix(d) for d in t.shape]}


def _inputs(g: Graph) -> list[dict[str, Any]]:
    return [{"name": name, **_type(v.type)} for name, v in zip(g.input_names[: g.num_feeds], g.inputs)]


def _states(g: Graph) -> list[dict[str, Any]]:
    ranges, multiples = g.ranges, g.multiples
    writers = [len(c.writers) for c in state_chains(g)] if g.states else []
    out = []
    for st, v, n in zip(g.states, g.state_inputs, writers):
        numel = v.type.dtype.itemsize
        for d in v.type.shape:
            numel = mul(numel, d)
        nbytes = bounds(numel, ranges, multiples)[1]
        out.append({"name": st.name, **_type(v.type), "init": st.init, "bytes": nbytes, "writers": n})
    return out


def _symbols(g: Graph) -> list[dict[str, Any]]:
    return [{"name": s.name, "min": s.min, "max": s.max, "multiple_of": s.multiple_of} for s in g.symbols]


def _guards(g: Graph) -> list[dict[str, str]]:
    return [{"guard": f"{to_infix(gd.lhs)} {gd.rel} {to_infix(gd.rhs)}", "loc": gd.loc} for gd in g.guards]
