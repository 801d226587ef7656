"""aotc on CPU servers: ``aotc.load(path, device="cpu")`` (onnxruntime over the model the runtime writes from the
artifact's verified graph, its weights read in place from the file) against onnxruntime running the exported ONNX
file of the same model (weights inside, so it constant-folds and prepacks them), with the numpy references
(``device="reference"``) beside them. Not a test: it prints each case's medians and the ratios ``aotc /
onnxruntime`` (aim: <= 1.1) and ``reference / onnxruntime``.

    python benchmarks/bench_cpu.py [CASE ...] [--rounds N] [--calls N] [--threads N] [--no-reference] [--jsonl PATH]

Cases: every example model (``mlp``, ``gpt2``, ``bert``, ``lstm_ensemble``, ``cnn`` at their default sizes and a
mid-size shape), ``minilm`` (models/bert.py at MiniLM's size: 6 layers, 384 wide, seq 128, batch 1 and 8) and
``resnet18`` (torchvision's, 224x224, batch 1 and 8; needs the test extra's torch and torchvision).

Each engine runs in its own process, so neither's threads, allocator or caches touch the other's; the processes
take turns (interleaved rounds of ``--calls`` calls each, one process running at a time) and each engine's median
is over every call of every round. ``--threads`` sets both onnxruntime sessions' intra-op threads (default:
onnxruntime's own); the references use numpy's BLAS threads as configured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ENGINES = ("aotc", "onnxruntime", "reference")
EXAMPLES = {  # example model -> the shape benchmarked (its dynamic dims)
    "mlp": {"batch": 64},
    "gpt2": {"batch": 1, "seq": 64},
    "bert": {"batch": 8, "seq": 64},
    "lstm_ensemble": {"batch": 16},
    "cnn": {"batch": 32},
}
MINILM = {"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
          "intermediate_size": 1536, "max_position_embeddings": 512}  # fmt: skip
CASES = {
    **{name: [env] for name, env in EXAMPLES.items()},
    "minilm": [{"batch": 1, "seq": 128}, {"batch": 8, "seq": 128}],
    "resnet18": [{"batch": 1}, {"batch": 8}],
}
AIM = 1.1


def build(name: str) -> tuple[Any, dict[str, Any]]:
    from aotc_cli.loader import load_model

    if name in EXAMPLES:
        return load_model(ROOT / "models" / f"{name}.py")
    return _minilm() if name == "minilm" else _resnet18()


def _minilm() -> tuple[Any, dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "models"))
    import bert

    return bert.build(**MINILM)


def _resnet18() -> tuple[Any, dict[str, Any]]:
    import aotc

    sys.path.insert(0, str(ROOT / "tests"))
    from torch_kit import torch_module, torchvision_module

    torch_module(skip=False).manual_seed(0)
    model = torchvision_module(skip=False).models.resnet18().eval()
    return model, {"x": aotc.TensorSpec((aotc.Dim("batch", min=1, max=32), 3, 224, 224), "float32")}


def prepare(name: str, folder: Path) -> tuple[Path, Path, list[Path]]:
    """The artifact, the exported ONNX file (weights inside) and one feeds file per shape."""
    import aotc
    from aotc.lowering.options import CompileOptions
    from aotc.onnx import export_graph
    from aotc_cli.feeds import build_feeds

    model, inputs = build(name)
    compiled = aotc.compile(model, inputs, options=CompileOptions(kernels=False, targets=()))
    artifact, onnx_file = folder / f"{name}.aotc", folder / f"{name}.onnx"
    compiled.save(artifact)
    export_graph(compiled.graph, onnx_file)
    feeds = []
    for i, env in enumerate(CASES[name]):
        arrays, _ = build_feeds(compiled.graph, {}, env, random=True, seed=i)
        if "attention_mask" in arrays:
            arrays["attention_mask"][:] = 1
        if "input_ids" in arrays:  # real token ids over the whole vocabulary, not just 0 and 1
            vocab = 30522 if name == "minilm" else 2
            arrays["input_ids"] = np.random.default_rng(i).integers(0, vocab, arrays["input_ids"].shape)
        path = folder / f"{name}-{i}.npz"
        np.savez(path, **arrays)
        feeds.append(path)
    return artifact, onnx_file, feeds


# -- the worker: one engine in its own process ---------------------------------------------------------------------
def worker(engine: str, artifact: str, onnx_file: str, feeds_file: str, threads: int | None) -> None:
    """Loads one engine, then answers each line ``N`` on stdin with the milliseconds of N calls (JSON list)."""
    feeds = dict(np.load(feeds_file))
    if engine == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3  # its warnings (unused initializers of an exported file) are noise here
        if threads is not None:
            options.intra_op_num_threads = threads
        session = ort.InferenceSession(onnx_file, options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]

        def call() -> object:
            return session.run(None, {n: feeds[n] for n in names})

    else:
        import aotc

        exe = aotc.load(artifact, device="cpu" if engine == "aotc" else "reference", threads=threads)

        def call() -> object:
            return exe.run(feeds)

    call()  # warm-up: onnxruntime's first run plans its memory
    print("ready", flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            start = time.perf_counter()
            call()
            times.append((time.perf_counter() - start) * 1e3)
        print(json.dumps(times), flush=True)


# -- the coordinator -----------------------------------------------------------------------------------------------
def measure(engines: list[str], files: tuple[Path, Path, Path], args: argparse.Namespace) -> dict[str, float]:
    """Median ms per call of each engine, its process taking turns with the others."""
    procs = {}
    for engine in engines:
        cmd = [sys.executable, __file__, "--worker", engine, *map(str, files)]
        if args.threads is not None:
            cmd += ["--threads", str(args.threads)]
        procs[engine] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for engine, p in procs.items():
            line = p.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"the {engine} worker failed to start (exit {p.wait()})")
        times: dict[str, list[float]] = {e: [] for e in engines}
        for r in range(args.rounds):
            order = engines[r % len(engines) :] + engines[: r % len(engines)]
            for engine in order:
                calls = args.calls if engine != "reference" else max(1, args.calls // 3)
                procs[engine].stdin.write(f"{calls}\n")
                procs[engine].stdin.flush()
                times[engine] += json.loads(procs[engine].stdout.readline())
        return {e: statistics.median(t) for e, t in times.items()}
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"any of {', '.join(CASES)} (default: all)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-reference", action="store_true", help="skip the numpy references (slow)")
    parser.add_argument("--jsonl", default=None, help="append each row as JSON to this file")
    parser.add_argument("--worker", nargs=4, metavar=("ENGINE", "ARTIFACT", "ONNX", "FEEDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        engine, *files = args.worker
        worker(engine, *files, args.threads)
        return
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    engines = [e for e in ENGINES if e != "reference" or not args.no_reference]
    print(f"{'case':<14} {'shape':<20} {'aotc ms':>10} {'ort ms':>10} {'ref ms':>10} {'aotc/ort':>9} {'ref/ort':>9}")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="bench_cpu-") as tmp:
        for name in args.cases or list(CASES):
            artifact, onnx_file, feeds = prepare(name, Path(tmp))
            for env, feeds_file in zip(CASES[name], feeds):
                ms = measure(engines, (artifact, onnx_file, feeds_file), args)
                ratio = ms["aotc"] / ms["onnxruntime"]
                worst = max(worst, ratio)
                ref = ms.get("reference")
                shape = ",".join(f"{k}={v}" for k, v in env.items())
                ref_text = f"{ref:10.2f}" if ref is not None else f"{'-':>10}"
                ref_ratio = f"{ref / ms['onnxruntime']:8.1f}x" if ref is not None else f"{'-':>9}"
                print(f"{name:<14} {shape:<20} {ms['aotc']:10.2f} {ms['onnxruntime']:10.2f} {ref_text} "
                      f"{ratio:8.2f}x {ref_ratio}", flush=True)  # fmt: skip
                if args.jsonl:
                    row = {"bench": "cpu", "case": name, "shape": env, "aotc_ms": ms["aotc"],
                           "onnxruntime_ms": ms["onnxruntime"], "reference_ms": ref, "aotc_over_ort": ratio,
                           "aim": AIM, "meets": ratio <= AIM, "threads": args.threads}  # fmt: skip
                    with open(args.jsonl, "a") as f:
                        f.write(json.dumps(row) + "\n")
    print(f"worst aotc/onnxruntime: {worst:.2f}x (aim <= {AIM}x)")


if __name__ == "__main__":
    main()
