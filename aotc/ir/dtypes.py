"""Element types and PyTorch-style type promotion."""

from __future__ import annotations

import enum
from functools import cache

import numpy as np

from aotc.errors import ShapeError


class DType(enum.Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int32 = "int32"
    int64 = "int64"
    bool = "bool"

    # Members are singletons compared by identity, so identity hashing is exact; Enum's own __hash__ is a
    # Python call (hash of the name), paid on every TensorType hash in shape inference and graph reading.
    __hash__ = object.__hash__

    @property
    def np(self) -> np.dtype:
        return _np_dtype(self)

    @property
    def itemsize(self) -> int:
        return 1 if self is DType.bool else _np_dtype(self).itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOAT_DTYPES

    @property
    def is_int(self) -> bool:
        return self in (DType.int32, DType.int64)

    def __repr__(self) -> str:
        return f"aotc.{self.value}"


FLOAT_DTYPES = frozenset({DType.float32, DType.float16, DType.bfloat16})


@cache
def _np_dtype(dt: DType) -> np.dtype:
    if dt is DType.bfloat16:
        # ml_dtypes is imported only when bfloat16 is used, so a runtime-only
        # install that never sees bfloat16 needs nothing beyond numpy.
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dt.value)


def dtype_of(x: object) -> DType:
    """A DType from a DType, its name, or a numpy dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        try:
            return DType(x)
        except ValueError:
            raise ShapeError(f"unknown dtype {x!r}; expected one of {[d.value for d in DType]}") from None
    try:
        npd = np.dtype(x)
    except (TypeError, ValueError):  # e.g. a malformed structured-dtype spec raises ValueError
        raise ShapeError(f"unknown dtype {x!r}") from None
    if npd.name == "bfloat16":
        return DType.bfloat16
    try:
        return DType(npd.name)
    except ValueError:
        raise ShapeError(f"dtype {npd.name} is not supported by aotc") from None


_FLOAT_RANK = {DType.float16: 1, DType.bfloat16: 1, DType.float32: 2}


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary op on two tensors, as torch.result_type does."""
    if a is b:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if {a, b} == {DType.float16, DType.bfloat16}:
                return DType.float32
            return a if _FLOAT_RANK[a] >= _FLOAT_RANK[b] else b
        return a if a.is_float else b
    if a is DType.bool:
        return b
    if b is DType.bool:
        return a
    return DType.int64
