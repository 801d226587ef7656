"""The serving pieces that need no server: the v2 signature and batch dim of an artifact, request decoding
(binary framing, strict JSON conversion, shapes checked before any allocation) and the dynamic batcher."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec
from aotc.errors import AotcError
from aotc.serve import codec, signature
from aotc.serve.batching import BatchAxes, Batcher, concat, group, split
from aotc.serve.signature import Signature, SignatureError


def compiled(fn: Any, **specs: TensorSpec) -> Any:
    """An Executable of ``fn``, loaded from the artifact's bytes as a server would load its file."""
    return aotc.load(aotc.compile(fn, specs).artifact_bytes, device="cpu")


# -- signature ---------------------------------------------------------------------------------------------------
def test_batch_dim_is_the_inputs_shared_leading_dynamic_dim() -> None:
    b, s = Dim("b", min=1, max=8), Dim("s", min=2, max=16, multiple_of=2)
    exe = compiled(lambda x, y: (x + y, x.sum(dim=1)), x=TensorSpec((b, s), "float32"), y=TensorSpec((b, s), "float32"))
    sig = Signature.of(exe)
    assert sig.batch == signature.Dim("b", 1, 8) and not sig.batch_note
    assert [t.name for t in sig.outputs] == ["0", "1"]
    assert [(t.shape, t.batch_axis) for t in sig.outputs] == [([-1, -1], 0), ([-1], 0)]
    assert sig.parameters() == {
        "dims": "b,s",
        "dim.b.min": 1,
        "dim.b.max": 8,
        "dim.s.min": 2,
        "dim.s.max": 16,
        "dim.s.multiple_of": 2,
        "batch_dim": "b",
    }
    assert sig.inputs[0].metadata() == {
        "name": "x",
        "datatype": "FP32",
        "shape": [-1, -1],
        "parameters": {"dims": "b,s"},
    }


def test_no_batching_when_an_output_lacks_the_batch_dim() -> None:
    exe = compiled(lambda x: x.sum(), x=TensorSpec((Dim("batch", min=1, max=8), 4), "float32"))
    sig = Signature.of(exe)
    assert sig.batch is None and BatchAxes.of(sig) is None
    assert sig.batch_note == "output 'output' [] does not have the dim 'batch' exactly once as an axis"


def test_batch_dim_chosen_by_name_may_sit_on_any_axis() -> None:
    seq, batch = Dim("seq", min=1, max=32), Dim("batch", min=1, max=8)
    exe = compiled(lambda x: x * 2.0, x=TensorSpec((seq, batch, 4), "float32"))
    assert Signature.of(exe).batch.name == "seq"  # the leading dynamic dim, unless told otherwise
    sig = Signature.of(exe, "batch")
    axes = BatchAxes.of(sig)
    assert axes is not None and axes.inputs == {"x": 1} and axes.outputs == (1,)
    a, b = np.ones((3, 2, 4), np.float32), np.zeros((3, 1, 4), np.float32)
    merged = concat(axes, [{"x": a}, {"x": b}])
    assert merged["x"].shape == (3, 3, 4)
    parts = split(axes, exe.run(merged), [2, 1])
    assert np.array_equal(parts[0][0], a * 2) and np.array_equal(parts[1][0], b * 2)
    with pytest.raises(SignatureError, match="'nope' is not a dim of the model; its dims are: seq, batch"):
        Signature.of(exe, "nope")


# -- requests ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp() -> Any:
    return compiled(lambda x: x * 2.0, x=TensorSpec((Dim("batch", min=1, max=1024), 4), "float32"))


@pytest.fixture(scope="module")
def ids() -> Any:
    return compiled(lambda t: t + 1, t=TensorSpec((Dim("batch", min=1, max=64), 3), "int32"))


def decode(exe: Any, tensors: list[codec.RawTensor]) -> dict[str, np.ndarray]:
    return codec.feeds(Signature.of(exe), exe.check, tensors)


def test_binary_tensors_are_views_of_the_body(mlp: Any) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    header = json.dumps(
        {
            "id": "r1",
            "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "parameters": {"binary_data_size": 32}}],
        }
    ).encode()
    req = codec.parse_request(header + x.tobytes(), len(header))
    assert req.id == "r1" and req.outputs is None
    feeds = decode(mlp, req.inputs)
    assert np.array_equal(feeds["x"], x) and not feeds["x"].flags.owndata


