"""Inputs that are not plain native-order arrays get a GuardError naming the input, what was given and what was
expected; nothing runs for them. An ndarray subclass with no extra meaning (np.matrix) runs as a plain array."""

from __future__ import annotations

import numpy as np
import pytest
from ort_kit import PATHS, executable
from runtime_graphs import artifact_bytes, make_graph

import aotc.runtime
from aotc.errors import GuardError
from aotc.ir import DType, Op, Symbol, TensorType, sym

F32 = DType.float32
WANT = r"expected a numpy array of float32 with shape \(n, 2\)"


@pytest.fixture(scope="module", params=PATHS)
def exe(request: pytest.FixtureRequest) -> aotc.runtime.Executable:
    # a reduction over an np.matrix left as one fails inside numpy (matrix.sum takes no keepdims)
    g = make_graph(
        {"x": TensorType(F32, (sym("n"), 2)), "y": TensorType(F32, (sym("n"), 2))},
        lambda b, x, y: [b.op(Op.REDUCE_SUM, b.op(Op.MUL, x, y), axes=(0,), keepdim=False)],
        symbols=(Symbol("n", 1, 8),),
    )
    return executable(artifact_bytes(g), request.param)


def good() -> np.ndarray:
    return np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)


def refused(exe: aotc.runtime.Executable, x: object, message: str) -> None:
    with pytest.raises(GuardError, match=message):
        exe(x=x, y=good())
    with pytest.raises(GuardError, match=message):
        exe.check({"x": x, "y": good()})


def test_big_endian_float32_says_byte_order_and_how_to_convert(exe) -> None:
    refused(
        exe,
        good().astype(">f4"),
        r"^input 'x' has dtype '>f4' \(float32 in non-native byte order\), expected float32 in native byte order; "
        r"convert it with x\.astype\(np\.float32\)$",
    )
    np.testing.assert_array_equal(exe(x=good().astype(">f4").astype(np.float32), y=good())[0], [10.0, 20.0])


def test_none_says_none(exe) -> None:
    refused(exe, None, rf"^input 'x' is None, {WANT}$")


def test_str_and_bytes_say_what_they_are(exe) -> None:
    refused(exe, "hello", rf"^input 'x' is a str \('hello'\), {WANT}$")
    refused(exe, b"\x00" * 100, rf"^input 'x' is a bytes \(b'\\x00.*\.\.\.\), {WANT}$")
    refused(exe, np.array([["a", "b"]]), rf"^input 'x' is a numpy array of dtype <U1, {WANT}$")


def test_masked_array_is_refused_with_the_two_ways_out(exe) -> None:
    masked = np.ma.masked_array(good(), mask=[[False, True], [False, False]])
    refused(exe, masked, rf"^input 'x' is a numpy masked array, {WANT}; pass x\.filled\(value\) .* or x\.data ")
    refused(exe, np.ma.masked_array(good()), "numpy masked array")  # no mask set: still refused, never guessed


def test_objects_and_ragged_lists_say_what_was_given(exe) -> None:
    refused(exe, object(), rf"^input 'x' is an object, {WANT}$")
    refused(exe, [[1.0, 2.0], [3.0]], rf"^input 'x' is a list, which is not an array \(.*\); {WANT}$")


def test_rank_message_shows_the_shape_given(exe) -> None:
    refused(
        exe, np.zeros((2, 2, 1), np.float32), r"^input 'x' has shape \(2, 2, 1\) \(rank 3\), expected rank 2: \(n, 2\)$"
    )


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix itself warns on creation
def test_matrix_subclass_runs_as_a_plain_array(exe) -> None:
    (out,) = exe(x=np.matrix(good()), y=np.matrix(good()))
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, [10.0, 20.0])


def test_check_runs_nothing_and_accepts_zero_stride_stand_ins(exe) -> None:
    stand_in = np.broadcast_to(np.zeros((), np.float32), (8, 2))
    exe.check({"x": stand_in, "y": stand_in})
    with pytest.raises(GuardError, match=r"input 'x' dim 0 \(n\) = 9 is outside \[1, 8\]"):
        exe.check({"x": np.broadcast_to(np.zeros((), np.float32), (9, 2)), "y": stand_in})
    with pytest.raises(GuardError, match="check\\(\\) takes a mapping"):
        exe.check([stand_in, stand_in])  # type: ignore[arg-type]
