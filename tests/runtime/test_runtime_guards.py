"""Every input check raises GuardError with a message naming input, dim, value and constraint, and
nothing runs: the backend is never called for inputs that break a guard."""

from __future__ import annotations

import numpy as np
import pytest
from ort_kit import PATHS, executable
from runtime_graphs import artifact_bytes, make_graph

import aotc.runtime
from aotc.errors import ArtifactError, GuardError
from aotc.ir import DType, Guard, Op, Symbol, TensorType, sym
from aotc.runtime.backends.cpu import CpuProgram
from aotc.runtime.backends.onnxrt import OrtProgram

F32, I64, BOOL = DType.float32, DType.int64, DType.bool
batch, seq, n = sym("batch"), sym("seq"), sym("n")


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, int]]:
    """The symbol bindings the backend was called with (the real run still happens), on either cpu path."""
    calls: list[dict[str, int]] = []
    for program in (CpuProgram, OrtProgram):

        def spy(self, feeds, env, real=program.run):
            calls.append(dict(env))
            return real(self, feeds, env)

        monkeypatch.setattr(program, "run", spy)
    return calls


@pytest.fixture(scope="module", params=PATHS)
def exe(request: pytest.FixtureRequest) -> aotc.runtime.Executable:
    def body(b, x, mask):
        s = b.op(Op.REDUCE_SUM, x, axes=(2,), keepdim=False)
        return [b.op(Op.WHERE, mask, s, b.full(0.0, F32))]

    g = make_graph(
        {"x": TensorType(F32, (batch, seq, 256)), "mask": TensorType(BOOL, (batch, seq))},
        body,
        symbols=(Symbol("batch", 1, 8), Symbol("seq", 1, 2048, multiple_of=16)),
        guards=(Guard(seq, "<=", 128, "model.py:12"),),
    )
    return executable(artifact_bytes(g), request.param)


def x(b: int = 2, s: int = 16, d: int = 256, dtype: type = np.float32) -> np.ndarray:
    return np.ones((b, s, d), dtype)


def mask(b: int = 2, s: int = 16) -> np.ndarray:
    return np.ones((b, s), bool)


def refused(runs: list, fn, match: str) -> None:
    with pytest.raises(GuardError, match=match):
        fn()
    assert runs == [], "the backend ran for inputs that break a guard"


def test_good_inputs_run(exe, runs) -> None:
    (out,) = exe(x(), mask())
    np.testing.assert_array_equal(out, np.full((2, 16), 256.0, np.float32))
    assert runs == [{"batch": 2, "seq": 16}]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"x": x(s=4096), "mask": mask(s=4096)}, r"^input 'x' dim 1 \(seq\) = 4096 is outside \[1, 2048\]$"),
        ({"x": x(s=30), "mask": mask(s=30)}, r"^input 'x' dim 1 \(seq\) = 30 is not a multiple of 16$"),
        ({"x": x(b=9), "mask": mask(b=9)}, r"^input 'x' dim 0 \(batch\) = 9 is outside \[1, 8\]$"),
        ({"x": x(b=0), "mask": mask(b=0)}, r"^input 'x' dim 0 \(batch\) = 0 is outside \[1, 8\]$"),
        (
            {"x": np.ones((2, 16), np.float32), "mask": mask()},
            r"^input 'x' has shape \(2, 16\) \(rank 2\), expected rank 3: \(batch, seq, 256\)$",
        ),
        ({"x": x(dtype=np.float64), "mask": mask()}, r"^input 'x' has dtype float64, expected float32$"),
        ({"x": x(), "mask": mask().astype(np.uint8)}, r"^input 'mask' has dtype uint8, expected bool$"),
        ({"x": x(d=255), "mask": mask()}, r"^input 'x' dim 2 = 255, expected 256$"),
        ({"x": x(b=2), "mask": mask(b=3)}, r"^input 'mask' dim 0 \(batch\) = 3, but input 'x' dim 0 \(batch\) = 2$"),
        ({"x": x(s=32), "mask": mask(s=16)}, r"^input 'mask' dim 1 \(seq\) = 16, but input 'x' dim 1 \(seq\) = 32$"),
        (
            {"x": x(s=208), "mask": mask(s=208)},
            r"^input 'x' dim 1 \(seq\) = 208 breaks guard seq <= 128 \(recorded at model\.py:12\)$",
        ),
    ],
    ids=[
        "range-hi",
        "multiple",
        "batch-hi",
        "batch-zero",
        "rank",
        "dtype",
        "dtype-bool",
        "static",
        "consistent",
        "consistent-seq",
        "guard",
    ],
)
def test_guard_failures(exe, runs, inputs, message) -> None:
    refused(runs, lambda: exe(**inputs), message)
    refused(runs, lambda: exe.run(inputs), message)


