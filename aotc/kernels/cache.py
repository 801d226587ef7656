"""The on-disk cache of ahead-of-time compiled kernels: one file per (kernel, target, options, Triton).

An entry is found by a key that hashes everything the compile output depends on, so a hit needs
neither Triton nor a compile. Entries are written atomically (temp file, then rename), so parallel
compiles and interrupted runs never leave a half-written entry; an unreadable entry is a miss.

The cache directory is the one setting read from the environment here: ``AOTC_CACHE_DIR``
(default ``~/.cache/aotc``; kernels live under ``kernels/`` in it).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aotc.ir.launch import LaunchMeta

ENV_CACHE_DIR = "AOTC_CACHE_DIR"
# Bump when the entry layout or what a key covers changes, so old entries are never misread.
FORMAT = 1


@dataclass(frozen=True, slots=True)
class Compiled:
    """One kernel compiled for one target."""

    cubin: bytes
    ptx: str
    meta: LaunchMeta


def to_json(compiled: Compiled) -> dict[str, Any]:
    return {
        "meta": dataclasses.asdict(compiled.meta),
        "ptx": compiled.ptx,
        "cubin": base64.b64encode(compiled.cubin).decode(),
    }


def from_json(entry: Mapping[str, Any]) -> Compiled:
    """The inverse of ``to_json``; KeyError, TypeError or ValueError for a malformed entry."""
    meta = dict(entry["meta"])
    meta["params"] = tuple(meta["params"])
    meta["constexprs"] = tuple((str(n), int(v)) for n, v in meta.get("constexprs", ()))
    return Compiled(base64.b64decode(entry["cubin"], validate=True), str(entry["ptx"]), LaunchMeta(**meta))


def default_cache_dir() -> Path:
    root = os.environ.get(ENV_CACHE_DIR, "").strip()
    return Path(root).expanduser() if root else Path.home() / ".cache" / "aotc"


def cache_key(parts: Mapping[str, Any]) -> str:
    """A hex digest of ``parts`` (JSON-able) in a canonical encoding."""
    blob = json.dumps({"format": FORMAT, **parts}, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


class KernelCache:
    """Compiled kernels by key under ``root`` (None: ``default_cache_dir()``)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = (Path(root) if root is not None else default_cache_dir()) / "kernels"

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Compiled | None:
        try:
            return from_json(json.loads(self.path(key).read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def is_empty(self) -> bool:
        """No entry at all (a fresh machine): every kernel of a compile will be a miss."""
        return not any(self.root.glob("*/*.json"))

    def put(self, key: str, compiled: Compiled) -> None:
        entry = to_json(compiled)
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
