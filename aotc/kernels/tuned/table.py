"""The tuned table: per arch one JSON file (``sm_90.json`` beside this module, shipped in the package), each
entry the configs a GPU measured fastest for one kernel key (aotc/kernels/tuned/keys.py), with their times and
the heuristic's.

    {"format": 1, "arch": "sm_90", "entries": [
      {"gpu": {"name": "NVIDIA H200", "sm_count": 132},
       "toolchain": {"triton": "3.6.0", "ptxas": "12.8", "ptx_version": 87},
       "kernel": {"template": "matmul", "revision": 1, "epilogue": "none", "dtypes": [...], "precision": "default",
                  "static": {"n": 768, "k": 3072}, "buckets": {"rows": 8192, "batch": 1}},
       "configs": [{"tiles": {...}, "ms": 0.081}, ...],     # fastest first
       "heuristic": {"tiles": {...}, "ms": 0.104}}]}

A lookup (``choose``) takes the entry whose GPU, arch and kernel key match with the same toolchain ("table
exact"), else one with another toolchain ("table relaxed": tiles carry over between Triton releases better than
nothing, worse than a measurement), else the heuristic. An entry that does not parse, whose template revision is
not the current one (stale), or whose best config is outside the template's legal tile space is ignored with one
``TunedTableWarning``: a table can make a kernel slower, never wrong.

``AOTC_TUNED_DIR`` names another folder of tables (tests, a table under review); ``AOTC_TUNED_GPU`` picks the GPU
whose entries a compile uses (a case-insensitive part of its name), else any GPU's, by name.
"""

from __future__ import annotations

import functools
import json
import math
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.kernels.tuned.configs import Tile, tile_from_json, tile_to_json
from aotc.kernels.tuned.keys import REVISIONS

TABLE_FORMAT = 1
TABLE_DIR = Path(__file__).resolve().parent
DIR_VARIABLE, GPU_VARIABLE = "AOTC_TUNED_DIR", "AOTC_TUNED_GPU"
EXACT, RELAXED, HEURISTIC, AUTOTUNE = "table exact", "table relaxed", "heuristic", "autotune"


class TunedTableWarning(UserWarning):
    """A tuned-table file or entry was ignored (malformed, stale or illegal tiles): the heuristic stands in."""


@dataclass(frozen=True)
class Entry:
    index: int  # its position in the file (for messages)
    gpu: str
    sm_count: int
    toolchain: dict[str, Any]
    kernel: dict[str, Any]
    configs: tuple[tuple[dict[str, int], float], ...]
    heuristic_ms: float | None


@dataclass(frozen=True)
class Table:
    path: str
    arch: str
    entries: tuple[Entry, ...]
    warned: set[int]  # entries already warned about at lookup (one warning each)