def test_argument_errors(exe, runs) -> None:
    refused(runs, lambda: exe(x()), r"missing input\(s\) 'mask'; the model takes x, mask")
    refused(runs, lambda: exe(x(), mask(), y=1), r"unknown input\(s\) 'y'")
    refused(runs, lambda: exe(x(), mask(), mask()), "got 3 positional inputs, but the model takes 2: x, mask")
    refused(runs, lambda: exe(x(), mask(), x=x()), "input 'x' is given both by position and by name")
    refused(runs, lambda: exe.run({"x": x()}), r"missing input\(s\) 'mask'")
    refused(runs, lambda: exe.run([x(), mask()]), "run\\(\\) takes a mapping")


def test_non_arrays(exe, runs) -> None:
    want = r"expected a numpy array of float32 with shape \(batch, seq, 256\)"
    refused(
        runs,
        lambda: exe(x=[[[1.0], [2.0, 3.0]]], mask=mask()),
        rf"^input 'x' is a list, which is not an array .*{want}$",
    )
    refused(runs, lambda: exe(x=x().tolist(), mask=mask()), "input 'x' has dtype float64, expected float32")
    refused(runs, lambda: exe(x=object(), mask=mask()), rf"^input 'x' is an object, {want}$")


@pytest.mark.parametrize("path", PATHS)
def test_anything_asarray_takes_is_accepted_without_casting(runs, path) -> None:
    g = make_graph(
        {"i": TensorType(I64, (n,)), "flag": TensorType(BOOL, ())}, lambda b, i, f: [i], symbols=(Symbol("n", 1, 9),)
    )
    exe = executable(artifact_bytes(g), path)
    (out,) = exe(i=[1, 2, 3], flag=True)
    np.testing.assert_array_equal(out, [1, 2, 3])
    assert out.dtype == np.int64
    refused([], lambda: exe(i=np.array([1, 2], np.int32), flag=True), "input 'i' has dtype int32, expected int64")
    refused([], lambda: exe(i=[1.5], flag=True), "input 'i' has dtype float64, expected int64")
    assert len(runs) == 1


def test_derived_dims() -> None:
    g = make_graph(
        {"x": TensorType(F32, (n,)), "y": TensorType(F32, (n * 2,))},
        lambda b, x, y: [b.op(Op.REDUCE_SUM, y, axes=(0,), keepdim=False)],
        symbols=(Symbol("n", 1, 10),),
    )
    exe = aotc.runtime.load(artifact_bytes(g))
    assert exe(np.ones(3, np.float32), np.ones(6, np.float32))[0] == 6.0
    with pytest.raises(GuardError, match=r"^input 'y' dim 0 = 7, expected 2\*n = 6$"):
        exe(np.ones(3, np.float32), np.ones(7, np.float32))


def test_symbols_solved_from_expressions() -> None:
    g = make_graph(
        {"z": TensorType(F32, (n * 2 + 1,))},
        lambda b, z: [b.full(n, I64, ())],
        symbols=(Symbol("n", 1, 10, multiple_of=2),),
        guards=(Guard(n, "!=", 6, "m.py:3"),),
    )
    exe = aotc.runtime.load(artifact_bytes(g))
    assert int(exe(np.ones(9, np.float32))[0]) == 4
    with pytest.raises(GuardError, match=r"^input 'z' dim 0 \(2\*n \+ 1\) = 8, which is 2\*n \+ 1 for no integer n$"):
        exe(np.ones(8, np.float32))
    with pytest.raises(
        GuardError, match=r"^input 'z' dim 0 \(2\*n \+ 1\) = 41 gives n = 20, which is outside \[1, 10\]$"
    ):
        exe(np.ones(41, np.float32))
    with pytest.raises(GuardError, match=r"gives n = 3, which is not a multiple of 2$"):
        exe(np.ones(7, np.float32))
    with pytest.raises(
        GuardError, match=r"^input 'z' dim 0 \(2\*n \+ 1, n = 6\) = 13 breaks guard n != 6 \(recorded at m\.py:3\)$"
    ):
        exe(np.ones(13, np.float32))


def test_guard_over_two_symbols_names_both() -> None:
    m = sym("m")
    g = make_graph(
        {"a": TensorType(F32, (n, m))},
        lambda b, a: [a],
        symbols=(Symbol("n", 1, 64), Symbol("m", 1, 64)),
        guards=(Guard(n * m, "<=", 100),),
    )
    exe = aotc.runtime.load(artifact_bytes(g))
    with pytest.raises(
        GuardError, match=r"^input 'a' dim 0 \(n\) = 10, input 'a' dim 1 \(m\) = 20 breaks guard m\*n <= 100$"
    ):
        exe(np.ones((10, 20), np.float32))


def test_unbindable_symbol_is_an_artifact_error() -> None:
    g = make_graph({"x": TensorType(F32, (n * n,))}, lambda b, x: [x], symbols=(Symbol("n", 1, 9),))
    with pytest.raises(ArtifactError, match=r"symbol\(s\) n can't be bound from the input shapes"):
        aotc.runtime.load(artifact_bytes(g))
