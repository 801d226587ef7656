"""``aotc serve --replicas 2``: the model as two Ray Serve replicas on the CPU behind the same v2 endpoints
(KServe's Ray integration); requests spread over both, each replica loads its artifact once, refusals keep
aotc's message, and SIGTERM takes the local Ray cluster down with the server."""

from __future__ import annotations

import collections
import importlib.util
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import aotc

from .conftest import group_alive, random_feeds, running_server

if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray Serve is not installed: pip install 'aotc[ray]'", allow_module_level=True)


def infer_inputs(feeds: dict[str, np.ndarray]) -> list:
    inputs = []
    for name, a in feeds.items():
        t = httpclient.InferInput(name, list(a.shape), "INT64")
        t.set_data_from_numpy(a)
        inputs.append(t)
    return inputs


def test_two_replicas_on_cpu(artifacts: dict[str, Path], tmp_path: Path) -> None:
    exe = aotc.load(artifacts["bert"], device="cpu")
    rng = np.random.default_rng(4)
    jobs = [random_feeds(exe, rng, {"batch": 1 + i % 3, "seq": 8 if i % 2 else 12}) for i in range(64)]
    args = [artifacts["bert"], "--replicas", "2", "--cpus-per-replica", "0.5", "--batch-timeout-ms", "5"]
    env = {"RAY_DEDUP_LOGS": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    with running_server(args, tmp_path / "server.log", env=env, timeout=120) as server:
        client = httpclient.InferenceServerClient(server.url)
        meta = client.get_model_metadata("bert")
        assert meta["parameters"]["dim.seq.max"] == 128 and [t["name"] for t in meta["inputs"]] == list(exe.input_names)

        def send(feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
            result = httpclient.InferenceServerClient(server.url, network_timeout=120).infer(
                "bert", infer_inputs(feeds)
            )
            outputs = {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}
            return outputs, result.get_response()["parameters"]["aotc_replica"]

        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(send, jobs))
        for feeds, (got, _) in zip(jobs, results):
            want = exe(**feeds)
            for k, v in want.items():  # batched rows: equal up to rounding
                np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-5)
        replicas = collections.Counter(replica for _, replica in results)
        assert len(replicas) == 2, replicas  # the requests went to both replicas

        long = {"input_ids": np.ones((1, 200), np.int64), "attention_mask": np.ones((1, 200), np.int64)}
        with pytest.raises(InferenceServerException) as e:
            client.infer("bert", infer_inputs(long))
        assert e.value.status() == "400"
        assert e.value.message() == "input 'input_ids' dim 1 (seq) = 200 is outside [1, 128]"

        loads = re.findall(r"loaded 'bert' from .* \(pid (\d+)\)", server.logs())
        assert len(loads) == 2 and len(set(loads)) == 2, loads  # each replica loaded the artifact once
        code = server.stop()
        assert code == 0, server.logs()[-3000:]
        deadline = time.monotonic() + 20
        while group_alive(server.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not group_alive(server.proc.pid)


def test_replicas_and_workers_do_not_mix(artifacts: dict[str, Path]) -> Any:
    from click.testing import CliRunner

    from aotc_cli.main import cli

    result = CliRunner().invoke(cli, ["serve", str(artifacts["mlp"]), "--replicas", "2", "--workers", "2"])
    assert result.exit_code == 1 and "--workers applies to the local server" in result.output
