"""Compile time, artifact size, load time and latency of every example model. Not a test: it
prints a table and asserts nothing; compare numbers only between runs on one machine.

    python benchmarks/bench_models.py [MODEL ...] [--runs N] [--device cpu --device cuda]

Latency is the median of N calls after two warm-up calls, at a small and a larger shape,
on each requested device that can run the artifact (cuda is skipped when unavailable).
The reference measured in the same run is the traced high-level graph evaluated op by op
with the op table's numpy references (no lowering); "vs ref" is latency / that latency.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aotc
from aotc.errors import AotcError
from aotc.ir.evaluate import GraphRunner
from aotc_cli.feeds import build_feeds
from aotc_cli.loader import load_model
from aotc_cli.text import format_size, table

MODELS = Path(__file__).resolve().parents[1] / "models"

# two shapes per model: one latency-bound, one with more work per call
SHAPES: dict[str, list[dict[str, int]]] = {
    "mlp": [{"batch": 1}, {"batch": 256}],
    "gpt2": [{"batch": 1, "seq": 16}, {"batch": 4, "seq": 128}],
    "bert": [{"batch": 1, "seq": 16}, {"batch": 4, "seq": 128}],
    "lstm_ensemble": [{"batch": 1}, {"batch": 64}],
    "cnn": [{"batch": 1}, {"batch": 32}],
}


def median_ms(call: Callable[[], object], runs: int) -> float:
    for _ in range(2):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def bench(name: str, runs: int, devices: list[str], workdir: Path) -> list[list[str]]:
    model, inputs = load_model(MODELS / f"{name}.py")
    start = time.perf_counter()
    compiled = aotc.compile(model, inputs)
    compile_s = time.perf_counter() - start
    path = workdir / f"{name}.aotc"
    compiled.save(path)
    reference = GraphRunner(compiled.graph)
    rows = []
    for device in devices:
        start = time.perf_counter()
        try:
            exe = aotc.load(path, device=device)
        except AotcError as exc:
            print(f"{name}: skipping {device}: {exc}", file=sys.stderr)
            continue
        load_ms = (time.perf_counter() - start) * 1e3
        graph = exe.artifact.variants[0].graph
        for dims in SHAPES[name]:
            feeds, env = build_feeds(graph, {}, dims, random=True, seed=0)
            latency = median_ms(lambda: exe.run(feeds), runs)  # noqa: B023 - called right here
            ref = median_ms(lambda: reference.run(list(feeds.values()), env), runs)  # noqa: B023
            shape = ", ".join(f"{k}={v}" for k, v in dims.items())
            size = format_size(path.stat().st_size)
            rows.append(
                [
                    name,
                    f"{compile_s:.2f}",
                    size,
                    device,
                    f"{load_ms:.1f}",
                    shape,
                    f"{latency:.2f}",
                    f"{latency / ref:.2f}",
                ]
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help="any of: " + ", ".join(SHAPES) + " (default: all)")
    parser.add_argument("--runs", type=int, default=10, help="timed calls per shape (default 10)")
    parser.add_argument("--device", action="append", choices=["cpu", "cuda"], help="repeatable (default: cpu and cuda)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(SHAPES))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    header = ["model", "compile s", "artifact", "device", "load ms", "shape", "median ms", "vs ref"]
    rows = [header]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models or list(SHAPES):
            rows += bench(name, args.runs, args.device or ["cpu", "cuda"], Path(tmp))
            print(f"{name}: done", file=sys.stderr)
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