@pytest.mark.parametrize(
    ("body", "length", "message"),
    [
        (b'{"inputs": []}', 99, "Inference-Header-Content-Length is 99, but the body has 14 bytes"),
        (b"[1, 2]", None, "the request has no 'inputs' list"),
        (b"{", None, "the request is not valid JSON"),
        (
            b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 8}}]}',
            None,
            "binary_data_size 8, past the end of the body",
        ),
        (b'{"inputs": []}xx', 14, "the request body has 2 bytes that no input's binary_data_size covers"),
        (b'{"inputs": [{"name": "x", "shape": [1]}]}', None, "input 'x' has no 'datatype'"),
        (b'{"inputs": [], "outputs": [1]}', None, "'outputs' must be a list of objects with a 'name'"),
    ],
)
def test_malformed_framing_is_refused(body: bytes, length: int | None, message: str) -> None:
    with pytest.raises(codec.RequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        codec.parse_request(body, length)


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (
            codec.RawTensor("t", "INT32", [1, 3], data=[1, 2.5, 3]),
            "input 't' has float values, which INT32 does not take",
        ),
        (codec.RawTensor("t", "INT32", [1, 3], data=[1, 2, 2**40]), "input 't' has values outside the range of INT32"),
        (codec.RawTensor("t", "INT32", [1, 3], data=[1, 2]), "input 't' has 2 values, expected 3 for shape [1, 3]"),
        (codec.RawTensor("t", "INT32", [1, 3], data=[[1, 2], [3]]), "input 't' has data that is not a INT32 tensor"),
        (
            codec.RawTensor("t", "INT32", [1, 3], data=["a", "b", "c"]),
            "input 't' has string values, which INT32 does not take",
        ),
        (codec.RawTensor("t", "INT32", [1, -3], data=[1]), "input 't' has shape [1, -3]; dims can't be negative"),
        (
            codec.RawTensor("t", "INT32", [1, "3"], data=[1]),
            "input 't' has shape [1, '3']; a shape is a list of integers",
        ),
        (
            codec.RawTensor("t", "BYTES", [1, 3], data=["a"]),
            "input 't' has datatype 'BYTES', which aotc does not take, expected INT32",
        ),
        (codec.RawTensor("t", "INT32", [1, 3], raw=b"\0" * 8), "input 't' has 8 bytes of binary data, expected 12"),
        (codec.RawTensor("t", "INT32", [1, 3]), "input 't' has no data"),
        (codec.RawTensor("t", "INT64", [1, 3], data=[1, 2, 3]), "input 't' has dtype int64, expected int32"),
        (codec.RawTensor("t", "INT32", [70, 3], data=[1]), r"input 't' dim 0 \(batch\) = 70 is outside \[1, 64\]"),
        (codec.RawTensor("t", "INT32", [2**62, 2**62], data=[1]), "too large for any array"),
    ],
)
def test_request_tensors_are_checked_strictly(ids: Any, tensor: codec.RawTensor, message: str) -> None:
    with pytest.raises(
        AotcError, match=message.replace("[", r"\[").replace("]", r"\]") if "\\" not in message else message
    ):
        decode(ids, [tensor])


def test_json_values_convert_exactly(ids: Any, mlp: Any) -> None:
    feeds = decode(ids, [codec.RawTensor("t", "INT32", [2, 3], data=[[1, 2, 3], [4, 5, -6]])])
    assert feeds["t"].dtype == np.int32 and feeds["t"].tolist() == [[1, 2, 3], [4, 5, -6]]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    back = json.loads(json.dumps(x.ravel().tolist()))  # float32 -> JSON text -> float32 is exact
    assert np.array_equal(decode(mlp, [codec.RawTensor("x", "FP32", [3, 4], data=back)])["x"], x)


def test_an_absurd_shape_is_refused_without_allocating(mlp: Any) -> None:
    with pytest.raises(AotcError, match=r"dim 0 \(batch\) = 1000000000000 is outside \[1, 1024\]"):
        decode(mlp, [codec.RawTensor("x", "FP32", [10**12, 4], data=[1.0])])


