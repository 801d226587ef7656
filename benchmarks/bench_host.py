"""aotc's own host cost per cuda call, with no GPU: the fake driver with every call returning at once
(tests/runtime/fake_cuda_calls.py, InstantDriver), so what is timed is aotc's Python, and the driver calls it
makes per call, counted. Not a test: it prints rows.

    python benchmarks/bench_host.py                       # this checkout
    python benchmarks/bench_host.py --before c9e2c8a      # and the same figures from another commit, alternated
    python benchmarks/bench_host.py --gpu --jsonl out.jsonl   # on a GPU: the GPU check's host step (host_gpu.py)

Per model (the example MLP, the overhead case's one-Linear model, a 3-input bf16 attention at seq 1024) and per
path: GPU inputs (torch-like tensors where the path reads torch's attributes, else ``__cuda_array_interface__``, or
DLPack for bfloat16, whose capsule the fake tensor makes in Python: a cost torch's C++ export does not have)
with device outputs, with numpy outputs, host inputs, ``out=``, an explicit prepared call, and the first call at a
new shape. Each figure is the median over --repeats rounds of --calls calls (µs of wall time per call) and the
driver calls one call makes (counted in a separate run). With --before REV the script exports REV's ``aotc``
package into a temporary folder and runs the same cases there in a subprocess, the two sides taking turns
(--rounds), and prints each figure beside its counterpart.

Times on a shared 2-core machine drift by 10-20%: read the ratio of the two sides measured in turns, and the
driver-call counts, which are exact.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests" / "runtime"))

MODELS = ("mlp", "linear", "attention")
SEQ = 1024


def build(name: str) -> tuple[Any, dict[str, tuple[int, ...]], list[dict[str, tuple[int, ...]]]]:
    """The compiled model (no GPU targets: the fake binaries stand in), its timed shapes and first-call shapes."""
    import benchlib
    from kernel_cases import attention_model, overhead_model

    from aotc_cli.loader import import_file

    if name == "mlp":
        built = import_file(ROOT / "models" / "mlp.py").build()
        shape = {"x": (1, 32)}
        fresh = [{"x": (b, 32)} for b in range(2, 34)]
    elif name == "linear":
        built = overhead_model(256)
        shape = {"x": (1, 256)}
        fresh = [{"x": (b, 256)} for b in range(2, 34)]
    else:
        built = attention_model(64, False, 4096)
        dims = (4, 16, SEQ, 64)
        shape = dict.fromkeys("qkv", dims)
        fresh = [dict.fromkeys("qkv", (4, 16, s, 64)) for s in range(SEQ + 1, SEQ + 9)]
    compiled, _ = benchlib.compile_model(built, name, ())
    return compiled, shape, fresh


class Side:
    """One model on one driver: the executable and the inputs of each path."""

    def __init__(self, name: str, count: bool) -> None:
        import numpy as np
        from fake_cuda import fake_binaries
        from fake_cuda_calls import Counted, InstantDriver

        from aotc.artifact.reader import read_artifact
        from aotc.runtime import Executable
        from aotc.runtime.backends.cuda import CudaBackend

        compiled, self.shape, self.fresh = build(name)
        self.fake = InstantDriver(memory=8 << 30)
        self.driver = Counted(self.fake) if count else self.fake
        fake = self.fake

        class Wired(CudaBackend):
            def prepare(self, variant: Any, binaries: Any) -> Any:
                fakes = fake_binaries(variant.plan)
                fake.register(variant.plan, fakes)
                return super().prepare(variant, fakes)

        self.exe = Executable(read_artifact(compiled.artifact_bytes), Wired(driver=self.driver))
        rng = np.random.default_rng(0)
        self.np_dtype = {s.name: s.dtype.np for s in self.exe.inputs}
        self.host = {n: rng.standard_normal(s).astype(self.np_dtype[n]) for n, s in self.shape.items()}
        # What a GPU input is on a side without the torch path: the array interface (one attribute read per call),
        # or DLPack for bfloat16, which the interface cannot name (a capsule made and parsed per call)
        bf16 = any(a.dtype.name == "bfloat16" for a in self.host.values())
        self.cai = {n: fake.device_array(a, dlpack=bf16) for n, a in self.host.items()}
        self.torch = torch_like(fake, self.host)
        if self.torch is not None:
            from aotc.runtime.backends.cuda import arrays

            if hasattr(arrays, "torch_stream"):  # torch here has no CUDA: its current stream is the legacy one
                arrays.torch_stream = lambda device: 0

    def paths(self) -> dict[str, Callable[[], Any]]:
        exe, out = self.exe, {}
        params = _parameters(exe.run)
        gpu = self.torch if self.torch is not None and "stream" in params else self.cai
        out["gpu in, device out"] = lambda: exe.run(gpu, outputs="device")
        out["gpu in, numpy out"] = lambda: exe.run(gpu, outputs="numpy")
        out["host in, numpy out"] = lambda: exe.run(self.host, outputs="numpy")
        if "out" in params:
            first = exe.run(gpu, outputs="device")
            hosts = [o.numpy() for o in first]
            mine = [torch_like(self.fake, {"o": h})["o"] if self.torch else self.fake.device_array(h) for h in hosts]
            out["gpu in, out="] = lambda: exe.run(gpu, out=mine)
        if hasattr(exe, "prepare"):
            call = exe.prepare(self.shape, outputs="device")
            out["prepared, device out"] = lambda: call.run(gpu)
        return out

    def first_calls(self) -> Callable[[], Any]:
        """A call at a shape not seen before, each time (the cases run out after len(fresh) calls)."""
        feeds = iter(
            [{n: self.fake.device_array(self._host(s, n), dlpack=True) for n, s in f.items()} for f in self.fresh]
        )
        return lambda: self.exe.run(next(feeds), outputs="device")

    def _host(self, shape: tuple[int, ...], name: str) -> Any:
        import numpy as np

        return np.zeros(shape, self.np_dtype[name])


def _parameters(fn: Callable[..., Any]) -> set[str]:
    import inspect

    return set(inspect.signature(fn).parameters)


def torch_like(fake: Any, host: Mapping[str, Any]) -> dict[str, Any] | None:
    """torch.Tensor subclasses that say they live on cuda:0 at a fake-driver address: what the fast input path
    reads (data_ptr, shape, dtype, is_cuda, device index, contiguity). None without torch."""
    try:
        from fake_torch import cuda_tensor
    except ImportError:
        return None
    return {n: cuda_tensor(fake, a) for n, a in host.items()}


def timed(call: Callable[[], Any], calls: int, repeats: int) -> float:
    """µs per call: median over ``repeats`` rounds of ``calls`` back-to-back calls."""
    for _ in range(20):
        call()
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        rounds.append((time.perf_counter() - start) * 1e6 / calls)
    return statistics.median(rounds)


def measure(args: argparse.Namespace) -> dict[str, dict[str, dict[str, Any]]]:
    """{model: {path: {"us": ..., "calls": ..., "names": ...}}} for this process's aotc."""
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for name in args.models:
        timing, counting = Side(name, count=False), Side(name, count=True)
        rows: dict[str, dict[str, Any]] = {}
        counted = counting.paths()
        for path, call in timing.paths().items():
            us = timed(call, args.calls, args.repeats)
            for _ in range(3):
                counted[path]()
            counting.driver.reset()
            counted[path]()
            names = list(counting.driver.calls)
            rows[path] = {"us": us, "calls": len(names), "names": _summary(names)}
        first = timing.first_calls()
        start = time.perf_counter()
        n = len(timing.fresh)
        for _ in range(n):
            first()
        rows["first call at a shape"] = {"us": (time.perf_counter() - start) * 1e6 / n, "calls": None, "names": ""}
        result[name] = rows
        timing.exe.close()
        counting.exe.close()
    return result


