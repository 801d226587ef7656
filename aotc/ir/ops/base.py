"""The op enum and the shape of one op-table entry."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.shapes import ShapeCtx
from aotc.ir.types import Attrs, TensorType


class Op(enum.Enum):
    # elementwise unary
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    SIN = "sin"
    COS = "cos"
    TANH = "tanh"
    ERF = "erf"
    ACOS = "acos"
    ASIN = "asin"
    ATAN = "atan"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    SIGN = "sign"
    NOT = "not"
    ISNAN = "isnan"
    ISINF = "isinf"
    # elementwise binary
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    MOD = "mod"
    FMOD = "fmod"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    AND = "and"
    OR = "or"
    XOR = "xor"
    # other elementwise
    WHERE = "where"
    CAST = "cast"
    # reductions
    REDUCE_SUM = "reduce_sum"
    REDUCE_MAX = "reduce_max"
    REDUCE_MIN = "reduce_min"
    REDUCE_PROD = "reduce_prod"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    # layout and data movement
    RESHAPE = "reshape"
    PERMUTE = "permute"
    BROADCAST = "broadcast"
    SLICE = "slice"
    PAD = "pad"
    CONCAT = "concat"
    FLIP = "flip"
    GATHER = "gather"
    SCATTER = "scatter"
    # sources
    IOTA = "iota"
    FULL = "full"
    CONSTANT = "constant"
    # contractions
    MATMUL = "matmul"
    CONV = "conv"
    # high-level (decomposed before kernels)
    LINEAR = "linear"
    RELU = "relu"
    GELU = "gelu"
    SILU = "silu"
    SIGMOID = "sigmoid"
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    EMBEDDING = "embedding"
    SDPA = "scaled_dot_product_attention"
    CONV2D = "conv2d"
    MAX_POOL2D = "max_pool2d"
    AVG_POOL2D = "avg_pool2d"
    BATCH_NORM = "batch_norm"
    REDUCE_MEAN = "reduce_mean"
    TRIL = "tril"
    TRIU = "triu"

    # Identity hashing is exact for singleton members; Enum's __hash__ is a Python call on every dict lookup.
    __hash__ = object.__hash__


class OpKind(enum.Enum):
    """What a kernel does with an op (DESIGN §6); a high-level op has the kind of what it is.

    POINTWISE: each output element from the same-index input elements (broadcast aside).
    REDUCTION: output elements combine a row or window of inputs (reductions, softmax, norms, pooling).
    VIEW: a data-independent re-indexing of its inputs (reshape, permute, broadcast, slice, flip, pad, concat):
    index math in its consumer, never a kernel of its own.
    INDEX: data movement driven by index tensors (gather, scatter, embedding); indices are checked at run time.
    CONTRACTION: matmul-like sums of products (matmul, linear, conv, attention).
    SOURCE: no tensor inputs (iota, full, constant).
    """

    POINTWISE = "pointwise"
    REDUCTION = "reduction"
    VIEW = "view"
    INDEX = "index"
    CONTRACTION = "contraction"
    SOURCE = "source"

    # Identity hashing is exact for singleton members; Enum's __hash__ is a Python call on every dict lookup.
    __hash__ = object.__hash__


InferFn = Callable[[Sequence[TensorType], Attrs, ShapeCtx], tuple[TensorType, ...]]
RefFn = Callable[[Sequence[np.ndarray], Attrs], tuple[np.ndarray, ...]]
# A decomposition gets a builder (aotc.ir.builder.Builder), input values and attrs.
DecomposeFn = Callable[[Any, Sequence[Any], Attrs], tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class OpDef:
    """One entry of the op table.

    ``ref`` is the numpy reference, called with concrete attrs (symbolic attrs
    already evaluated). ``decompose`` is set only for high-level ops.
    ``arity`` is (min, max) inputs; max None means variadic. ``kind`` (keyword-only) says
    what a kernel does with it.
    """

    op: Op
    infer: InferFn
    ref: RefFn
    arity: tuple[int, int | None]
    decompose: DecomposeFn | None = None
    onnx: str | None = None
    attrs: tuple[str, ...] = ()
    kind: OpKind = field(kw_only=True)

    @property
    def primitive(self) -> bool:
        return self.decompose is None


def one(dtype: DType, shape: tuple) -> tuple[TensorType, ...]:
    return (TensorType(dtype, tuple(shape)),)


def same_dtype(types: Sequence[TensorType], what: str) -> DType:
    dts = {t.dtype for t in types}
    if len(dts) != 1:
        raise ShapeError(f"{what}: inputs must share one dtype, got {sorted(d.value for d in dts)}")
    return types[0].dtype


def require_float(t: TensorType, what: str) -> None:
    if not t.dtype.is_float:
        raise ShapeError(f"{what} needs a floating-point input, got {t.dtype.value}")


def number_attr(attrs: Attrs, key: str, default: float | None, finite: bool = True) -> float | None:
    """A real-valued attr (eps, scale, pad value): an int or float, finite unless allowed otherwise."""
    v = attrs.get(key, default)
    if v is None and default is None:
        return None
    if isinstance(v, bool) and not finite:
        return v  # a bool tensor's pad value
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (finite and not math.isfinite(v)):
        raise ShapeError(f"attr {key!r} must be a {'finite ' if finite else ''}number, got {v!r}")
    return v


def acc(x: np.ndarray) -> np.ndarray:
    """Half-precision inputs are computed in float32, as GPU kernels accumulate."""
    return x.astype(np.float32) if is_half(x.dtype) else x


def is_half(dt: np.dtype) -> bool:
    return dt == np.float16 or dt.name == "bfloat16"
