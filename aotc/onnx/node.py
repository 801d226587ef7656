"""One ONNX node as converters see it: decoded attributes and operands that are graph values or known tensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.errors import UnsupportedError
from aotc.ir.symbolic import SymExpr
from aotc.ir.types import Value


@dataclass(frozen=True, eq=False)
class Known:
    """A tensor whose value the importer knows.

    Integer tensors computed from shapes (``Shape -> Gather -> Concat``) may hold ``SymExpr`` elements; their
    array is then an object array of Python ints and SymExprs. ``dtype`` is the ONNX element type as numpy
    sees it, which may be one aotc cannot run (a float64 constant that a Cast folds away is fine).
    """

    array: np.ndarray
    dtype: np.dtype

    @staticmethod
    def of(array: Any, dtype: Any = None) -> Known:
        """A Known with object arrays turned back into plain arrays when no element is symbolic."""
        arr = np.asarray(array)
        dt = np.dtype(dtype) if dtype is not None else arr.dtype
        if arr.dtype == object:
            if not any(isinstance(x, SymExpr) for x in arr.flat):
                arr = np.asarray(arr.tolist() if arr.ndim else arr.item(), dtype=dt).reshape(arr.shape)
        elif arr.dtype != dt:
            arr = arr.astype(dt)
        return Known(arr, dt)

    @property
    def symbolic(self) -> bool:
        return self.array.dtype == object

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def elements(self) -> np.ndarray:
        """An object array of Python ints / SymExprs (integer tensors) or Python scalars."""
        if self.symbolic:
            return self.array
        return np.asarray(self.array.tolist() if self.array.ndim else self.array.item(), dtype=object).reshape(
            self.shape
        )


Operand = Value | Known


class NeedsKnownInput(UnsupportedError):
    """An input aotc needs at compile time (a shape, axes, pads...) is computed at run time.

    ``input_names`` lists the graph inputs that value is computed from (itself, when it is one), if they are all
    small enough to compile a model per value: ``import_onnx(constant_inputs=...)`` fixing them makes it known.
    Empty when it depends on no graph input or on a large one.
    """

    def __init__(self, message: str, value: Value) -> None:
        super().__init__(message)
        self.value = value
        self.input_names: tuple[str, ...] = ()


def decode_attr(attr: Any) -> Any:
    """An AttributeProto as a plain Python value (str for strings, numpy arrays for tensors)."""
    import onnx
    from onnx import numpy_helper

    v = onnx.helper.get_attribute_value(attr)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


@dataclass
class OnnxNode:
    """A node being imported. ``inputs`` holds None for an omitted optional input."""

    op_type: str
    name: str
    inputs: list[Operand | None]
    outputs: list[str]
    attrs: dict[str, Any]
    opset: int
    proto: Any = None  # the NodeProto, for folding it with ONNX's reference implementation

    @property
    def label(self) -> str:
        return f"{self.op_type} node {self.name!r}"

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def input(self, i: int) -> Operand | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def wants(self, i: int) -> bool:
        """Whether output ``i`` is present (ONNX marks a skipped optional output with an empty name)."""
        return i < len(self.outputs) and self.outputs[i] != ""

    def fail(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"{self.label}: {what}")

    def known(self, i: int, what: str) -> Known | None:
        """Input ``i`` as a Known (None if absent); a runtime value raises UnsupportedError."""
        x = self.input(i)
        if x is None or isinstance(x, Known):
            return x
        raise NeedsKnownInput(
            f"{self.label}: input {i} ({what}) must be known at compile time (a constant or computed from shapes)", x
        )

    def ints(self, i: int, what: str) -> tuple[int | SymExpr, ...] | None:
        """A known integer input as a flat tuple of ints and SymExprs; None if absent."""
        k = self.known(i, what)
        if k is None:
            return None
        if k.dtype.kind not in "iu":
            raise self.fail(f"input {i} ({what}) must be an integer tensor, got {k.dtype}")
        return tuple(k.elements().reshape(-1).tolist())

    def static_ints(self, i: int, what: str) -> tuple[int, ...] | None:
        vals = self.ints(i, what)
        if vals is not None and any(isinstance(v, SymExpr) for v in vals):
            raise self.fail(f"input {i} ({what}) must not depend on dynamic dims, got {[str(v) for v in vals]}")
        return vals  # type: ignore[return-value]

    def scalar(self, i: int, what: str, default: Any = None) -> Any:
        """A known scalar input as a Python number (default when absent)."""
        k = self.known(i, what)
        if k is None:
            return default
        if k.array.size != 1:
            raise self.fail(f"input {i} ({what}) must hold one element, got shape {k.shape}")
        v = k.elements().reshape(-1)[0]
        return v

    def axes(self, input_index: int, since: int, default: Sequence[int] | None = None) -> tuple[int, ...] | None:
        """``axes`` from the attribute (opsets before ``since``) or from input ``input_index``."""
        if self.opset >= since:
            vals = self.static_ints(input_index, "axes")
            return tuple(vals) if vals is not None else (tuple(default) if default is not None else None)
        a = self.attr("axes")
        return tuple(a) if a is not None else (tuple(default) if default is not None else None)
