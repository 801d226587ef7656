"""Loading cost: a GPT-2-small-size artifact (12 layers, width 768, vocab 50257, random weights) read
and fully verified by the artifact reader, against ``np.fromfile`` reading the same file. Not a test:
it prints the times and their ratio, measured in this one run with the page cache warm for both.

    python benchmarks/bench_load.py [--runs N] [--keep PATH]

Also times ``aotc inspect`` of the file (a fresh process, so imports included), which verifies the
header and graphs but not the weights, and prints the file's size against its weights' size.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import aotc
from aotc.artifact import read_artifact

MODELS = Path(__file__).resolve().parents[1] / "models"
INSPECT = "import sys; from aotc_cli.main import main; sys.argv = ['aotc', 'inspect', sys.argv[1]]; main()"


def build_gpt2_small(path: Path) -> int:
    """Compile GPT-2-small-size with random weights to ``path``; returns the model's weight bytes."""
    spec = importlib.util.spec_from_file_location("gpt2", MODELS / "gpt2.py")
    gpt2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt2)
    model, inputs = gpt2.build(vocab_size=50257, n_positions=1024, d_model=768, n_layer=12, n_head=12)
    aotc.compile(model, inputs).save(path)
    return sum(int(v.nbytes) for v in model.state_dict().values())


def times(call: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", type=Path, help="write the artifact here (reused if it exists) instead of a temp dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "gpt2_small.aotc"
        weights = 0
        if not path.exists():
            print(f"compiling GPT-2-small-size with random weights to {path} ...", flush=True)
            weights = build_gpt2_small(path)
        size = os.path.getsize(path)

        def fromfile() -> None:
            np.fromfile(path, dtype=np.uint8)

        def load() -> None:
            art = read_artifact(path)
            assert art.weights_verified

        # warm the page cache (and the reader's first-call costs) before either is timed
        fromfile()
        load()
        # alternate the two, so drift on a shared machine hits both alike
        raw, verified = [], []
        for _ in range(args.runs):
            raw += times(fromfile, 1)
            verified += times(load, 1)
        t_raw, t_load = statistics.median(raw), statistics.median(verified)
        # the best run of each too: on a shared machine other processes inflate the medians
        b_raw, b_load = min(raw), min(verified)
        header = statistics.median(times(lambda: read_artifact(path, verify_weights=False), args.runs))
        inspect = min(times(lambda: subprocess.run([sys.executable, "-c", INSPECT, str(path)], check=True,
                                                   capture_output=True), 3))  # fmt: skip
        art = read_artifact(path)
        print(f"file                        {size / 2**20:9.1f} MiB ({len(art.constants)} constants)")
        if weights:
            print(f"model weights               {weights / 2**20:9.1f} MiB (file / weights = {size / weights:.2f})")
        print(f"np.fromfile                 {t_raw * 1e3:9.1f} ms  median of {args.runs}  (best {b_raw * 1e3:.1f} ms)")
        print(
            f"read_artifact (verified)    {t_load * 1e3:9.1f} ms  median of {args.runs}  (best {b_load * 1e3:.1f} ms)"
        )
        print(
            f"  ratio load / fromfile     {t_load / t_raw:9.2f}   of medians (best / best {b_load / b_raw:.2f}; target <= 1.3)"
        )
        print(f"read_artifact (no weights)  {header * 1e3:9.1f} ms")
        print(f"aotc inspect (new process)  {inspect * 1e3:9.1f} ms  (best of 3, target < 500)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
