"""Tensor methods that differ only in the op or dtype they apply, generated from tables (``tensor.Tensor`` takes them)."""

from __future__ import annotations

from typing import Any

from aotc.frontend import elementwise as ew
from aotc.frontend.tensor_base import TensorBase
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op

_UNARY_METHODS = {
    "exp": Op.EXP,
    "log": Op.LOG,
    "sqrt": Op.SQRT,
    "rsqrt": Op.RSQRT,
    "reciprocal": Op.RECIPROCAL,
    "sin": Op.SIN,
    "cos": Op.COS,
    "tanh": Op.TANH,
    "erf": Op.ERF,
    "acos": Op.ACOS,
    "asin": Op.ASIN,
    "atan": Op.ATAN,
    "sigmoid": Op.SIGMOID,
    "relu": Op.RELU,
    "neg": Op.NEG,
    "abs": Op.ABS,
    "floor": Op.FLOOR,
    "ceil": Op.CEIL,
    "round": Op.ROUND,
    "sign": Op.SIGN,
    "isnan": Op.ISNAN,
    "isinf": Op.ISINF,
}


def _unary_method(name: str, op: Op) -> Any:
    def method(self: TensorBase) -> TensorBase:
        return ew.unary(op, self)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Elementwise {name} (torch.Tensor.{name})."
    return method


_BINARY_METHODS = {
    "eq": Op.EQ,
    "ne": Op.NE,
    "lt": Op.LT,
    "le": Op.LE,
    "gt": Op.GT,
    "ge": Op.GE,
    "maximum": Op.MAXIMUM,
    "minimum": Op.MINIMUM,
    "fmod": Op.FMOD,
}
_CAST_METHODS = {
    "float": DType.float32,
    "half": DType.float16,
    "bfloat16": DType.bfloat16,
    "int": DType.int32,
    "long": DType.int64,
    "bool": DType.bool,
}


def _binary_method(name: str, op: Op) -> Any:
    def method(self: TensorBase, other: Any) -> TensorBase:
        return ew.binary(op, self, other)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Elementwise {name} with broadcasting and type promotion (torch.Tensor.{name})."
    return method


def _cast_method(name: str, dtype: DType) -> Any:
    def method(self: TensorBase) -> TensorBase:
        return ew.cast(self, dtype)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"This tensor as {dtype.value} (torch.Tensor.{name})."
    return method


def table_methods() -> dict[str, Any]:
    """Each table's methods by name."""
    return {
        **{name: _unary_method(name, op) for name, op in _UNARY_METHODS.items()},
        **{name: _binary_method(name, op) for name, op in _BINARY_METHODS.items()},
        **{name: _cast_method(name, dt) for name, dt in _CAST_METHODS.items()},
    }
