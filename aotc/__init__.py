"""aotc: an ahead-of-time model compiler.

Names are loaded on first use (PEP 562) so that ``import aotc.runtime`` pulls
in only the runtime, never the frontend, lowering, triton, torch or onnx.
"""

from __future__ import annotations

import importlib
from typing import Any

from aotc.errors import (
    AotcError,
    ArtifactError,
    ExecError,
    FallbackWarning,
    GuardError,
    ModelError,
    ShapeError,
    TraceError,
    UnsupportedError,
)
from aotc.ir.dtypes import DType

__version__ = "0.1.0"

float32 = DType.float32
float16 = DType.float16
bfloat16 = DType.bfloat16
int32 = DType.int32
int64 = DType.int64
bool = DType.bool

# public name -> module that defines it
_LAZY = {
    "load": "aotc.runtime",
    "Executable": "aotc.runtime",
    "Session": "aotc.runtime.session",
    "generate": "aotc.runtime.generate",
    "Dim": "aotc.frontend.spec",
    "TensorSpec": "aotc.frontend.spec",
    "compile": "aotc.compiler",
    "CompiledModel": "aotc.compiler",
    "CompileOptions": "aotc.lowering.options",
    "Tensor": "aotc.frontend.tensor",
    "export_onnx": "aotc.onnx",
    "SignatureError": "aotc.artifact.sigblock",
}
_LAZY_MODULES = {"nn": "aotc.nn", "functional": "aotc.functional"}
# torch-style module functions (aotc.cat, aotc.where, ...) live in the frontend's ops module
_TENSOR_FUNCS = "aotc.frontend.functions"


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _LAZY_MODULES:
        return importlib.import_module(_LAZY_MODULES[name])
    if not name.startswith("_"):
        funcs = importlib.import_module(_TENSOR_FUNCS)
        if name in funcs.__all__:
            return getattr(funcs, name)
    raise AttributeError(f"module 'aotc' has no attribute {name!r}")


__all__ = [
    "AotcError",
    "ArtifactError",
    "DType",
    "ExecError",
    "FallbackWarning",
    "GuardError",
    "ModelError",
    "ShapeError",
    "TraceError",
    "UnsupportedError",
    "bfloat16",
    "bool",
    "float16",
    "float32",
    "int32",
    "int64",
]
