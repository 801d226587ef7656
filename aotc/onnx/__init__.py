"""ONNX import and export (imported by the compiler and the CLI; imports aotc.ir, aotc.frontend, aotc.artifact).

ONNX interop: export a Graph as ONNX and import ONNX as a Graph (the onnx.backend adapter, which compiles and
runs, is aotc/onnx_backend.py, beside the compiler).

Names load on first use, so ``import aotc.onnx`` works without the onnx package; using them without it
raises UnsupportedError saying what to install.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "export_onnx": "aotc.onnx.exporter",
    "export_graph": "aotc.onnx.exporter",
    "export_artifact": "aotc.onnx.exporter",
    "import_onnx": "aotc.onnx.importer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from aotc.onnx._common import require_onnx

        require_onnx()
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'aotc.onnx' has no attribute {name!r}")


__all__ = ["export_artifact", "export_graph", "export_onnx", "import_onnx"]
