"""Merging the GPU check's tune results (aotc/runtime/backends/cuda/tune_run.py wrote them) into the shipped
table (scripts/tune_merge.py is the command): per key, the ``TOP`` fastest configs with their ms and the
heuristic's ms. A candidate counts only when both of its timings are there; its time is their mean. An entry of
the same GPU, toolchain and kernel key is replaced, every other one kept. Every config written is checked
against the template's legal tile space first, so the merge never writes an entry the compiler would refuse.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aotc.errors import AotcError, UnsupportedError
from aotc.kernels.tuned.configs import tile_from_json
from aotc.kernels.tuned.table import TABLE_FORMAT, parse_entry

TOP = 3


def empty_table(arch: str) -> dict[str, Any]:
    return {"format": TABLE_FORMAT, "arch": arch, "entries": []}


def read_results(path: str | Path) -> dict[str, Any]:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise AotcError(f"tune results {path}: not readable JSON ({e})") from None
    if not isinstance(raw, dict) or raw.get("format") != 1:
        raise AotcError(f"tune results {path}: expected an object with format 1")
    for field in ("arch", "toolchain", "gpu", "keys"):
        if field not in raw:
            raise AotcError(f"tune results {path}: no {field!r}")
    gpu = raw["gpu"]
    if not isinstance(gpu.get("name"), str) or not isinstance(gpu.get("sm_count"), int) or gpu["sm_count"] <= 0:
        raise AotcError(f"tune results {path}: gpu {gpu!r}: expected a name and a positive sm_count")
    return raw


def _timed(c: Mapping[str, Any]) -> float | None:
    ms = c.get("ms")
    if not isinstance(ms, list) or len(ms) != 2:
        return None
    if not all(isinstance(x, int | float) and math.isfinite(x) and x > 0 for x in ms):
        return None
    return sum(ms) / 2


def merge(table: dict[str, Any], results: Mapping[str, Any], top: int = TOP) -> list[str]:
    """Merge ``results`` into ``table`` in place; returns one line per key (what it wrote, or why not)."""
    arch = table["arch"]
    if results["arch"] != arch:
        raise AotcError(f"tune results are for {results['arch']}, the table is {arch}'s")
    gpu = {"name": results["gpu"]["name"], "sm_count": results["gpu"]["sm_count"]}
    chain = dict(results["toolchain"])
    lines = []
    for key in results["keys"]:
        kernel = key["kernel"]
        kind = kernel["template"]
        scored = []
        for c in key["candidates"]:
            ms = _timed(c)
            if ms is None:
                continue
            try:
                tile_from_json(kind, c["tiles"], kernel, arch)
            except (UnsupportedError, KeyError, TypeError, ValueError) as e:
                lines.append(f"{key['label']}: candidate {c.get('name')} dropped ({e})")
                continue
            scored.append((ms, c))
        if not scored:
            lines.append(f"{key['label']}: nothing timed twice, not merged")
            continue
        scored.sort(key=lambda x: x[0])
        base = next(((ms, c) for ms, c in scored if c.get("heuristic")), None)
        entry = {
            "gpu": gpu,
            "toolchain": chain,
            "kernel": kernel,
            "configs": [{"tiles": c["tiles"], "ms": round(ms, 6)} for ms, c in scored[:top]],
            "heuristic": {"tiles": base[1]["tiles"], "ms": round(base[0], 6)} if base else {"tiles": None, "ms": None},
        }
        parse_entry(0, entry)  # what the compiler will read back
        same = [i for i, e in enumerate(table["entries"])
                if e.get("gpu", {}).get("name") == gpu["name"] and e.get("toolchain") == chain
                and e.get("kernel") == kernel]  # fmt: skip
        for i in reversed(same):
            del table["entries"][i]
        table["entries"].append(entry)
        speed = f", {base[0] / scored[0][0]:.2f}x the heuristic" if base else ""
        lines.append(f"{key['label']}: {scored[0][1]['tiles']} {scored[0][0]:.4f} ms{speed}"
                     + (" (replaced)" if same else ""))  # fmt: skip
    table["entries"].sort(key=lambda e: json.dumps([e["kernel"], e["gpu"], e["toolchain"]], sort_keys=True))
    return lines
