"""``aotc serve`` as a real process, spoken to with tritonclient (a v2 client): metadata, bit-exact outputs for every
example model, each refusal a 400 carrying aotc's message, gRPC, and the batching server's behaviour."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import aotc
from aotc.errors import AotcError

from .conftest import MODELS, Server, random_feeds, running_server

V2 = {"float32": "FP32", "int64": "INT64", "int32": "INT32", "bool": "BOOL", "float16": "FP16", "float64": "FP64"}
DIMS = [{"batch": 1, "seq": 5}, {"batch": 3, "seq": 17}]


@pytest.fixture(scope="module")
def plain(artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Every example model in one server, batching off."""
    args = [*(artifacts[m] for m in MODELS), "--max-batch", "1"]
    with running_server(args, tmp_path_factory.mktemp("plain") / "server.log") as server:
        yield server


@pytest.fixture(scope="module")
def batched(artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The MLP and BERT with batching on (requests wait up to 20 ms for company), 1 MiB bodies at most, on the numpy
    references: a full-size BERT call there is long enough for the health check test to watch one run."""
    args = [artifacts["mlp"], artifacts["bert"], "--batch-timeout-ms", "20", "--max-body-mb", "1"]
    args += ["--device", "reference"]
    with running_server(args, tmp_path_factory.mktemp("batched") / "server.log") as server:
        yield server


@pytest.fixture(scope="module")
def exes(artifacts: dict[str, Path]) -> dict[str, Any]:
    return {m: aotc.load(artifacts[m], device="cpu") for m in MODELS}


@pytest.fixture(scope="module")
def references(artifacts: dict[str, Path]) -> dict[str, Any]:
    """What the batched server runs (device="reference"), for its bit-exact checks."""
    return {m: aotc.load(artifacts[m], device="reference") for m in MODELS}


def infer_inputs(feeds: dict[str, np.ndarray], binary: bool = True, datatypes: dict[str, str] | None = None) -> list:
    inputs = []
    for name, a in feeds.items():
        t = httpclient.InferInput(name, list(a.shape), (datatypes or {}).get(name, V2[a.dtype.name]))
        t.set_data_from_numpy(a, binary_data=binary)
        inputs.append(t)
    return inputs


def outputs_of(result: Any) -> dict[str, np.ndarray]:
    return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}


def expected(exe: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from aotc.serve.signature import output_names

    flat = exe.run(feeds)
    return dict(zip(output_names(exe.output_tree, len(flat)), flat))


def refusal(client: Any, model: str, feeds: dict[str, np.ndarray], **kw: Any) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as e:
        client.infer(model, infer_inputs(feeds, **kw))
    return str(e.value.status()), e.value.message()


def aotc_message(exe: Any, feeds: dict[str, np.ndarray]) -> str:
    with pytest.raises(AotcError) as e:
        exe.run(feeds)
    return str(e.value)


# -- metadata ------------------------------------------------------------------------------------------------------
def test_health_and_model_metadata(plain: Server, exes: dict[str, Any]) -> None:
    client = httpclient.InferenceServerClient(plain.url)
    assert client.is_server_live() and client.is_server_ready()
    bert = client.get_model_metadata("bert")
    assert [t["name"] for t in bert["inputs"]] == ["input_ids", "attention_mask"]
    assert bert["inputs"][0] == {
        "name": "input_ids",
        "datatype": "INT64",
        "shape": [-1, -1],
        "parameters": {"dims": "batch,seq"},
    }
    assert [(t["name"], t["datatype"], t["shape"]) for t in bert["outputs"]] == [
        ("last_hidden_state", "FP32", [-1, -1, 64]),
        ("pooler_output", "FP32", [-1, 64]),
    ]
    params = bert["parameters"]
    assert params["dims"] == "batch,seq" and params["batch_dim"] == "batch"
    assert (params["dim.batch.min"], params["dim.batch.max"], params["dim.seq.min"], params["dim.seq.max"]) == (
        1,
        64,
        1,
        128,
    )
    assert params["max_batch_size"] == 0  # --max-batch 1: batching off
    for name in MODELS:
        assert client.is_model_ready(name)
        meta = client.get_model_metadata(name)
        exe = exes[name]
        assert [t["name"] for t in meta["inputs"]] == list(exe.input_names)
        for t, spec in zip(meta["inputs"], exe.inputs):
            assert t["datatype"] == V2[spec.dtype.value]
            assert t["shape"] == [d if isinstance(d, int) else -1 for d in spec.shape]
    assert plain.get("/v2/models/nope")[0] == 404


# -- outputs -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_outputs_bit_exact(plain: Server, exes: dict[str, Any], model: str) -> None:
    client = httpclient.InferenceServerClient(plain.url)
    rng = np.random.default_rng(7)
    for dims in DIMS:
        feeds = random_feeds(exes[model], rng, dims)
        got = outputs_of(client.infer(model, infer_inputs(feeds)))
        want = expected(exes[model], feeds)
        assert got.keys() == want.keys()
        for k in want:
            assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), (model, dims, k)


@pytest.mark.parametrize("model", ["mlp", "bert"])
def test_json_tensors_bit_exact(plain: Server, exes: dict[str, Any], model: str) -> None:
    client = httpclient.InferenceServerClient(plain.url)
    feeds = random_feeds(exes[model], np.random.default_rng(3), {"batch": 2, "seq": 6})
    want = expected(exes[model], feeds)
    asked = [httpclient.InferRequestedOutput(k, binary_data=False) for k in want]
    result = client.infer(model, infer_inputs(feeds, binary=False), outputs=asked)
    assert all("data" in o for o in result.get_response()["outputs"])  # JSON all the way
    got = outputs_of(result)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    # asking for one output returns that one only
    one = client.infer(model, infer_inputs(feeds), outputs=[httpclient.InferRequestedOutput(next(iter(want)))])
    assert [o["name"] for o in one.get_response()["outputs"]] == [next(iter(want))]


# -- refusals ------------------------------------------------------------------------------------------------------
def test_each_refusal_is_a_400_with_aotcs_message(plain: Server, exes: dict[str, Any]) -> None:
    client = httpclient.InferenceServerClient(plain.url)
    mlp, bert = exes["mlp"], exes["bert"]
    x = np.ones((2, 32), np.float32)
    ids = np.ones((2, 8), np.int64)
    cases = [
        ("mlp", {"x": np.ones((2, 33), np.float32)}, mlp),  # bad shape
        ("mlp", {"x": np.ones((2, 32), np.float64)}, mlp),  # bad dtype
        ("mlp", {"x": np.ones((2, 32, 1), np.float32)}, mlp),  # bad rank
        ("mlp", {"x": x, "y": x}, mlp),  # unknown input
        ("bert", {"input_ids": ids}, bert),  # missing input
        ("mlp", {"x": np.ones((1025, 32), np.float32)}, mlp),  # dim outside its range
        ("bert", {"input_ids": np.ones((2, 129), np.int64), "attention_mask": np.ones((2, 129), np.int64)}, bert),
        ("bert", {"input_ids": np.full((2, 8), 10**6), "attention_mask": ids}, bert),  # bad token id
    ]
    for model, feeds, exe in cases:
        status, message = refusal(client, model, feeds)
        assert status == "400", (model, list(feeds), message)
        assert message == aotc_message(exe, feeds), (model, list(feeds))
        assert "\n" not in message
        # and the server carries on: the next good request succeeds, bit-exact
        assert np.array_equal(client.infer("mlp", infer_inputs({"x": x})).as_numpy("output"), mlp(x=x))


def test_malformed_requests_are_400s(plain: Server) -> None:
    shape_text = (
        b'{"inputs":[{"name":"x","shape":["a"],"datatype":"FP32","data":[1]}]}',
        b'{"inputs":[{"name":"x","shape":[1,32],"datatype":"INT64","data":[1.5]}]}',  # a float for an int input
        b'{"inputs":[{"name":"x","shape":[1,32],"datatype":"FP32","data":[1,2,3]}]}',  # 3 values for 32
        b'{"inputs":[{"name":"x","shape":[1,32],"datatype":"BYTES","data":["a"]}]}',
        b"not json",
    )
    for body in shape_text:
        status, reply = plain.post("/v2/models/mlp/infer", body, {"Content-Type": "application/json"})
        assert status == 400 and reply["error"], (body, status, reply)
    # binary framing: a binary_data_size past the end of the body
    header = b'{"inputs":[{"name":"x","shape":[1,32],"datatype":"FP32","parameters":{"binary_data_size":128}}]}'
    status, reply = plain.post(
        "/v2/models/mlp/infer", header + b"\0" * 64, {"Inference-Header-Content-Length": str(len(header))}
    )
    assert status == 400 and "binary_data_size" in reply["error"]


def test_grpc(plain: Server, exes: dict[str, Any]) -> None:
    """The v2 gRPC service, through the stubs KServe's SDK generates from the protocol's .proto."""
    import grpc
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
    from kserve.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub

    def request(feeds: dict[str, np.ndarray]) -> Any:
        tensors = [
            pb.ModelInferRequest.InferInputTensor(name=n, datatype="INT64", shape=a.shape) for n, a in feeds.items()
        ]
        raw = [a.tobytes() for a in feeds.values()]
        return pb.ModelInferRequest(model_name="bert", inputs=tensors, raw_input_contents=raw)

    with grpc.insecure_channel(f"127.0.0.1:{plain.grpc_port}") as channel:
        stub = GRPCInferenceServiceStub(channel)
        assert stub.ServerReady(pb.ServerReadyRequest()).ready
        assert stub.ModelReady(pb.ModelReadyRequest(name="bert")).ready
        meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="bert"))
        assert [list(t.shape) for t in meta.inputs] == [[-1, -1], [-1, -1]]
        feeds = random_feeds(exes["bert"], np.random.default_rng(1), {"batch": 2, "seq": 9})
        reply = stub.ModelInfer(request(feeds))
        want = expected(exes["bert"], feeds)
        for t, raw in zip(reply.outputs, reply.raw_output_contents):
            assert np.array_equal(np.frombuffer(raw, np.float32).reshape(t.shape), want[t.name])
        bad = {"input_ids": np.ones((2, 200), np.int64), "attention_mask": np.ones((2, 200), np.int64)}
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(request(bad))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == aotc_message(exes["bert"], bad)


# -- batching ------------------------------------------------------------------------------------------------------
def test_64_concurrent_requests_batched(batched: Server, references: dict[str, Any]) -> None:
    rng = np.random.default_rng(11)
    jobs = []
    for i in range(64):
        model = "bert" if i % 2 else "mlp"
        dims = {"batch": 1 + i % 3, "seq": 8 if i % 4 == 1 else 12}  # two BERT shapes: two keys to batch by
        jobs.append((model, random_feeds(references[model], rng, dims)))
    before = {m: batched.metric("aotc_model_calls_total", m) for m in ("mlp", "bert")}

    def send(job: tuple[str, dict[str, np.ndarray]]) -> Any:
        client = httpclient.InferenceServerClient(batched.url, network_timeout=120)
        return client.infer(job[0], infer_inputs(job[1]))

    with ThreadPoolExecutor(64) as pool:  # 64 clients at once (tritonclient's async_infer pool is not truly parallel)
        results = list(pool.map(send, jobs))
    for (model, feeds), result in zip(jobs, results):
        got, want = outputs_of(result), expected(references[model], feeds)
        for k in want:  # batched rows equal separate calls up to rounding (a matmul over more rows sums in other order)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=f"{model} {k}")
    calls = {m: batched.metric("aotc_model_calls_total", m) - before[m] for m in ("mlp", "bert")}
    assert 0 < calls["mlp"] < 16 and 0 < calls["bert"] < 16, calls  # 32 requests each


def test_a_lone_request_is_bit_exact_with_batching_on(batched: Server, references: dict[str, Any]) -> None:
    client = httpclient.InferenceServerClient(batched.url)
    meta = client.get_model_metadata("bert")
    assert meta["parameters"]["max_batch_size"] == 64  # the batch dim's maximum
    feeds = random_feeds(references["bert"], np.random.default_rng(5), {"batch": 3, "seq": 10})
    got, want = outputs_of(client.infer("bert", infer_inputs(feeds))), expected(references["bert"], feeds)
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_health_answers_while_a_long_call_runs(batched: Server, references: dict[str, Any]) -> None:
    feeds = random_feeds(references["bert"], np.random.default_rng(2), {"batch": 64, "seq": 128})
    client = httpclient.InferenceServerClient(batched.url, network_timeout=120)
    span: list[float] = []

    def long_call() -> None:
        span.append(time.monotonic())
        client.infer("bert", infer_inputs(feeds))
        span.append(time.monotonic())

    worker = threading.Thread(target=long_call)
    worker.start()
    answers = []
    while worker.is_alive():
        start = time.monotonic()
        status, reply = batched.get("/v2/health/ready", timeout=5)
        answers.append((start, time.monotonic() - start))
        assert status == 200 and reply == {"ready": True}
        time.sleep(0.01)
    worker.join()
    during = [took for at, took in answers if span[0] + 0.05 < at < span[1] - 0.05]
    assert span[1] - span[0] > 0.2, "the call was too short to show anything"
    assert len(during) >= 5 and max(during) < 0.5, (span[1] - span[0], during)


CLOSED = 0  # what _early_refusal gives when the connection closed before the answer could be read


def _early_refusal(server: Server, body: Any, headers: dict[str, str], chunked: bool) -> tuple[int, Any]:
    """POST a body the server refuses before reading it all: the 413 may arrive while the client is still
    sending, and the server then closes the connection, so the client's write can fail (a broken pipe or a
    reset) with the answer already waiting in the socket. Read the answer either way."""
    import http.client
    import json as json_module

    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        try:
            conn.request("POST", "/v2/models/mlp/infer", body=body, headers=headers, encode_chunked=chunked)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused mid-body, as asked: the status line is read below
        try:
            r = conn.getresponse()
        except (ConnectionResetError, http.client.RemoteDisconnected):
            return CLOSED, None  # the reset lost the answer: the server closed without reading the body
        text = r.read()
        return r.status, json_module.loads(text) if text else None
    finally:
        conn.close()


def test_oversized_bodies_and_absurd_shapes(batched: Server, references: dict[str, Any]) -> None:
    big = np.zeros((1024, 512), np.float32)  # 2 MiB of binary data, over the 1 MiB limit
    header = b'{"inputs":[{"name":"x","shape":[1024,512],"datatype":"FP32","parameters":{"binary_data_size":2097152}}]}'
    headers = {"Inference-Header-Content-Length": str(len(header))}
    status, reply = _early_refusal(batched, header + big.tobytes(), headers, chunked=False)
    assert (status, reply) == (CLOSED, None) or (status == 413 and "larger than this server takes" in reply["error"])
    # the same without a Content-Length (chunked): refused once 1 MiB has arrived
    chunks = (header + big.tobytes()[i : i + 65536] for i in range(0, big.nbytes, 65536))
    status, _ = _early_refusal(batched, chunks, headers, chunked=True)
    assert status in (413, CLOSED)
    # a shape of 10**12 rows is refused from the header alone, with the runtime's message
    huge = b'{"inputs":[{"name":"x","shape":[1000000000000,32],"datatype":"FP32","data":[1.0]}]}'
    status, reply = batched.post("/v2/models/mlp/infer", huge, {"Content-Type": "application/json"})
    assert status == 400
    assert reply["error"] == "input 'x' dim 0 (batch) = 1000000000000 is outside [1, 1024]"
    x = np.ones((1, 32), np.float32)
    client = httpclient.InferenceServerClient(batched.url)
    assert np.array_equal(client.infer("mlp", infer_inputs({"x": x})).as_numpy("output"), references["mlp"](x=x))
