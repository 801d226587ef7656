"""``aotc serve`` against calling the Executable directly, in the same run. Not a test: it prints a table and
asserts nothing; compare numbers only between runs on one machine.

    python benchmarks/bench_serve.py [MODEL ...] [--concurrency 1 8 64] [--seconds 3] [--device cpu] [--dim seq=16]
                                     [--artifacts DIR] [--jsonl FILE]

For each model (default: mlp and bert) and each concurrency C, C client threads send requests of one row
each (BERT: seq 16) in a closed loop for ``--seconds``: to the Executable directly (``exe.run`` from C
threads), and to an ``aotc serve`` process with batching off (``--max-batch 1``), on (the default: up to the
batch dim's maximum, at the size measured fastest) and on with fixed batches (``--fixed-batch``: always up to
the maximum), each client a tritonclient.http client sending binary tensors (their threads spread over ``--client-procs``
processes: one process's GIL would cap what they send). A row gives throughput,
p50 and p99 latency, the server's p50 over the direct call's, its throughput over the direct one's, and the
CPU time per request (the benchmark process's for direct calls, the server process's for the server: a
figure that other load on the machine disturbs far less than latency). The summary lines give the two aims:
the server's added p50 at concurrency 1 (batching off; aim <= 1 ms) and batching's throughput gain at
concurrency 64 (aim >= 3x on BERT). The clients share the machine's cores with the server; with ``--device
cuda`` (where a GPU is present) the direct calls and the server run there.

``--artifacts DIR`` serves ``DIR/MODEL.aotc`` instead of compiling the example (the GPU check carries files built
elsewhere: nothing is compiled on the GPU machine); ``--jsonl FILE`` appends one JSON row per figure.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aotc  # noqa: E402
from aotc_cli.loader import load_model  # noqa: E402
from aotc_cli.text import table  # noqa: E402

DIMS = {"mlp": {"batch": 1}, "bert": {"batch": 1, "seq": 16}, "gpt2": {"batch": 1, "seq": 16},
        "cnn": {"batch": 1}, "lstm_ensemble": {"batch": 1}}  # fmt: skip
MODES = (
    ("serve, batching off", ["--max-batch", "1"]),
    ("serve, batching on", []),
    ("serve, fixed batches", ["--fixed-batch"]),
)
V2 = {"float32": "FP32", "int64": "INT64", "int32": "INT32", "bool": "BOOL"}


def feeds_for(exe: Any, dims: dict[str, int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for spec in exe.inputs:
        shape = [d if isinstance(d, int) else dims[str(d)] for d in spec.shape]
        kind = spec.dtype.np.kind
        out[spec.name] = (rng.standard_normal(shape) if kind == "f" else rng.integers(0, 2, shape)).astype(
            spec.dtype.np
        )
    return out


def closed_loop(call: Callable[[], Any], clients: int, seconds: float) -> tuple[int, float, list[float]]:
    """``clients`` threads calling ``call`` until ``seconds`` pass: (requests, elapsed s, latencies in ms)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = threading.Event()
    start_line = threading.Barrier(clients + 1)

    def worker(i: int) -> None:
        start_line.wait()
        while not stop.is_set():
            t = time.perf_counter()
            call()
            latencies[i].append((time.perf_counter() - t) * 1e3)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    start_line.wait()
    begin = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - begin
    flat = [x for per in latencies for x in per]
    return len(flat), elapsed, flat


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, artifact: Path, name: str, device: str, extra: list[str], log: Path) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "aotc_cli.main", "serve", str(artifact), "--name", name, "--device", device,
               "--port", str(self.port), "--grpc-port", "0", *extra]  # fmt: skip
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
            if self.proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"aotc serve did not start; see {log}")

    def cpu_seconds(self) -> float:
        """CPU time the server process has used (user + system), from /proc: a figure that other load on the
        machine changes far less than latency."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def client_call(port: int, name: str, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
    import tritonclient.http as httpclient

    local = threading.local()

    def call() -> Any:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=300)
        inputs = []
        for n, a in feeds.items():
            t = httpclient.InferInput(n, list(a.shape), V2[a.dtype.name])
            t.set_data_from_numpy(a)
            inputs.append(t)
        return client.infer(name, inputs)

    return call


def _client_share(port: int, name: str, feeds: dict[str, np.ndarray], clients: int, seconds: float) -> Any:
    """One client process's share of a closed loop through the server (run in a spawned process)."""
    return closed_loop(client_call(port, name, feeds), clients, seconds)


