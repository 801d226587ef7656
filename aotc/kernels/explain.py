"""``aotc compile --explain``: what each kernel fuses and which fusions the scheduler declined, and why."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from aotc.ir.graph import Graph
from aotc.ir.schedule import Schedule
from aotc.ir.symbolic import to_infix
from aotc.kernels.memplan import arena_bytes_at_max

# A Hopper kernel's descriptors (kernels/attention_tma.py, matmul_tma.py) and the comment saying why an operand
# keeps its pointer loads (or the output its pointer store)
MADE = re.compile(r"^\s*(\w+?)_desc = tl\.make_tensor_descriptor\(", re.M)
KEPT = re.compile(r"^\s*# (\w+) keeps pointer (loads|stores): (.*)$", re.M)


def explain(graph: Graph, schedule: Schedule, tile_sources: Sequence[Mapping[str, Any]] = ()) -> str:
    """Readable text: one line per kernel (name, template, what it computes and stores, and for a tuned template
    where each target's tiles came from: ``tile_sources``, the compiler's rows), the views that share storage,
    the arena, then every declined fusion with its reason."""
    by_launch: dict[int, list[Mapping[str, Any]]] = {}
    for row in tile_sources:
        by_launch.setdefault(int(row["launch"]), []).append(row)
    lines = [f"{len(schedule.kernels)} kernels ({len({k.name for k in schedule.kernels})} distinct) for {graph.name}"]
    for i, k in enumerate(schedule.kernels):
        ops = ", ".join(_counted(k.fused)) or "no ops"
        outs = ", ".join(f"%{v}" for v in k.outputs)
        grid = " x ".join(to_infix(d) for d in k.grid)
        # a compile for sm_90 alone: the launch's own kernel is the Hopper form
        lines.append(f"  [{i}] {k.name} ({k.kind.value}, grid {grid}{_tma(k.source)}): {ops} -> {outs}")
        lines += _kept(k.source, "        ")
        where = _where(graph, k.nodes)
        if where:
            lines.append(f"        from {where}")
        for v in k.arch_launches:
            tiles = " ".join(f"{n}={x}" for n, x in v.kernel.constexprs)
            vgrid = " x ".join(to_infix(d) for d in v.kernel.grid)
            via = _tma(v.kernel.source)
            lines.append(f"        {v.arch}: {v.kernel.name} ({tiles}, {v.kernel.num_warps} warps, grid {vgrid}{via})")
            lines += _kept(v.kernel.source, "          ")
        for row in by_launch.get(i, ()):
            lines.append(f"        tiles for {row['arch']}: {_source_text(row)}")
        for c in k.checks:
            lines.append(f"        checks ids of {c.op} in [{to_infix(c.low)}, {to_infix(c.high)}) (flag {c.slot})")
    for v in schedule.views:
        lines.append(f"  view: output %{v.value} shares the storage of %{v.base}")
    at_max = arena_bytes_at_max(graph, schedule.arena_bytes)
    lines.append(f"arena: {len(schedule.buffers)} buffers, {to_infix(schedule.arena_bytes)} bytes ({at_max} at max)")
    if schedule.declined:
        lines.append("declined fusions:")
        lines += [f"  - {d}" for d in schedule.declined]
    return "\n".join(lines) + "\n"


def _tma(source: str) -> str:
    """What a Hopper kernel (attention, matmul) moves through its tensor descriptors: ", TMA loads of q, k, v,
    TMA store of out" ("" for none)."""
    made = MADE.findall(source)
    stored = {n for n in made if f"{n}_desc.store(" in source}
    loads, stores = [n for n in made if n not in stored], [n for n in made if n in stored]
    return "".join(
        f", TMA {what} of {', '.join(names)}" for what, names in (("loads", loads), ("store", stores)) if names
    )


def _kept(source: str, indent: str) -> list[str]:
    """What a Hopper kernel's TMA cannot take, and why: one line per operand."""
    return [f"{indent}pointer {what} of {role}: {why}" for role, what, why in KEPT.findall(source)]


def _source_text(row: Mapping[str, Any]) -> str:
    text = str(row["source"])
    if row.get("tiles"):
        text += " " + " ".join(f"{n}={v}" for n, v in row["tiles"].items())
    detail = [str(row[n]) for n in ("gpu", "note") if row.get(n)]
    if row.get("ms"):
        base = f" (heuristic {row['heuristic_ms']:.4f} ms)" if row.get("heuristic_ms") else ""
        detail.append(f"{row['ms']:.4f} ms{base}")
    return text + (f" [{'; '.join(detail)}]" if detail else "")


def _counted(ops: tuple[str, ...]) -> list[str]:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    return [f"{op}" if n == 1 else f"{op} x{n}" for op, n in counts.items()]


def _where(graph: Graph, nodes: tuple[int, ...], most: int = 4) -> str:
    """The model source lines (with the module path, "models/gpt2.py:37 (h.0.attn.c_attn)") of a kernel's
    nodes, in node order, each once; after ``most`` of them, how many more."""
    locs = list(dict.fromkeys(graph.nodes[i].loc for i in nodes if graph.nodes[i].loc))
    more = f" and {len(locs) - most} more" if len(locs) > most else ""
    return ", ".join(locs[:most]) + more
