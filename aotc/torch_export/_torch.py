"""torch, imported lazily, and the conversions every part of the importer shares: dtypes and tensors to numpy."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType

INSTALL_HINT = "pip install 'aotc[torch]'"


def require_torch() -> Any:
    """The torch module; UnsupportedError saying what to install when it is missing."""
    try:
        import torch
    except ImportError:
        raise UnsupportedError(f"compiling a PyTorch model needs torch: {INSTALL_HINT}") from None
    return torch


def is_torch_module(obj: Any) -> bool:
    """A ``torch.nn.Module``, checked without importing torch (a model made with torch has imported it)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def is_exported_program(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    export = getattr(torch, "export", None) if torch is not None else None
    return export is not None and isinstance(obj, export.ExportedProgram)


# torch dtype name -> the aotc dtype that carries it. float64 computes in float32 and narrow ints widen, as aotc
# does for numpy constants (frontend.context.as_supported_array).
_DTYPES = {
    "float32": DType.float32,
    "float16": DType.float16,
    "bfloat16": DType.bfloat16,
    "float64": DType.float32,
    "int64": DType.int64,
    "int32": DType.int32,
    "int16": DType.int32,
    "int8": DType.int32,
    "uint8": DType.int32,
    "bool": DType.bool,
}


def aotc_dtype(dtype: Any, what: str = "a tensor") -> DType:
    """The aotc dtype for a ``torch.dtype``."""
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise UnsupportedError(f"{what} has dtype {name}, which aotc does not support ({', '.join(_DTYPES)})")
    return _DTYPES[name]


def to_numpy(t: Any, what: str, share: bool = False) -> np.ndarray:
    """A parameter, buffer or constant as a C-contiguous numpy array in its aotc dtype: a copy, or with ``share`` a
    read-only view of the tensor's memory where no conversion is needed (a weight read once into the artifact: a
    600M-parameter model's weights are not held twice while it compiles)."""
    torch = require_torch()
    t = t.detach()
    if t.device.type == "meta":
        raise UnsupportedError(f"{what} is on the meta device: it has no values to store")
    t = t.cpu().contiguous()
    dt = aotc_dtype(t.dtype, what)
    arr = t.view(torch.int16).numpy().view(dt.np) if t.dtype == torch.bfloat16 else t.numpy()
    if arr.dtype != dt.np:
        return arr.astype(dt.np)
    if not share:
        return arr.copy()
    view = arr.view()
    view.flags.writeable = False  # aotc never writes a weight; this keeps a slip from writing the user's model
    return view
