"""State of one ONNX export: emitted nodes, initializers, tensor names, and symbolic dims as ONNX tensors.

A symbolic dim (``2*seq + 1``) that an op needs as data — a Reshape target, a Slice bound, a mean's divisor —
is computed in the exported graph from ``Shape`` of a graph input that has that symbol as a dim, so the
exported file really is dynamic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.onnx_form import proto
from aotc.ir.onnx_form.opset import DTYPE_TO_ONNX, accepts
from aotc.ir.symbolic import Atom, SymExpr
from aotc.ir.types import ShapeDim, Value
from aotc.ir.verify import graph_ctx

INT64_MIN = np.iinfo(np.int64).min
HALF = (DType.float16, DType.bfloat16)


class ExportCtx:
    """Collects the ONNX graph being written; names are unique across values, nodes and initializers."""

    def __init__(self, graph: Graph, weights_as_inputs: bool = False, float32: bool = False) -> None:
        self.graph = graph
        # The weights are graph inputs (build.build_model): emitters pick forms that read them unfolded.
        self.weights_as_inputs = weights_as_inputs
        # Values onnxruntime holds as constants of its own: the session weights and what it folds from them
        # (build.build_model fills it); emitters read them as constants, not as inputs.
        self.held: frozenset[int] = frozenset()
        # Half-precision tensors are written as float32 ones (build.build_model); ``widened`` gathers their dtypes.
        self.float32 = float32
        self.widened: set[DType] = set()
        self.shape_ctx = graph_ctx(graph)
        self.nodes: list[proto.Message] = []
        self.initializers: list[tuple[str, np.ndarray]] = []
        self.taken: set[str] = set()
        self._tried: dict[str, int] = {}  # name -> the suffix its next fresh copy starts at (unique)
        self.names: dict[int, str] = {}
        self.next_id = graph.max_value_id() + 1
        self._scalars: dict[tuple, str] = {}
        self._dims: dict[Any, str] = {}
        self._sources: dict[str, tuple[str, int]] = {}

    def holds(self, value: Value) -> bool:
        """Whether onnxruntime holds ``value`` as a constant: an initializer, or a fold of session weights."""
        return not self.weights_as_inputs or value.id in self.held

    # -- names and nodes ------------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        return unique(hint, self.taken, self._tried)

    def add(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | int = 1, **attrs: Any) -> list[str]:
        """Append a node; ``outputs`` is a list of names or a count of fresh ones. Returns the output names."""
        outs = (
            [self.fresh(f"{op_type.lower()}_out") for _ in range(outputs)]
            if isinstance(outputs, int)
            else list(outputs)
        )
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(proto.node(op_type, inputs, outs, self.fresh(op_type), attrs))
        return outs

    def one(self, op_type: str, inputs: Sequence[str], out: str | None = None, **attrs: Any) -> str:
        return self.add(op_type, inputs, [out] if out else 1, **attrs)[0]

    # -- constants ----------------------------------------------------------------------------------------
    def initializer(self, array: np.ndarray, name: str) -> str:
        array = np.asarray(array)
        if self.float32 and array.dtype.name in ("float16", "bfloat16"):  # by name: bfloat16 is ml_dtypes'
            self.widened.add(DType(array.dtype.name))
            array = array.astype(np.float32)
        self.initializers.append((name, array))
        return name

    def const(self, array: Any, dtype: DType | None = None) -> str:
        """A small constant (cached by value), e.g. an axes list or a scalar operand."""
        arr = np.asarray(array, dtype=dtype.np if dtype is not None else None)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._scalars:
            self._scalars[key] = self.initializer(arr, self.fresh("const"))
        return self._scalars[key]

    def i64(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(len(values)))

    def scalar(self, value: Any, dtype: DType) -> str:
        return self.const(np.asarray(value, dtype=dtype.np))

    # -- symbolic dims as tensors ---------------------------------------------------------------------------
    def add_symbol_source(self, name: str, tensor: str, axis: int) -> None:
        self._sources.setdefault(name, (tensor, axis))

    def dim(self, d: ShapeDim) -> str:
        """A 1-element int64 tensor holding the dim's value (computed at run time when symbolic)."""
        if isinstance(d, int):
            return self.i64([d])
        if d not in self._dims:
            self._dims[d] = self._expr(d)
        return self._dims[d]

    def shape(self, dims: Sequence[ShapeDim]) -> str:
        """A 1-D int64 tensor of the dims."""
        if all(isinstance(d, int) for d in dims):
            return self.i64(dims)
        key = ("shape", tuple(dims))
        if key not in self._dims:
            self._dims[key] = self.one("Concat", [self.dim(d) for d in dims], axis=0)
        return self._dims[key]

    def dim_scalar(self, d: ShapeDim) -> str:
        """A 0-D int64 tensor holding the dim's value."""
        return self.one("Reshape", [self.dim(d), self.i64([])])

    def _expr(self, e: SymExpr) -> str:
        total = self.i64([e.const]) if e.const else None
        for mono, coeff in e.terms:
            term = None
            for atom in mono:
                a = self._atom(atom)
                term = a if term is None else self.one("Mul", [term, a])
            if coeff != 1:
                term = self.one("Mul", [term, self.i64([coeff])])
            total = term if total is None else self.one("Add", [total, term])
        return total

    def _atom(self, atom: Atom) -> str:
        if atom.kind == "sym":
            if atom.name not in self._sources:
                raise UnsupportedError(f"symbol {atom.name!r} is no graph input's dim, so ONNX can't compute it")
            tensor, axis = self._sources[atom.name]
            return self.one("Shape", [tensor], start=axis, end=axis + 1)
        if atom.kind in ("fdiv", "mod"):
            num, d = self.dim(atom.args[0]), self.i64([atom.args[1]])
            # integer Mod with fmod=0 takes the divisor's sign, so num - num mod d is an exact multiple of d
            m = self.one("Mod", [num, d], fmod=0)
            if atom.kind == "mod":
                return m
            return self.one("Div", [self.one("Sub", [num, m]), d])
        x, y = self.dim(atom.args[0]), self.dim(atom.args[1])
        return self.one("Min" if atom.kind == "min" else "Max", [x, y])

    # -- types ---------------------------------------------------------------------------------------------
    def elem_type(self, dtype: DType) -> int:
        """The ONNX element type that holds ``dtype`` in this model (float32 for a half one when widening)."""
        if self.float32 and dtype in HALF:
            self.widened.add(dtype)
            return DTYPE_TO_ONNX[DType.float32]
        return DTYPE_TO_ONNX[dtype]

    def array_elem_type(self, array: np.ndarray, name: str) -> int:
        try:
            return DTYPE_TO_ONNX[DType(array.dtype.name)]
        except ValueError:
            supported = ", ".join(d.value for d in DTYPE_TO_ONNX)
            raise UnsupportedError(f"constant {name!r} has dtype {array.dtype.name}; aotc writes {supported}") from None

    def accepts(self, op_type: str, dtype: DType) -> bool:
        """Whether ``op_type`` at the export opset takes ``dtype`` (as this model holds it) for its first input."""
        return accepts(op_type, DType.float32 if self.float32 and dtype in HALF else dtype)


def unique(name: str, taken: set[str], tried: dict[str, int] | None = None) -> str:
    """``name``, or ``name_2``, ``name_3``... whichever is not yet in ``taken``; adds it to ``taken``. ``tried``
    keeps, per name, the suffix the next search starts at (the ones below it are taken, and stay taken), so a graph
    of 100,000 reshapes names its nodes in linear time, not quadratic (Zamba's 76 layers took minutes here)."""
    i = 2 if tried is None else tried.get(name, 2)
    out = name if i == 2 else f"{name}_{i}"
    while out in taken:
        out = f"{name}_{i}"
        i += 1
    taken.add(out)
    if tried is not None:
        tried[name] = i
    return out
