"""What the ONNX importer and exporter share: the onnx import guard, dtype tables and name rules (the export's
own, which the runtime uses too, are in aotc/ir/onnx_form/)."""

from __future__ import annotations

import re
from types import ModuleType

import numpy as np

from aotc.errors import ModelError, UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.onnx_form.context import unique as unique
from aotc.ir.onnx_form.opset import DTYPE_TO_ONNX, ONNX_TO_DTYPE
from aotc.ir.onnx_form.opset import EXPORT_OPSET as EXPORT_OPSET
from aotc.ir.onnx_form.opset import SYMBOLS_META_KEY as SYMBOLS_META_KEY

# The export's opset, metadata keys and name rule are the emission's (aotc/ir/onnx_form/), named here for the
# importer and tests.

# Import accepts default-domain opsets from 7 (broadcasting Gemm, BatchNormalization without consumed_inputs) up
# to the newest opset the installed onnx package knows.
MIN_IMPORT_OPSET = 7
# A dim_param without a ``--dim name=min:max`` range gets this inclusive range.
DEFAULT_DIM_RANGE = (1, 65536)

_ONNX_INSTALL_HINT = "ONNX support needs the 'onnx' package: pip install 'aotc[compiler]'"


def require_onnx() -> ModuleType:
    """The onnx module, or a clear UnsupportedError when it is not installed."""
    try:
        import onnx
    except ImportError as e:
        raise UnsupportedError(_ONNX_INSTALL_HINT) from e
    return onnx


def onnx_type_name(elem_type: int) -> str:
    onnx = require_onnx()
    try:
        return onnx.TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"type #{elem_type}"


def dtype_from_onnx(elem_type: int, what: str) -> DType:
    """The aotc dtype for an ONNX element type, or UnsupportedError naming ``what``."""
    if elem_type in ONNX_TO_DTYPE:
        return ONNX_TO_DTYPE[elem_type]
    supported = ", ".join(d.value for d in DTYPE_TO_ONNX)
    raise UnsupportedError(f"{what} has element type {onnx_type_name(elem_type)}; aotc supports {supported}")


def np_dtype_from_onnx(elem_type: int, what: str) -> np.dtype:
    onnx = require_onnx()
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        raise UnsupportedError(f"{what} has element type {onnx_type_name(elem_type)}, which aotc cannot hold") from None


def dtype_from_np(dt: np.dtype, what: str) -> DType:
    """The aotc dtype for a numpy dtype (bfloat16 included), or UnsupportedError naming ``what``."""
    name = np.dtype(dt).name
    try:
        return DType(name)
    except ValueError:
        supported = ", ".join(d.value for d in DTYPE_TO_ONNX)
        raise UnsupportedError(f"{what} has dtype {name}; aotc supports {supported}") from None


_NON_IDENT = re.compile(r"[^A-Za-z0-9_]")


def identifier(name: str, fallback: str, allow_dots: bool = False) -> str:
    """``name`` made into an identifier (aotc input and symbol names must be identifiers)."""
    out = re.sub(r"[^A-Za-z0-9_.]" if allow_dots else _NON_IDENT, "_", name)
    if not out or not (out[0].isalpha() or out[0] == "_"):
        out = f"{fallback}_{out}" if out else fallback
    return out


def io_name(name: str, what: str, taken: set[str]) -> str:
    """A graph input or output name, kept exactly as the file spells it (feeds and results use it as onnxruntime
    does); ModelError for an empty, repeated or non-printable one. Adds it to ``taken``."""
    if not name or not name.isprintable():
        raise ModelError(f"{what} name {name!r} must be a non-empty string of printable characters")
    if name in taken:
        raise ModelError(f"{what} name {name!r} is used twice")
    taken.add(name)
    return name
