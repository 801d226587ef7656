"""The artifact file: schema, writer, verifying reader (the runtime imports the reader; imports aotc.ir).

The artifact file: FlatBuffer schema, generated code, writer, reader and ``describe``.

The writer loads on first use, so the runtime (which imports this package for the reader) never pulls it in.
"""

from __future__ import annotations

import importlib
from typing import Any

from aotc.artifact.describe import describe
from aotc.artifact.layout import FORMAT_VERSION, SCHEMA_VERSION
from aotc.artifact.reader import Artifact, read_artifact

_LAZY = {"write_artifact": "aotc.artifact.writer", "save_artifact": "aotc.artifact.writer"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'aotc.artifact' has no attribute {name!r}")


__all__ = [
    "FORMAT_VERSION",
    "SCHEMA_VERSION",
    "Artifact",
    "describe",
    "read_artifact",
    "save_artifact",
    "write_artifact",
]
