"""Ahead-of-time compile cost of every example model: cold (empty kernel cache) and warm (cached),
kernel count, distinct kernels, kernels per layer where the model has layers, and artifact size.
Not a test: it prints a table and asserts nothing; compare numbers only between runs on one machine.

    python benchmarks/bench_compile.py [MODEL ...] [--target sm_80 --target sm_90]

Each model is compiled twice in this process with ``CompileOptions(targets=...)``: first against a
fresh, empty kernel cache (``AOTC_CACHE_DIR`` and Triton's ``TRITON_CACHE_DIR`` pointed at a
temporary folder), then again against the
cache the first compile filled. No GPU is needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import aotc
from aotc.lowering.options import CompileOptions, parse_targets
from aotc_cli.loader import load_model
from aotc_cli.text import format_size, table

MODELS = Path(__file__).resolve().parents[1] / "models"
NAMES = ("mlp", "gpt2", "bert", "lstm_ensemble", "cnn")
# decoder/encoder layers of the default build(), for the kernels-per-layer column
LAYERS = {"gpt2": 2, "bert": 2}


def bench(name: str, options: CompileOptions) -> list[str]:
    model, inputs = load_model(MODELS / f"{name}.py")
    times = []
    for _ in ("cold", "warm"):
        start = time.perf_counter()
        compiled = aotc.compile(model, inputs, options=options)
        times.append(time.perf_counter() - start)
    schedule = compiled.schedule
    kernels = len(schedule.kernels) if schedule is not None else 0
    distinct = len({k.name for k in schedule.kernels}) if schedule is not None else 0
    per_layer = f"{kernels / LAYERS[name]:.1f}" if name in LAYERS else "-"
    targets = sorted({arch for b in compiled.kernels.binaries.values() for arch in b.archs})
    return [
        name,
        f"{times[0]:.1f}",
        f"{times[1]:.2f}",
        str(kernels),
        str(distinct),
        per_layer,
        ",".join(targets) or "none",
        format_size(len(compiled.artifact_bytes)),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help="any of: " + ", ".join(NAMES) + " (default: all)")
    parser.add_argument("--target", action="append", metavar="SM", help="repeatable (default: sm_80 and sm_90)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(NAMES))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    options = CompileOptions.from_env()
    options = dataclasses.replace(options, targets=parse_targets(",".join(args.target or ["sm_80", "sm_90"])))
    rows = [["model", "cold s", "warm s", "kernels", "distinct", "per layer", "binaries", "artifact"]]
    with tempfile.TemporaryDirectory() as cache:
        # cold: nothing cached from earlier runs, neither by aotc nor by Triton's own cache
        os.environ["AOTC_CACHE_DIR"] = os.path.join(cache, "aotc")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
        for name in args.models or NAMES:
            rows.append(bench(name, options))
            print(f"{name}: done", file=sys.stderr)
    print(f"{os.cpu_count()} cores; targets {', '.join(options.targets)}")
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
