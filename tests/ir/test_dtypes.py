"""DType properties, dtype_of, and promote() against torch.result_type's rules written out by hand."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType, dtype_of, promote

F32, F16, BF16, I32, I64, BOOL = DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.int64, DType.bool

# torch.result_type for two tensors: bool < int32 < int64 < float16 / bfloat16 < float32, a float
# always beats an int, and float16 with bfloat16 meets at float32 (neither holds the other).
ORDER = (F32, F16, BF16, I32, I64, BOOL)
TABLE = {
    F32: (F32, F32, F32, F32, F32, F32),
    F16: (F32, F16, F32, F16, F16, F16),
    BF16: (F32, F32, BF16, BF16, BF16, BF16),
    I32: (F32, F16, BF16, I32, I64, I32),
    I64: (F32, F16, BF16, I64, I64, I64),
    BOOL: (F32, F16, BF16, I32, I64, BOOL),
}


@pytest.mark.parametrize(("a", "b"), list(itertools.product(ORDER, ORDER)), ids=lambda d: d.value)
def test_promote_matches_torch_result_type(a: DType, b: DType) -> None:
    assert promote(a, b) is TABLE[a][ORDER.index(b)]


def test_promote_table_is_symmetric_and_idempotent() -> None:
    for a, b in itertools.product(ORDER, ORDER):
        assert promote(a, b) is promote(b, a)
        assert promote(a, promote(a, b)) is promote(a, b)
    for a in ORDER:
        assert promote(a, a) is a


@pytest.mark.parametrize(
    ("x", "want"),
    [
        ("float32", F32),
        ("float16", F16),
        ("bfloat16", BF16),
        ("int32", I32),
        ("int64", I64),
        ("bool", BOOL),
        (F16, F16),
        (np.float32, F32),
        (np.dtype("float16"), F16),
        (np.dtype(ml_dtypes.bfloat16), BF16),
        (ml_dtypes.bfloat16, BF16),
        (np.int32, I32),
        (np.dtype("int64"), I64),
        (np.bool_, BOOL),
        (bool, BOOL),
        (np.dtype("<f4"), F32),
    ],
)
def test_dtype_of_accepts_names_dtypes_and_numpy_types(x: object, want: DType) -> None:
    assert dtype_of(x) is want


@pytest.mark.parametrize(
    "x",
    [
        "float64",
        "Float32",
        "f32",
        "",
        "int8",
        np.float64,
        np.dtype("uint8"),
        np.dtype("int8"),
        np.complex64,
        np.dtype("<U3"),
        np.dtype([("a", "f4")]),
        (np.int32, (2,)),
        5,
        3.5,
        None,
        object(),
        [1, 2],
        {"names": ["a"], "formats": ["q"], "offsets": [-1]},
    ],
    ids=repr,
)
def test_dtype_of_rejects_everything_else_with_shape_error(x: object) -> None:
    with pytest.raises(ShapeError):
        dtype_of(x)


def test_dtype_properties() -> None:
    assert [d.np for d in ORDER] == [
        np.dtype(np.float32),
        np.dtype(np.float16),
        np.dtype(ml_dtypes.bfloat16),
        np.dtype(np.int32),
        np.dtype(np.int64),
        np.dtype(np.bool_),
    ]
    assert [d.itemsize for d in ORDER] == [4, 2, 2, 4, 8, 1]
    assert {d for d in ORDER if d.is_float} == {F32, F16, BF16}
    assert {d for d in ORDER if d.is_int} == {I32, I64}
    assert not BOOL.is_float and not BOOL.is_int
    assert repr(BF16) == "aotc.bfloat16"
    for d in ORDER:
        assert dtype_of(d.np) is d and dtype_of(d.value) is d
