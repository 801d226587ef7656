"""``aotc export-triton`` without a Triton server: the config.pbtxt it writes, and its model.py run against a
stand-in for Triton's ``triton_python_backend_utils`` (the real server runs in test_triton_server.py, slow)."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import aotc
from aotc import Dim, TensorSpec
from aotc.serve.signature import output_names
from aotc_cli.main import cli

from .conftest import MODELS, random_feeds

MLP_CONFIG = """\
# Written by `aotc export-triton` from mlp.aotc. Dims: batch in [1, 1024]
name: "mlp"
backend: "python"
max_batch_size: 16
input [
  {
    name: "x"
    data_type: TYPE_FP32
    dims: [ 32 ]
  }
]
output [
  {
    name: "output"
    data_type: TYPE_FP32
    dims: [ 10 ]
  }
]
dynamic_batching {
  max_queue_delay_microseconds: 100
}
instance_group [
  {
    count: 2
    kind: KIND_CPU
  }
]
parameters: {
  key: "aotc_artifact"
  value: { string_value: "model.aotc" }
}
parameters: {
  key: "aotc_device"
  value: { string_value: "cpu" }
}
"""


def export(artifact: Path, repo: Path, *args: str) -> Path:
    result = CliRunner().invoke(cli, ["export-triton", str(artifact), "-o", str(repo), *args])
    assert result.exit_code == 0, result.output
    return repo / Path(artifact).stem if "--name" not in args else repo / args[args.index("--name") + 1]


def test_config_pbtxt(artifacts: dict[str, Path], tmp_path: Path) -> None:
    folder = export(
        artifacts["mlp"],
        tmp_path,
        "--max-batch",
        "16",
        "--device",
        "cpu",
        "--instances",
        "2",
        "--queue-delay-us",
        "100",
    )
    assert (folder / "config.pbtxt").read_text() == MLP_CONFIG
    assert (folder / "1" / "model.aotc").read_bytes() == artifacts["mlp"].read_bytes()
    assert "class TritonPythonModel" in (folder / "1" / "model.py").read_text()  # run below, on a stand-in backend
    bert = (export(artifacts["bert"], tmp_path) / "config.pbtxt").read_text()
    assert "max_batch_size: 64" in bert and "dims: [ -1, 64 ]" in bert and "instance_group" not in bert
    unbatched = (
        export(artifacts["bert"], tmp_path, "--max-batch", "0", "--name", "bert0") / "config.pbtxt"
    ).read_text()
    assert "max_batch_size: 0" in unbatched and "dims: [ -1, -1 ]" in unbatched and "dynamic_batching" not in unbatched


def test_batch_dim_not_first_means_no_triton_batching(tmp_path: Path) -> None:
    seq, batch = Dim("seq", min=1, max=32), Dim("batch", min=1, max=8)
    path = tmp_path / "tb.aotc"
    aotc.compile(lambda x: x.sum(dim=0), {"x": TensorSpec((seq, batch, 4), "float32")}).save(path)
    config = (export(path, tmp_path / "repo") / "config.pbtxt").read_text()
    assert "max_batch_size: 0" in config and "dims: [ -1, -1, 4 ]" in config


# -- model.py against a stand-in of Triton's python backend ------------------------------------------------------
class _Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class _Error:
    INVALID_ARG, INTERNAL = "INVALID_ARG", "INTERNAL"

    def __init__(self, message: str, code: str | None = None) -> None:
        self.message, self.code = message, code


class _Response:
    def __init__(self, output_tensors: list[_Tensor], error: _Error | None = None) -> None:
        self.tensors = {t.name(): t.as_numpy() for t in output_tensors}
        self.error = error


class _Request:
    def __init__(self, feeds: dict[str, np.ndarray]) -> None:
        self.inputs = {n: _Tensor(n, a) for n, a in feeds.items()}


@pytest.fixture()
def backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    utils = types.ModuleType("triton_python_backend_utils")
    utils.Tensor, utils.TritonError, utils.InferenceResponse = _Tensor, _Error, _Response  # type: ignore[attr-defined]
    utils.get_input_tensor_by_name = lambda request, name: request.inputs.get(name)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)


def load_backend(folder: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"triton_model_{folder.name}", folder / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    config = {"max_batch_size": 0, "parameters": {}}
    for line in (folder / "config.pbtxt").read_text().splitlines():
        if line.startswith("max_batch_size:"):
            config["max_batch_size"] = int(line.split(":")[1])
    config["parameters"] = {"aotc_artifact": {"string_value": "model.aotc"}}
    model.initialize(
        {
            "model_config": json.dumps(config),
            "model_repository": str(folder),
            "model_version": "1",
            "model_instance_kind": "CPU",
        }
    )
    return model


@pytest.mark.parametrize("name", MODELS)
def test_backend_runs_each_example_model(backend: Any, artifacts: dict[str, Path], tmp_path: Path, name: str) -> None:
    folder = export(artifacts[name], tmp_path)
    model = load_backend(folder)
    exe = aotc.load(artifacts[name], device="cpu")
    rng = np.random.default_rng(0)
    requests = [random_feeds(exe, rng, {"batch": 1 + i % 2, "seq": 6 if i < 2 else 9}) for i in range(4)]
    responses = model.execute([_Request(f) for f in requests])
    for feeds, response in zip(requests, responses):
        assert response.error is None
        flat = exe.run(feeds)
        for k, v in zip(output_names(exe.output_tree, len(flat)), flat):  # batched: equal up to rounding
            np.testing.assert_allclose(response.tensors[k], v, rtol=1e-5, atol=1e-5)
    alone = model.execute([_Request(requests[0])])[0]  # a lone request: bit-exact
    flat = exe.run(requests[0])
    assert all(np.array_equal(alone.tensors[k], v) for k, v in zip(output_names(exe.output_tree, len(flat)), flat))


def test_backend_refusals_fail_their_request_only(backend: Any, artifacts: dict[str, Path], tmp_path: Path) -> None:
    model = load_backend(export(artifacts["bert"], tmp_path))
    ok = {"input_ids": np.ones((1, 8), np.int64), "attention_mask": np.ones((1, 8), np.int64)}
    bad = {"input_ids": np.full((1, 8), 10**6, np.int64), "attention_mask": np.ones((1, 8), np.int64)}
    responses = model.execute([_Request(ok), _Request(bad), _Request(ok)])
    assert responses[0].error is None and responses[2].error is None
    assert responses[1].error.code == "INVALID_ARG"
    assert (
        "index 1000000 in input 'input_ids' (at [0, 0]) is outside the valid range [0, 512)"
        in responses[1].error.message
    )


# -- a model with state: Triton's sequence batcher -----------------------------------------------------------------
def test_a_stateful_model_gets_sequence_batching_and_keeps_sessions_by_correlation_id(
    backend: Any, tmp_path: Path
) -> None:
    from aotc_cli.loader import import_file

    m = import_file(Path(__file__).resolve().parents[2] / "models" / "gpt2_decode.py")
    model, inputs = m.build(vocab_size=64, n_positions=16, d_model=16, n_layer=1, n_head=2, max_batch=2)
    path = tmp_path / "decoder.aotc"
    aotc.compile(model, inputs, options=aotc.CompileOptions(targets=())).save(path)
    folder = export(path, tmp_path)
    config = (folder / "config.pbtxt").read_text()
    assert "max_batch_size: 0" in config and "dynamic_batching" not in config
    assert "sequence_batching {" in config and "CONTROL_SEQUENCE_CORRID" in config
    assert 'name: "AOTC_SEQUENCE_START"' in config and "max_sequence_idle_microseconds: 600000000" in config
    triton = load_backend(folder)
    exe = aotc.load(path, device="cpu")
    prompts = {11: np.array([[1, 2, 3]]), 12: np.array([[4, 5]])}
    want = {c: aotc.generate(exe, p, 4)[0, p.shape[1] :].tolist() for c, p in prompts.items()}
    got: dict[int, list[int]] = {c: [] for c in prompts}
    pos = {c: p.shape[1] for c, p in prompts.items()}
    for step in range(4):
        requests = []
        for c, p in prompts.items():  # the two sequences interleave in each execute()
            ids = p if step == 0 else np.array([[got[c][-1]]])
            positions = np.arange(p.shape[1]) if step == 0 else np.array([pos[c]])
            if step:
                pos[c] += 1
            control = {"AOTC_SEQUENCE_ID": np.array([c], np.uint64), "AOTC_SEQUENCE_START": np.array([int(step == 0)], np.int32),
                       "AOTC_SEQUENCE_END": np.array([int(step == 3)], np.int32)}  # fmt: skip
            requests.append(_Request({"input_ids": ids, "cache_position": positions, **control}))
        for c, r in zip(prompts, triton.execute(requests)):
            assert r.error is None, r.error.message
            got[c].append(int(r.tensors["output"][0, -1].argmax()))
    assert got == want and not triton.sessions  # both ended
    lost = {"AOTC_SEQUENCE_ID": np.array([11], np.uint64), "AOTC_SEQUENCE_START": np.array([0], np.int32),
            "AOTC_SEQUENCE_END": np.array([0], np.int32)}  # fmt: skip
    (r,) = triton.execute([_Request({"input_ids": np.array([[1]]), "cache_position": np.array([0]), **lost})])
    assert r.error.code == "INVALID_ARG" and "no live sequence 11" in r.error.message
