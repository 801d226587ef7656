"""Shared pieces of the serving tests: every example model compiled once, free local ports, and real server
processes (``aotc serve`` in a subprocess of its own session) that are always stopped, killed if they must be."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aotc

# Looked up, not imported: importing the SDK here would load its gRPC protos into this process's descriptor pool.
for _module, _why in (("kserve", "pip install 'aotc[serve]'"), ("tritonclient", "the test extra has it")):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"{_module} is not installed ({_why})", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
# A model that keeps state is served by sequence (test_serve_sequences.py), not through these stateless calls.
MODELS = sorted(p.stem for p in (ROOT / "models").glob("*.py") if "self.state(" not in p.read_text())
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each example model in models/ compiled once (no GPU targets: the cpu backend serves them)."""
    from aotc_cli.loader import load_model

    out = tmp_path_factory.mktemp("serve_artifacts")
    paths = {}
    for name in MODELS:
        model, inputs = load_model(ROOT / "models" / f"{name}.py")
        paths[name] = out / f"{name}.aotc"
        aotc.compile(model, inputs).save(paths[name])
    return paths


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def random_feeds(exe: Any, rng: np.random.Generator, dims: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Inputs for ``exe`` with its dynamic dims set from ``dims``: floats normal, integers 0 or 1."""
    feeds = {}
    for spec in exe.inputs:
        shape = [d if isinstance(d, int) else dims[str(d)] for d in spec.shape]
        if spec.dtype.np.kind == "f":
            feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype.np)
        else:
            feeds[spec.name] = rng.integers(0, 2, shape).astype(spec.dtype.np)
    return feeds


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    log: Path

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://{self.url}{path}", timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def post(self, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        req = urllib.request.Request(f"http://{self.url}{path}", data=body, headers=dict(headers or {}), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def metric(self, name: str, model: str) -> float:
        """A Prometheus sample's value from /metrics (0 when absent)."""
        with urllib.request.urlopen(f"http://{self.url}/metrics", timeout=10) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(f"{name}{{") and f'model="{model}"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, then wait; returns the exit code. Kills the process group if it does not end in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid)
            self.proc.wait(5)
            raise AssertionError(
                f"the server did not stop within {STOP_TIMEOUT_S}s of SIGTERM:\n{self.logs()[-4000:]}"
            ) from None


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Whether any process of the server's session is still running (zombies included until reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def server_command(args: Sequence[Any], http_port: int, grpc_port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "aotc_cli.main",
        "serve",
        *map(str, args),
        "--port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
    ]


@contextlib.contextmanager
def running_server(
    args: Sequence[Any],
    log: Path,
    *,
    command: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT_S,
) -> Iterator[Server]:
    """A server process started with ``aotc serve ARGS`` (or ``command``, where ``{http_port}`` and
    ``{grpc_port}`` are filled in) on free ports, ready when yielded; stopped with SIGTERM afterwards and its
    whole process group killed if anything is left. A start that loses its ports to another process (they are
    free when picked, then bound by the server) is tried again on new ones."""
    for attempt in range(3):
        server = _start(args, log, command, env)
        try:
            if _wait_ready(server, timeout, last_try=attempt == 2):
                break
        except BaseException:
            _finish(server)
            raise
        _finish(server)
    try:
        yield server
    finally:
        _finish(server)


def _start(args: Sequence[Any], log: Path, command: list[str] | None, env: Mapping[str, str] | None) -> Server:
    http_port, grpc_port = free_port(), free_port()
    cmd = command or server_command(args, http_port, grpc_port)
    cmd = [c.replace("{http_port}", str(http_port)).replace("{grpc_port}", str(grpc_port)) for c in cmd]
    environ = os.environ | {"PYTHONUNBUFFERED": "1"} | dict(env or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=environ, start_new_session=True)
    return Server(proc, http_port, grpc_port, log)


def _wait_ready(server: Server, timeout: float, last_try: bool) -> bool:
    """True once the server answers ready; False when it lost its port (and may try again); else raises."""
    deadline = time.monotonic() + timeout
    while True:
        if server.proc.poll() is not None:
            logs = server.logs()
            if not last_try and "address already in use" in logs.lower():
                return False
            raise AssertionError(f"the server exited with {server.proc.returncode}:\n{logs[-4000:]}")
        with contextlib.suppress(OSError):
            if server.get("/v2/health/ready", timeout=2)[0] == 200:
                return True
        if time.monotonic() > deadline:
            raise AssertionError(f"the server was not ready within {timeout}s:\n{server.logs()[-4000:]}")
        time.sleep(0.1)


def _finish(server: Server) -> None:
    try:
        if server.proc.poll() is None:
            server.stop()
    finally:
        kill_group(server.proc.pid)
