"""The server process itself: an internal failure is a 500 naming the request and the server keeps serving;
--workers processes; a clean shutdown on SIGTERM that leaves no process behind and logs no error or warning; an
unknown model a 404 with no traceback; access lines only with --access-log; the bind address."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

import aotc

from .conftest import group_alive, running_server

HERE = Path(__file__).resolve().parent


def infer_body(x: np.ndarray, rid: str | None = None) -> bytes:
    req = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    if rid:
        req["id"] = rid
    return json.dumps(req).encode()


def test_internal_failure_is_a_500_naming_the_request(artifacts: dict[str, Path], tmp_path: Path) -> None:
    command = [sys.executable, str(HERE / "faulty_server.py"), str(artifacts["mlp"]), "{http_port}", "{grpc_port}"]
    exe = aotc.load(artifacts["mlp"], device="cpu")
    with running_server([], tmp_path / "server.log", command=command) as server:
        bad = np.full((1, 32), 13.0, np.float32)
        status, reply = server.post(
            "/v2/models/mlp/infer", infer_body(bad, "req-42"), {"Content-Type": "application/json"}
        )
        assert status == 500
        assert reply["error"] == (
            "model 'mlp' failed on request req-42: RuntimeError: a deliberate failure inside the model call"
        )
        assert "Traceback" in server.logs() and "failed on request req-42" in server.logs()
        x = np.ones((2, 32), np.float32)
        status, reply = server.post("/v2/models/mlp/infer", infer_body(x), {"Content-Type": "application/json"})
        assert status == 200
        got = np.array(reply["outputs"][0]["data"], np.float32).reshape(reply["outputs"][0]["shape"])
        assert np.array_equal(got, exe(x=x))
        assert server.get("/v2/health/ready")[0] == 200
        assert "POST /v2/models/mlp/infer" not in server.logs()  # no access lines unless asked


def problems(logs: str) -> list[str]:
    """Log lines a clean run has none of: errors, warnings, tracebacks, a destroyed pending task, an unclosed
    socket (uvicorn's own INFO lines come from a logger named ``uvicorn.error``)."""
    bad = ("ERROR", "WARNING", "Traceback", "Task was destroyed", "unclosed", "warning:", "Warning:")
    return [t for t in logs.splitlines() if any(b in t for b in bad) and "uvicorn.error INFO" not in t]


def test_an_unknown_model_is_a_404_and_a_served_one_stops_cleanly(artifacts: dict[str, Path], tmp_path: Path) -> None:
    with running_server([artifacts["mlp"]], tmp_path / "server.log") as server:
        x = np.ones((2, 32), np.float32)
        status, _ = server.post("/v2/models/mlp/infer", infer_body(x), {"Content-Type": "application/json"})
        assert status == 200
        status, reply = server.post("/v2/models/nope/infer", infer_body(x), {"Content-Type": "application/json"})
        assert (status, reply) == (404, {"error": "Model with name nope does not exist."})
        assert server.get("/v2/models/nope")[0] == 404
        assert server.stop() == 0
    assert "404: Model with name nope does not exist. (POST /v2/models/nope/infer)" in server.logs()
    assert problems(server.logs()) == [], server.logs()[-4000:]


def test_workers_and_a_clean_shutdown(artifacts: dict[str, Path], tmp_path: Path) -> None:
    """Two REST worker processes (each loads the artifact) behind one port; SIGTERM stops them all."""
    exe = aotc.load(artifacts["mlp"], device="cpu")
    with running_server([artifacts["mlp"], "--workers", "2"], tmp_path / "server.log") as server:
        children = psutil.Process(server.proc.pid).children(recursive=True)
        assert len(children) >= 2
        for i in range(8):
            x = np.full((1 + i % 3, 32), i, np.float32)
            status, reply = server.post("/v2/models/mlp/infer", infer_body(x), {"Content-Type": "application/json"})
            assert status == 200
            got = np.array(reply["outputs"][0]["data"], np.float32).reshape(reply["outputs"][0]["shape"])
            assert np.array_equal(got, exe(x=x))
        assert "loaded 'mlp'" in server.logs()
        assert "POST /v2/models/mlp/infer" not in server.logs()  # no access lines unless asked, in any worker
        start = time.monotonic()
        code = server.stop()
        assert code == 0, server.logs()[-3000:]
        deadline = time.monotonic() + 10
        while group_alive(server.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not group_alive(server.proc.pid), [p.pid for p in children if p.is_running()]
        assert time.monotonic() - start < 15
    assert problems(server.logs()) == [], server.logs()[-4000:]  # no unclosed socket, no worker restarted


def test_access_lines_when_asked(artifacts: dict[str, Path], tmp_path: Path) -> None:
    with running_server([artifacts["mlp"], "--access-log"], tmp_path / "server.log") as server:
        x = np.ones((1, 32), np.float32)
        status, _ = server.post("/v2/models/mlp/infer", infer_body(x), {"Content-Type": "application/json"})
        assert status == 200
        deadline = time.monotonic() + 10
        while '"POST /v2/models/mlp/infer HTTP/1.1" 200' not in server.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert '"POST /v2/models/mlp/infer HTTP/1.1" 200' in server.logs()


def test_sigint_stops_a_single_process_server(artifacts: dict[str, Path], tmp_path: Path) -> None:
    with running_server([artifacts["mlp"]], tmp_path / "server.log") as server:
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(20) == 0, server.logs()[-3000:]
        assert not group_alive(server.proc.pid)


def test_binds_the_given_host_only(artifacts: dict[str, Path], tmp_path: Path) -> None:
    with running_server([artifacts["mlp"]], tmp_path / "server.log") as server:
        listening = {
            (c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)  # gRPC's dual-stack socket: IPv4 as mapped IPv6
            for c in _connections(psutil.Process(server.proc.pid))
            if c.status == psutil.CONN_LISTEN
        }
        assert listening == {("127.0.0.1", server.http_port), ("127.0.0.1", server.grpc_port)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-dim", "seq"], "--batch-dim 'seq' is not a dim of the model; its dims are: batch"),
        (["--name", "a", "--name", "b"], "got 2 --name for 1 artifacts"),
        (["--name", "a/b"], "model name 'a/b' can't be a URL path segment"),
    ],
)
def test_command_line_refusals(artifacts: dict[str, Path], args: list[str], message: str) -> None:
    from click.testing import CliRunner

    from aotc_cli.main import cli

    result = CliRunner().invoke(cli, ["serve", str(artifacts["mlp"]), *args, "--port", "1"])
    assert result.exit_code == 1, result.output
    assert message in result.output


def _connections(proc: psutil.Process) -> list:
    """The process's inet sockets (psutil < 6, which KServe pins, names the method ``connections``)."""
    method = getattr(proc, "net_connections", None) or proc.connections
    return method(kind="inet")


def test_trusted_keys_reach_the_loader(artifacts: dict[str, Path], tmp_path: Path) -> None:
    """--trusted-key: a signed artifact is served, an unsigned one refused before the server starts."""
    from click.testing import CliRunner

    from aotc_cli.main import cli

    runner = CliRunner()
    key, signed = tmp_path / "key", tmp_path / "mlp.aotc"
    assert runner.invoke(cli, ["keygen", str(key)]).exit_code == 0
    assert runner.invoke(cli, ["sign", str(artifacts["mlp"]), "--key", str(key), "-o", str(signed)]).exit_code == 0
    refused = runner.invoke(cli, ["serve", str(artifacts["mlp"]), "--trusted-key", f"{key}.pub", "--port", "1"])
    assert refused.exit_code == 1 and "artifact is not signed, and a signature is required" in refused.output
    exe = aotc.load(artifacts["mlp"], device="cpu")
    with running_server([signed, "--trusted-key", f"{key}.pub"], tmp_path / "server.log") as server:
        x = np.ones((1, 32), np.float32)
        status, reply = server.post("/v2/models/mlp/infer", infer_body(x), {"Content-Type": "application/json"})
        assert status == 200
        assert np.array_equal(np.array(reply["outputs"][0]["data"], np.float32).reshape(1, 10), exe(x=x))