# -- the batcher -------------------------------------------------------------------------------------------------
# These tests are about how a batch is formed, so their batchers keep a fixed cap (adaptive=False); how the cap
# is learnt is tested in test_batch_size.py.
AXES = BatchAxes({"x": 0}, (0,))


class Model:
    """Doubles x; records each call's rows; the first call can be held open; a -1 anywhere fails the call."""

    def __init__(self, hold: float = 0.0) -> None:
        self.calls: list[int] = []
        self.hold = hold
        self.lock = threading.Lock()

    def __call__(self, feeds: Any) -> list[np.ndarray]:
        x = feeds["x"]
        with self.lock:
            self.calls.append(x.shape[0])
            first = len(self.calls) == 1
        if first and self.hold:
            time.sleep(self.hold)
        if (x == -1).any():
            raise ValueError("a bad row")
        return [x * 2]


def rows(n: int, value: float = 1.0, width: int = 4) -> dict[str, np.ndarray]:
    return {"x": np.full((n, width), value, np.float32)}


async def submit_all(batcher: Batcher, requests: list[dict[str, np.ndarray]], gap: float = 0.0) -> list[Any]:
    tasks = []
    for r in requests:
        tasks.append(asyncio.ensure_future(batcher(r)))
        await asyncio.sleep(gap)
    return await asyncio.gather(*tasks, return_exceptions=True)


def test_requests_queued_during_a_call_run_together() -> None:
    model = Model(hold=0.1)
    batcher = Batcher(model, AXES, adaptive=False, max_batch=64)
    results = asyncio.run(submit_all(batcher, [rows(1, i) for i in range(10)], gap=0.005))
    assert model.calls == [1, 9]  # the first ran at once; the rest arrived during it
    assert [float(r[0][0, 0]) for r in results] == [2.0 * i for i in range(10)]


def test_batches_keep_to_max_batch_and_to_equal_shapes() -> None:
    model = Model(hold=0.1)
    batcher = Batcher(model, AXES, adaptive=False, max_batch=7)
    requests = [rows(1), *(rows(3) for _ in range(4)), rows(2, width=5), rows(2, width=5)]
    results = asyncio.run(submit_all(batcher, requests, gap=0.005))
    assert model.calls == [1, 6, 6, 4]  # 3+3 (7 would be passed by a third), 3+3, then the width-5 pair
    assert all(r[0].shape == q["x"].shape for r, q in zip(results, requests))


def test_a_failing_request_fails_alone() -> None:
    model = Model(hold=0.1)
    batcher = Batcher(model, AXES, adaptive=False, max_batch=64)
    results = asyncio.run(submit_all(batcher, [rows(1), rows(2), rows(1, -1), rows(2)], gap=0.005))
    assert model.calls == [1, 5, 2, 1, 2]  # the batch of three failed, then each ran alone
    assert isinstance(results[2], ValueError)
    assert [r[0].shape[0] for i, r in enumerate(results) if i != 2] == [1, 2, 2]


def test_an_idle_model_waits_up_to_the_timeout_for_company() -> None:
    model = Model()
    batcher = Batcher(model, AXES, adaptive=False, max_batch=64, timeout_s=0.2)
    asyncio.run(submit_all(batcher, [rows(1), rows(1), rows(1)], gap=0.02))
    assert model.calls == [3]
    full = Model()
    start = time.monotonic()
    asyncio.run(submit_all(Batcher(full, AXES, adaptive=False, max_batch=2, timeout_s=5.0), [rows(1), rows(1)]))
    assert full.calls == [2] and time.monotonic() - start < 1.0  # a full batch goes at once


def test_merged_shapes_must_meet_the_guards() -> None:
    def at_most_four(feeds: Any) -> None:
        if feeds["x"].shape[0] > 4:
            raise AotcError("too many rows")

    model = Model(hold=0.1)
    batcher = Batcher(model, AXES, adaptive=False, max_batch=64, check=at_most_four)
    asyncio.run(submit_all(batcher, [rows(1)] + [rows(2)] * 4, gap=0.005))
    assert model.calls == [1, 4, 4]


def test_group_for_ray_batches() -> None:
    items = [rows(2), rows(2, width=5), rows(3), rows(4)]
    assert group(AXES, items, 5, lambda _: None) == [[0, 2], [1], [3]]
