"""Dim and TensorSpec validation, default hints, and how trace() turns Dims into symbols."""

from __future__ import annotations

import numpy as np
import pytest

import aotc
from aotc import Dim, ShapeError, TensorSpec
from aotc.frontend.trace import pick_hints, trace


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("1x",), {}, "identifier"),
        (("for",), {}, "identifier"),
        ((3,), {}, "identifier"),
        (("s",), {"min": -1}, "0 <= min <= max"),
        (("s",), {"min": 5, "max": 4}, "0 <= min <= max"),
        (("s",), {"max": 2.5}, "must be an int"),
        (("s",), {"multiple_of": 0}, "multiple_of"),
        (("s",), {"min": 9, "max": 15, "multiple_of": 8}, "no multiple of 8"),
        (("s",), {"max": 10, "hint": 11}, "hint 11"),
        (("s",), {"max": 64, "multiple_of": 8, "hint": 12}, "multiple of 8"),
        (("s",), {"max": 64, "hint": 1}, "special"),
    ],
)
def test_bad_dims(args, kwargs, match):
    with pytest.raises(ShapeError, match=match):
        Dim(*args, **kwargs)


def test_hint_zero_or_one_only_when_forced():
    assert Dim("s", min=0, max=1, hint=1).hint == 1
    assert Dim("s", min=1, max=1).default_hint() == 1
    assert Dim("s", min=0, max=1).default_hint() in (0, 1)


@pytest.mark.parametrize(
    ("kwargs", "hint"),
    [
        ({"max": 2048}, 17),
        ({"min": 1, "max": 8}, 7),
        ({"min": 2, "max": 2}, 2),
        ({"min": 1, "max": 4096, "multiple_of": 8}, 136),
        ({"min": 64, "max": 64, "multiple_of": 16}, 64),
        ({"min": 100, "max": 120}, 100),
        ({"max": 2048, "hint": 300}, 300),
    ],
)
def test_default_hint_rule(kwargs, hint):
    d = Dim("s", **kwargs)
    assert d.default_hint() == hint
    assert d.min <= hint <= d.max and hint % d.multiple_of == 0


def test_default_hints_are_distinct_per_trace():
    dims = {"a": Dim("a", 1, 100), "b": Dim("b", 1, 100), "c": Dim("c", 1, 100, hint=19)}
    hints = pick_hints(dims)
    assert hints["c"] == 19
    assert len(set(hints.values())) == 3


@pytest.mark.parametrize(
    ("shape", "dtype", "match"),
    [
        ((2, -1), "float32", "entry 1"),
        ((2, 3.0), "float32", "entry 1"),
        ((True,), "float32", "entry 0"),
        ("ab", "float32", "tuple of ints"),
        ((2,), "float64", "unknown dtype"),
        ((2,), np.float64, "not supported"),
        ((2,), "complex", "unknown dtype"),
    ],
)
def test_bad_tensor_specs(shape, dtype, match):
    with pytest.raises(ShapeError, match=match):
        TensorSpec(shape, dtype)


def test_tensor_spec_accepts_dtype_names_and_members():
    b = Dim("b", 1, 8)
    assert TensorSpec((b, 3), "float16").dtype is aotc.float16
    assert TensorSpec((b, 3), aotc.int64).dtype is aotc.int64
    assert TensorSpec([2, 3], np.dtype("int32")).dtype is aotc.int32
    assert TensorSpec((4,)).dtype is aotc.float32
    assert "b" in repr(TensorSpec((b, 3)))


def test_one_symbol_per_dim_name():
    b = Dim("b", 1, 8)
    g = trace(lambda x, y: x + y, {"x": TensorSpec((b, 3)), "y": TensorSpec((Dim("b", 1, 8), 3))})
    assert [s.name for s in g.symbols] == ["b"]
    assert g.inputs[0].type.shape == g.inputs[1].type.shape


def test_same_name_different_range_is_an_error():
    with pytest.raises(ShapeError, match="same name"):
        trace(lambda x, y: x, {"x": TensorSpec((Dim("b", 1, 8),)), "y": TensorSpec((Dim("b", 1, 16),))})


def test_symbols_keep_range_and_multiple():
    s = Dim("seq", min=16, max=1024, multiple_of=16)
    g = trace(lambda x: x * 2, {"x": TensorSpec((s, 4))})
    (sym,) = g.symbols
    assert (sym.name, sym.min, sym.max, sym.multiple_of) == ("seq", 16, 1024, 16)


@pytest.mark.parametrize(
    "inputs",
    [{}, {"x": (2, 3)}, {"1x": TensorSpec((2,))}, [("x", TensorSpec((2,)))]],
)
def test_bad_input_mappings(inputs):
    with pytest.raises(ShapeError):
        trace(lambda x: x, inputs)
