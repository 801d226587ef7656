"""Loading cost: a GPT-2-small-size artifact (12 layers, width 768, vocab 50257, random weights) read
and fully verified by the artifact reader, against ``np.fromfile`` reading the same file. Not a test:
it prints the times and their ratio, measured in this one run with the page cache warm for both.

    python benchmarks/bench_load.py [--runs N] [--keep PATH]

Also times ``aotc inspect`` of the file (a fresh process, so imports included), which verifies the
header and graphs but not the weights, and prints the file's size against its weights' size.

With the ``sign`` extra installed it also signs a copy with a key made for the run and times the signed
file's verified load against trusted keys (signature, BLAKE3 digests of every byte) beside the unsigned
verified load (target: signed / unsigned <= 1.3), and both loads in a fresh process (imports included).
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
FRESH_LOAD = (
    "import sys; from aotc.artifact import read_artifact; read_artifact(sys.argv[1], trusted_keys=sys.argv[2:] or None)"
)


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

        signed = _sign_copy(path, Path(tmp))

        def load_signed() -> None:
            assert signed is not None
            art = read_artifact(signed[0], trusted_keys=[signed[1]])
            assert art.weights_verified and art.signature_verified

        # warm the page cache (and the reader's first-call costs) before either is timed
        fromfile()
        load()
        if signed:
            load_signed()
        # alternate them, so drift on a shared machine hits all alike
        raw, verified, verified_signed = [], [], []
        for _ in range(args.runs):
            raw += times(fromfile, 1)
            verified += times(load, 1)
            if signed:
                verified_signed += times(load_signed, 1)
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
        if signed:
            t_sig, b_sig = statistics.median(verified_signed), min(verified_signed)
            print(
                f"read_artifact (signed, verified against its key) {t_sig * 1e3:9.1f} ms  median of {args.runs}"
                f"  (best {b_sig * 1e3:.1f} ms)"
            )
            print(
                f"  ratio signed / unsigned   {t_sig / t_load:9.2f}   of medians (best / best {b_sig / b_load:.2f}; "
                "target <= 1.3)"
            )
            print(f"  ratio signed / fromfile   {t_sig / t_raw:9.2f}   of medians (best / best {b_sig / b_raw:.2f})")
            fresh = [
                min(times(lambda a=a: subprocess.run([sys.executable, "-c", FRESH_LOAD, *a], check=True), 3))
                for a in ([str(path)], [str(signed[0]), str(signed[1])])
            ]
            print(
                f"new process, load + imports   unsigned {fresh[0] * 1e3:.1f} ms, signed {fresh[1] * 1e3:.1f} ms"
                " (best of 3; the signed one imports cryptography and blake3)"
            )
        print(f"read_artifact (no weights)  {header * 1e3:9.1f} ms")
        print(f"aotc inspect (new process)  {inspect * 1e3:9.1f} ms  (best of 3, target < 500)")
    return 0


def _sign_copy(path: Path, tmp: Path) -> tuple[Path, Path] | None:
    """A signed copy of ``path`` and the public key to verify it, or None without the ``sign`` extra."""
    try:
        from aotc.artifact.signing import generate_key, sign_file

        _, public, _ = generate_key(tmp / "bench_key")
        signed = tmp / "signed.aotc"
        sign_file(path, tmp / "bench_key", signed)
    except aotc.UnsupportedError as e:
        print(f"(no signed load: {e})")
        return None
    return signed, public


if __name__ == "__main__":
    sys.exit(main())