def _summary(names: list[str]) -> str:
    from collections import Counter

    return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in Counter(names).items())


def export(rev: str) -> str:
    """REV's aotc package and cli in a temporary folder (for PYTHONPATH)."""
    folder = tempfile.mkdtemp(prefix="aotc-before-")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "aotc", "cli"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    shim = Path(folder) / "shim"
    shim.mkdir()
    (shim / "aotc_cli").symlink_to(Path(folder) / "cli")
    return f"{folder}{os.pathsep}{shim}"


def side_run(args: argparse.Namespace, pythonpath: str | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--json", "--calls", str(args.calls), "--repeats", str(args.repeats), *args.models]
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model and path, the median µs of the rounds (the counts are the same in each)."""
    out: dict[str, Any] = {}
    for model in runs[0]:
        out[model] = {}
        for path, row in runs[0][model].items():
            us = statistics.median(r[model][path]["us"] for r in runs)
            out[model][path] = {**row, "us": us}
    return out


def calibration() -> float:
    """ns of one call of an empty 3-argument Python function here and now: the unit a loaded machine stretches."""
    import timeit

    return min(timeit.repeat("f(1, 2, 3)", "def f(a, b, c): pass", number=200_000, repeat=5)) / 200_000 * 1e9


def report(after: Mapping[str, Any], before: Mapping[str, Any] | None, rev: str | None) -> None:
    head = f"{'model':10} {'path':24} {'µs/call':>9} {'driver calls':>12}"
    if before is not None:
        head += f" | {'before µs':>9} {'calls':>6} {'ratio':>6}"
    print(head)
    for model, rows in after.items():
        for path, row in rows.items():
            calls = "" if row["calls"] is None else str(row["calls"])
            line = f"{model:10} {path:24} {row['us']:9.1f} {calls:>12}"
            if before is not None:
                old = before.get(model, {}).get(path)
                if old is None:
                    line += f" | {'n/a':>9} {'':>6} {'':>6}"
                else:
                    old_calls = "" if old["calls"] is None else str(old["calls"])
                    line += f" | {old['us']:9.1f} {old_calls:>6} {old['us'] / row['us']:5.1f}x"
            print(line + (f"   [{row['names']}]" if row["names"] else ""))
    if before is not None:
        print(f"before: {rev}; ratio = before µs / after µs (above 1: this checkout is faster)")
    print(f"calibration: an empty Python function call takes {calibration():.0f} ns here now (~40 ns on an idle core)")


def record(result: Mapping[str, Any], jsonl: str | None) -> None:
    """One row per model and path (the fake driver's figures: the GPU check's dry run writes these)."""
    if not jsonl:
        return
    import benchlib

    rec = benchlib.Recorder("bench_host", jsonl, out=open(os.devnull, "w"))
    for model, rows in result.items():
        for path, row in rows.items():
            rec.add(f"{model}: {path}", "instant fake driver", dtype=None, aotc_ms=row["us"] / 1e3, ref_name=None,
                    ref_ms=None, driver_calls=row["calls"], note=row["names"])  # fmt: skip


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", metavar="MODEL", help=f"of {', '.join(MODELS)} (default: all)")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--before", metavar="REV", help="also measure this git revision's aotc, in turns")
    p.add_argument("--rounds", type=int, default=2, help="turns each side takes with --before")
    p.add_argument("--json", action="store_true", help="print one JSON object (what --before reads)")
    p.add_argument("--jsonl", metavar="PATH", help="append one JSON row per figure (the GPU check's results)")
    p.add_argument("--gpu", action="store_true", help="time on the GPU instead (host_gpu.py; needs torch with CUDA)")
    args = p.parse_args(argv)
    args.models = args.models or list(MODELS)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.simplefilter("ignore")
    args = parse(argv)
    if args.gpu:
        from host_gpu import run_gpu

        return run_gpu(args)
    if args.json:
        print(json.dumps(measure(args)))
        return 0
    if args.before is None:
        result = measure(args)
        report(result, None, None)
        record(result, args.jsonl)
        return 0
    path = export(args.before)
    afters, befores = [], []
    for _ in range(args.rounds):
        befores.append(side_run(args, path))
        afters.append(side_run(args, None))
    report(merge(afters), merge(befores), args.before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