def served_loop(
    args: argparse.Namespace, port: int, name: str, feeds: dict[str, np.ndarray], clients: int
) -> tuple[int, float, list[float]]:
    """``closed_loop`` through the server, its client threads spread over ``args.pool``'s ``args.client_procs``
    processes (no pool: this one). One Python process's client threads are bound by its GIL; on a many-core
    machine the server can outrun them."""
    pool, seconds = args.pool, args.seconds
    if pool is None:
        return closed_loop(client_call(port, name, feeds), clients, seconds)
    procs = min(clients, args.client_procs)
    shares = [clients // procs + (i < clients % procs) for i in range(procs)]
    parts = list(pool.map(_client_share, *zip(*[(port, name, feeds, n, seconds) for n in shares])))
    rate = sum(n / elapsed for n, elapsed, _ in parts)
    total = sum(n for n, _, _ in parts)
    return total, total / rate, [x for _, _, lat in parts for x in lat]


def bench_model(name: str, args: argparse.Namespace, work: Path) -> tuple[list[list[str]], dict[str, Any]]:
    if args.artifacts is not None:
        artifact = args.artifacts / f"{name}.aotc"
    else:
        model, inputs = load_model(ROOT / "models" / f"{name}.py")
        artifact = work / f"{name}.aotc"
        aotc.compile(model, inputs).save(artifact)
    exe = aotc.load(artifact, device=args.device)
    feeds = feeds_for(exe, DIMS[name] | args.dims)
    rows: list[list[str]] = []
    results: dict[tuple[str, int], tuple[float, float]] = {}

    def record(mode: str, c: int, n: int, elapsed: float, lat: list[float], cpu_s: float) -> None:
        rps, p50, p99 = n / elapsed, percentile(lat, 50), percentile(lat, 99)
        results[(mode, c)] = (rps, p50, cpu_s / n * 1e3)
        direct = results.get(("direct", c)) if mode != "direct" else None
        vs = f"{p50 - direct[1]:+.2f} ms" if direct else "-"
        ratio = f"{rps / direct[0]:.2f}x" if direct else "-"
        cpu = f"{cpu_s / n * 1e3:.2f}"
        row = [name, args.device, mode, str(c), str(n), f"{rps:.0f}", f"{p50:.2f}", f"{p99:.2f}", vs, ratio, cpu]
        rows.append(row)
        print("  " + "  ".join(row), flush=True)
        if args.jsonl is not None:
            figure = dict(bench="serve", model=name, device=args.device, mode=mode, concurrency=c, requests=n,
                          req_per_s=rps, p50_ms=p50, p99_ms=p99, cpu_ms_per_req=cpu_s / n * 1e3,
                          direct_p50_ms=direct[1] if direct else None, direct_req_per_s=direct[0] if direct else None,
                          dims=DIMS[name] | args.dims)  # fmt: skip
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(figure) + "\n")

    for c in args.concurrency:
        for _ in range(3):
            exe.run(feeds)
        start = time.process_time()
        measured = closed_loop(lambda: exe.run(feeds), c, args.seconds)
        record("direct", c, *measured, time.process_time() - start)
    for mode, extra in MODES:
        server = ServerProcess(artifact, name, args.device, extra, work / f"{name}-{len(rows)}.log")
        try:
            call = client_call(server.port, name, feeds)
            for _ in range(5):
                call()
            for c in args.concurrency:
                start = server.cpu_seconds()
                measured = served_loop(args, server.port, name, feeds, c)
                record(mode, c, *measured, server.cpu_seconds() - start)
        finally:
            server.stop()
    return rows, {k: v for k, v in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "models", nargs="*", metavar="MODEL", help=f"Any of {', '.join(sorted(DIMS))}.  [default: mlp bert]"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--seconds", type=float, default=3.0, help="Measured time per row.")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the server's and the direct calls').")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE", help="A request dim (seq=16).")
    parser.add_argument("--artifacts", type=Path, metavar="DIR", help="Serve DIR/MODEL.aotc; compile nothing.")
    parser.add_argument("--jsonl", type=Path, metavar="FILE", help="Append one JSON row per figure to FILE.")
    parser.add_argument(
        "--client-procs",
        type=int,
        default=max(1, min(8, (os.cpu_count() or 2) // 2)),
        metavar="P",
        help="Processes the server's clients are spread over (1: threads of this process).  [default: half the "
        "cores, at most 8]",
    )
    args = parser.parse_args()
    args.models = args.models or ["mlp", "bert"]
    args.dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}
    unknown = sorted(set(args.models) - set(DIMS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}")
    head = [
        "model",
        "device",
        "mode",
        "conc",
        "requests",
        "req/s",
        "p50 ms",
        "p99 ms",
        "p50 vs direct",
        "req/s vs direct",
        "cpu ms/req",
    ]
    all_rows, summary = [], []
    args.pool = None
    if args.client_procs > 1:
        # spawn, not fork: the direct calls may have opened a CUDA context in this process
        args.pool = ProcessPoolExecutor(args.client_procs, mp_context=multiprocessing.get_context("spawn"))
        list(args.pool.map(abs, range(args.client_procs)))  # start the processes before anything is timed
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            print(f"{name}:", flush=True)
            rows, results = bench_model(name, args, Path(tmp))
            all_rows += rows
            if ("direct", 1) in results and ("serve, batching off", 1) in results:
                (_, direct_p50, direct_cpu), (_, served_p50, served_cpu) = (
                    results[("direct", 1)],
                    results[("serve, batching off", 1)],
                )
                summary.append(
                    f"{name}: the server adds {served_p50 - direct_p50:.2f} ms p50 at concurrency 1 (aim <= 1 ms); "
                    f"its CPU per request {served_cpu:.2f} ms against the direct call's {direct_cpu:.2f} ms"
                )
            top = max(args.concurrency)
            if ("serve, batching on", top) in results and ("serve, batching off", top) in results:
                off = results[("serve, batching off", top)][0]
                gain = results[("serve, batching on", top)][0] / off
                fixed = results.get(("serve, fixed batches", top), (float("nan"),))[0] / off
                summary.append(
                    f"{name}: batching gives {gain:.2f}x the throughput at concurrency {top} (aim >= 3x on bert); "
                    f"fixed batches {fixed:.2f}x"
                )
    if args.pool is not None:
        args.pool.shutdown()
    print()
    print("\n".join(table([head, *all_rows])))
    print()
    print("\n".join(summary))


if __name__ == "__main__":
    main()