@dataclass(frozen=True)
class TileChoice:
    """Where one launch's tiles came from (``--explain``, ``inspect --json``'s meta ``tile_sources``)."""

    source: str  # EXACT, RELAXED, HEURISTIC or AUTOTUNE
    tiles: Tile | None  # None: the template's heuristic
    gpu: str = ""
    ms: float | None = None
    heuristic_ms: float | None = None
    note: str = ""

    def text(self) -> str:
        if self.tiles is None:
            return self.source + (f" ({self.note})" if self.note else "")
        timed = f", {self.ms:.4f} ms" if self.ms else ""
        base = f" vs heuristic {self.heuristic_ms:.4f} ms" if self.heuristic_ms else ""
        return f"{self.source} ({self.gpu}{timed}{base})"

    def to_meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        if self.tiles is not None:
            out["tiles"] = tile_to_json(self.tiles)
        for name in ("gpu", "ms", "heuristic_ms", "note"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


def table_path(arch: str) -> Path:
    folder = os.environ.get(DIR_VARIABLE, "").strip()
    return (Path(folder) if folder else TABLE_DIR) / f"{arch}.json"


def load_table(arch: str) -> Table | None:
    """``arch``'s table (None when there is no file); a file or entry that does not parse is warned about once."""
    path = table_path(arch)
    try:
        st = path.stat()
    except OSError:
        return None
    return _load(str(path), arch, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _load(path: str, arch: str, _mtime: int, _size: int) -> Table:
    # keyed by mtime and size as well: a table rewritten (by the merge command, a test) is read again
    try:
        raw = json.loads(Path(path).read_text())
        if not isinstance(raw, dict) or raw.get("format") != TABLE_FORMAT or raw.get("arch") != arch:
            raise ValueError(f"expected an object with format {TABLE_FORMAT} and arch {arch!r}")
        if not isinstance(raw.get("entries"), list):
            raise ValueError("expected a list of entries")
    except (OSError, ValueError) as e:
        _warn(f"tuned table {path} ignored: {e}")
        return Table(path, arch, (), set())
    entries = []
    for i, item in enumerate(raw["entries"]):
        try:
            entries.append(parse_entry(i, item))
        except (KeyError, TypeError, ValueError) as e:
            _warn(f"tuned table {path}: entry {i} ignored (malformed: {e})")
    return Table(path, arch, tuple(entries), set())


def parse_entry(index: int, raw: Any) -> Entry:
    """One entry, its structure checked (its tiles are checked at lookup, against the key's problem)."""
    gpu, chain, kernel = raw["gpu"], raw["toolchain"], raw["kernel"]
    if not isinstance(gpu["name"], str) or not _count(gpu["sm_count"]):
        raise ValueError(f"gpu {gpu!r}: expected a name and a positive sm_count")
    if not all(isinstance(chain[k], str) for k in ("triton", "ptxas")) or not _count(chain["ptx_version"]):
        raise ValueError(f"toolchain {chain!r}: expected triton and ptxas versions and an int ptx_version")
    if kernel["template"] not in REVISIONS or not _count(kernel["revision"]):
        raise ValueError(f"kernel template {kernel['template']!r} revision {kernel['revision']!r}: not a tuned one")
    for d in kernel["dtypes"]:
        DType(d)
    if not isinstance(kernel["static"], dict) or not isinstance(kernel["buckets"], dict):
        raise ValueError("kernel static and buckets must be objects")
    for name, b in kernel["buckets"].items():
        if not _count(b) or b & (b - 1):
            raise ValueError(f"bucket {name}={b!r}: expected a power of two")
    for name in ("epilogue", "precision"):
        if not isinstance(kernel[name], str):
            raise ValueError(f"kernel {name} {kernel[name]!r}: expected text")
    configs = tuple((dict(c["tiles"]), _ms(c["ms"])) for c in raw["configs"])
    if not configs:
        raise ValueError("no configs")
    heuristic = raw.get("heuristic") or {}
    base = heuristic.get("ms")
    return Entry(index, gpu["name"], gpu["sm_count"], dict(chain), dict(kernel), configs,
                 None if base is None else _ms(base))  # fmt: skip


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _ms(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"time {v!r}: expected a positive number of milliseconds")
    return float(v)


def _warn(message: str) -> None:
    warnings.warn(message, TunedTableWarning, stacklevel=3)


def choose(
    kind: str, key: Mapping[str, Any] | None, arch: str, toolchain: Mapping[str, Any] | None, gpu: str | None = None
) -> TileChoice:
    """The tiles for a ``kind`` launch with tuning ``key`` on ``arch``: exact entry, relaxed entry, heuristic."""
    if key is None:
        return TileChoice(HEURISTIC, None, note="not tuned")
    table = load_table(arch)
    if table is None or not table.entries:
        return TileChoice(HEURISTIC, None, note=f"no tuned table for {arch}")
    want = os.environ.get(GPU_VARIABLE, "") if gpu is None else gpu
    plain = {k: v for k, v in key.items() if k != "revision"}
    found = []
    for e in table.entries:
        if {k: v for k, v in e.kernel.items() if k != "revision"} != plain:
            continue
        if want and want.lower() not in e.gpu.lower():
            continue
        if e.kernel["revision"] != key["revision"]:
            _once(table, e, f"stale: tuned for {kind} revision {e.kernel['revision']}, the template is at "
                            f"{key['revision']}")  # fmt: skip
            continue
        found.append(e)
    exact = dict(toolchain) if toolchain is not None else None
    found.sort(key=lambda e: (e.toolchain != exact, e.gpu, e.index))
    for e in found:
        tiles, ms = e.configs[0]
        try:
            tile = tile_from_json(kind, tiles, key, arch)
        except (UnsupportedError, KeyError, TypeError, ValueError) as err:
            _once(table, e, f"its best config is not a legal {kind} tile here: {err}")
            continue
        source = EXACT if e.toolchain == exact else RELAXED
        return TileChoice(source, tile, e.gpu, ms, e.heuristic_ms)
    return TileChoice(HEURISTIC, None, note="no table entry for this key")


def _once(table: Table, e: Entry, why: str) -> None:
    if e.index not in table.warned:
        table.warned.add(e.index)
        _warn(f"tuned table {table.path}: entry {e.index} ({e.gpu}) ignored ({why})")
