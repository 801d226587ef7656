"""Tensor methods that differ only in the op or dtype they apply, generated from tables and set on ``Tensor``."""

from __future__ import annotations

from typing import Any

from aotc.frontend import elementwise as ew
from aotc.frontend.tensor import Tensor
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
    def method(self: Tensor) -> Tensor:
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
    def method(self: Tensor, other: Any) -> Tensor:
        return ew.binary(op, self, other)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Elementwise {name} with broadcasting and type promotion (torch.Tensor.{name})."
    return method


def _cast_method(name: str, dtype: DType) -> Any:
    def method(self: Tensor) -> Tensor:
        return ew.cast(self, dtype)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"This tensor as {dtype.value} (torch.Tensor.{name})."
    return method


for _name, _op in _UNARY_METHODS.items():
    setattr(Tensor, _name, _unary_method(_name, _op))
for _name, _op in _BINARY_METHODS.items():
    setattr(Tensor, _name, _binary_method(_name, _op))
for _name, _dt in _CAST_METHODS.items():
    setattr(Tensor, _name, _cast_method(_name, _dt))
