"""The cuda backend against PyTorch eager and torch.compile, on one GPU. Not a test: it prints tables.

    python benchmarks/bench_cuda.py                      # every example model + GPT-2-small at 1x128 and 8x1024
    python benchmarks/bench_cuda.py gpt2-small --runs 50 --max-autotune

Needs an NVIDIA GPU, torch with CUDA, triton (to compile the kernels ahead of time here) and cuda-bindings;
it stops with a clear message otherwise. Per model and shape, on the same weights and inputs (already on
the GPU): aotc (``CudaBackend`` program: a CUDA graph replayed per shape, inputs read in place, outputs
kept on the device), PyTorch eager and ``torch.compile`` (default; with --max-autotune also
``max-autotune-no-cudagraphs``, whose autotuning takes minutes) run the model's traced high-level graph op
for op as torch ops (``TorchTwin``: one torch call per op the user wrote, as the module's own forward
would make). Calls are interleaved round-robin, each timed to completion (synchronized); the table holds
medians and aotc's latency ratio to each. Also: achieved device-to-device copy bandwidth, and per model the
slowest memory-bound kernels (GB/s, as a fraction of the copy) and slowest matmuls (TFLOP/s, next to
torch.matmul at the same shape), timed one by one with CUDA events (``aotc.runtime.backends.cuda.profile``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
DEVICE = "cuda"  # where the torch side runs

# (name, model file, build() keyword arguments, shapes to run)
CASES: list[tuple[str, str, dict[str, Any], list[dict[str, int]]]] = [
    ("mlp", "mlp", {}, [{"batch": 1}, {"batch": 256}]),
    ("cnn", "cnn", {}, [{"batch": 1}, {"batch": 32}]),
    ("lstm_ensemble", "lstm_ensemble", {}, [{"batch": 1}, {"batch": 64}]),
    ("bert", "bert", {}, [{"batch": 1, "seq": 16}, {"batch": 4, "seq": 128}]),
    ("gpt2", "gpt2", {}, [{"batch": 1, "seq": 16}, {"batch": 4, "seq": 128}]),
    (
        "gpt2-small",
        "gpt2",
        {"vocab_size": 50257, "n_positions": 1024, "d_model": 768, "n_layer": 12, "n_head": 12},
        [{"batch": 1, "seq": 128}, {"batch": 8, "seq": 1024}],
    ),
]


def fail(message: str) -> None:
    print(f"bench_cuda: {message}", file=sys.stderr)
    raise SystemExit(2)


def require_gpu() -> tuple[Any, Any]:
    """torch and the GPU's description, or exit with what is missing."""
    try:
        import torch
    except ImportError:
        fail("needs torch with CUDA (pip install torch); none is installed")
    if not torch.cuda.is_available():
        fail("needs an NVIDIA GPU: torch sees no CUDA device on this machine")
    from aotc.runtime.backends.cuda import probe

    info = probe()
    if info is None:
        fail("the cuda backend finds no usable GPU: install cuda-bindings (pip install aotc[cuda]) and a driver")
    try:
        import triton  # noqa: F401 - the kernels are compiled ahead of time in this process
    except ImportError:
        fail("needs triton to compile the kernels (pip install aotc[compiler])")
    return torch, info


# -- PyTorch side: the traced graph, op for op, as torch calls -------------------------------------------


class TorchTwin:
    """Runs a traced (high-level) aotc graph with torch ops on the GPU: what an eager module would launch."""

    def __init__(self, graph: Any, torch: Any, device: str) -> None:
        from aotc.ir.evaluate import concrete_attrs

        self.graph, self.torch, self.device = graph, torch, device
        self._attrs = concrete_attrs
        self._by_shape: dict[tuple[tuple[str, int], ...], list[dict[str, Any]]] = {}
        self.consts = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in graph.constants.items()}
        self.ops = _torch_ops(torch)
        missing = sorted({n.op.name for n in graph.nodes if n.op.name not in self.ops and n.op.name != "CONSTANT"})
        if missing:
            raise NotImplementedError(f"no torch mapping for op(s) {', '.join(missing)}")

    def __call__(self, feeds: Sequence[Any], env: Mapping[str, int]) -> list[Any]:
        key = tuple(sorted(env.items()))
        attrs = self._by_shape.get(key)
        if attrs is None:  # concrete attrs once per shape, as plain dicts (torch.compile sees constants)
            attrs = self._by_shape[key] = [dict(self._attrs(n.attrs, env)) for n in self.graph.nodes]
        vals: dict[int, Any] = {v.id: x for v, x in zip(self.graph.inputs, feeds)}
        for node, a in zip(self.graph.nodes, attrs):
            if node.op.name == "CONSTANT":
                vals[node.outputs[0].id] = self.consts[a["name"]]
                continue
            vals[node.outputs[0].id] = self.ops[node.op.name]([vals[v.id] for v in node.inputs], a, self.device)
        return [vals[o.id] for o in self.graph.outputs]


def _torch_ops(torch: Any) -> dict[str, Callable[[list[Any], Any, str], Any]]:
    fn = torch.nn.functional
    dt = {
        "float32": torch.float32,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
        "int32": torch.int32,
        "int64": torch.int64,
        "bool": torch.bool,
    }

    def pads2d(p: Sequence[int]) -> tuple[int, int] | None:
        p = tuple(p) or (0, 0, 0, 0)
        return (p[0], p[2]) if p[0] == p[1] and p[2] == p[3] else None

    def conv(xs: list[Any], a: Any, _d: str) -> Any:
        x, pad = xs[0], pads2d(a.get("pads", ()))
        if pad is None:
            p = a["pads"]
            x, pad = fn.pad(x, (p[2], p[3], p[0], p[1])), (0, 0)
        b = xs[2] if len(xs) > 2 else None
        return fn.conv2d(x, xs[1], b, tuple(a.get("strides", (1, 1))), pad, tuple(a.get("dilations", (1, 1))),
                         a.get("groups", 1))  # fmt: skip

    def pool(kind: str) -> Callable[[list[Any], Any, str], Any]:
        def run(xs: list[Any], a: Any, _d: str) -> Any:
            k = tuple(a["kernel"])
            s = tuple(a.get("strides", k))
            pad = pads2d(a.get("pads", ()))
            if pad is None:
                raise NotImplementedError("asymmetric pool padding")
            if kind == "max":
                return fn.max_pool2d(xs[0], k, s, pad)
            return fn.avg_pool2d(xs[0], k, s, pad, count_include_pad=a.get("count_include_pad", True))

        return run

    def sdpa(xs: list[Any], a: Any, _d: str) -> Any:
        q, k, v = xs[:3]
        mask = xs[3] if len(xs) > 3 else None
        causal = bool(a.get("is_causal", False))
        if causal and mask is not None:
            keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
            mask = (mask & keep) if mask.dtype == torch.bool else mask.masked_fill(~keep, float("-inf"))
            causal = False
        return fn.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=a.get("scale"))

    def iota(_xs: list[Any], a: Any, d: str) -> Any:
        shape, axis = tuple(a["shape"]), a.get("axis", 0) % max(len(a["shape"]), 1)
        view = [1] * len(shape)
        view[axis] = shape[axis]
        return torch.arange(shape[axis], device=d).to(dt[a["dtype"].value]).reshape(view).expand(shape)

    def layer_norm(xs: list[Any], a: Any, _d: str) -> Any:
        n = a.get("ndim", 1)
        w = xs[1] if len(xs) > 1 else None
        b = xs[2] if len(xs) > 2 else None
        return fn.layer_norm(xs[0], tuple(xs[0].shape[-n:]), w, b, a.get("eps", 1e-5))

    def batch_norm(xs: list[Any], a: Any, _d: str) -> Any:
        w = xs[3] if len(xs) > 3 else None
        b = xs[4] if len(xs) > 4 else None
        return fn.batch_norm(xs[0], xs[1], xs[2], w, b, False, 0.0, a.get("eps", 1e-5))

    def sliced(xs: list[Any], a: Any, _d: str) -> Any:
        return xs[0][tuple(slice(s, max(s, e), st) for s, e, st in zip(a["starts"], a["stops"], a["steps"]))]

    binary = {
        "ADD": torch.add, "SUB": torch.sub, "MUL": torch.mul, "DIV": torch.div, "MAXIMUM": torch.maximum,
        "MINIMUM": torch.minimum, "POW": torch.pow,
    }  # fmt: skip
    unary = {
        "RELU": torch.relu, "TANH": torch.tanh, "SIGMOID": torch.sigmoid, "EXP": torch.exp, "LOG": torch.log,
        "SQRT": torch.sqrt, "RSQRT": torch.rsqrt, "NEG": torch.neg, "ABS": torch.abs, "ERF": torch.erf,
    }  # fmt: skip
    ops: dict[str, Callable[[list[Any], Any, str], Any]] = {
        **{k: _args2(f) for k, f in binary.items()},
        **{k: _args1(f) for k, f in unary.items()},
        "CAST": lambda xs, a, d: xs[0].to(dt[a["dtype"].value]),
        "CONCAT": lambda xs, a, d: torch.cat(xs, dim=a.get("axis", 0)),
        "FLIP": lambda xs, a, d: torch.flip(xs[0], tuple(a.get("axes", ()))),
        "FULL": lambda xs, a, d: torch.full(tuple(a["shape"]), a["value"], dtype=dt[a["dtype"].value], device=d),
        "GELU": lambda xs, a, d: fn.gelu(xs[0], approximate=a.get("approximate", "none")),
        "LINEAR": lambda xs, a, d: fn.linear(xs[0], xs[1], xs[2] if len(xs) > 2 else None),
        "MATMUL": lambda xs, a, d: torch.matmul(xs[0], xs[1]),
        "PERMUTE": lambda xs, a, d: xs[0].permute(tuple(a["perm"])),
        "RESHAPE": lambda xs, a, d: xs[0].reshape(tuple(a["shape"])),
        "SOFTMAX": lambda xs, a, d: torch.softmax(xs[0], dim=a.get("axis", -1)),
        "EMBEDDING": lambda xs, a, d: fn.embedding(xs[1], xs[0]),
        "WHERE": lambda xs, a, d: torch.where(xs[0], xs[1], xs[2]),
        "SDPA": sdpa,
        "IOTA": iota,
        "LAYER_NORM": layer_norm,
        "BATCH_NORM": batch_norm,
        "SLICE": sliced,
        "CONV2D": conv,
        "MAX_POOL2D": pool("max"),
        "AVG_POOL2D": pool("avg"),
    }
    return ops


def _args1(f: Callable[[Any], Any]) -> Callable[[list[Any], Any, str], Any]:
    return lambda xs, a, d: f(xs[0])


def _args2(f: Callable[[Any, Any], Any]) -> Callable[[list[Any], Any, str], Any]:
    return lambda xs, a, d: f(xs[0], xs[1])


# -- measuring --------------------------------------------------------------------------------------------


def interleaved(calls: dict[str, Callable[[], object]], sync: Callable[[], None], runs: int) -> dict[str, float]:
    """Median milliseconds per call of each, timed round-robin so drift hits all alike."""
    for call in calls.values():
        for _ in range(3):
            call()
    sync()
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(runs):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            sync()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def copy_bandwidth(torch: Any) -> float:
    """GB/s of a 256 MiB device-to-device copy (read + write counted)."""
    a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        b.copy_(a)
    torch.cuda.synchronize()
    return 2 * a.numel() * 20 / (time.perf_counter() - start) / 1e9


def matmul_tflops(torch: Any, m: int, n: int, k: int, dtype: Any) -> float:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    return 2 * m * n * k * 20 / (time.perf_counter() - start) / 1e12


def kernel_report(torch: Any, program: Any, gpu: list[Any], env: Mapping[str, int], copy_gbps: float) -> None:
    """The slowest memory-bound kernels against the copy bandwidth, the slowest matmuls against torch.matmul."""
    from aotc.runtime.backends.cuda.profile import profile

    rows = profile(program, gpu, env)
    memory = sorted((r for r in rows if r.kind in ("pointwise", "reduction")), key=lambda r: -r.ms)[:3]
    for r in memory:
        print(f"    {r.name}: {r.ms * 1e3:.1f} us, {r.gbps:.0f} GB/s = {r.gbps / copy_gbps:.0%} of copy bandwidth")
    matmuls = sorted((r for r in rows if r.mnk is not None), key=lambda r: -r.ms)[:3]
    for r in matmuls:
        m, n, k = r.mnk
        ref = matmul_tflops(torch, m, n, k, torch.float32)
        print(f"    {r.name}: {m}x{n}x{k} {r.ms * 1e3:.1f} us, {r.tflops:.1f} TFLOP/s vs torch.matmul {ref:.1f}")


# -- one model ----------------------------------------------------------------------------------------------


def bench_case(torch: Any, arch: str, case: tuple, args: argparse.Namespace) -> list[list[str]]:
    import aotc
    from aotc.artifact.reader import read_artifact
    from aotc.lowering.options import CompileOptions
    from aotc.runtime import Executable
    from aotc.runtime.backends.cuda import CudaBackend
    from aotc.runtime.guards import Binder
    from aotc_cli.feeds import build_feeds
    from aotc_cli.loader import import_file

    name, file, config, shapes = case
    model, inputs = import_file(MODELS / f"{file}.py").build(**config)
    start = time.perf_counter()
    compiled = aotc.compile(model, inputs, name=name, options=CompileOptions(targets=(arch,)))
    artifact = read_artifact(compiled.artifact_bytes)
    if not artifact.kernels:
        raise RuntimeError(f"the artifact has no kernels: {artifact.meta.get('kernels', 'no reason recorded')}")
    launches = sum(len(s.kernels) for s in artifact.schedules if s is not None)
    print(f"{name}: {launches} launches, {len(artifact.kernels)} distinct kernels, compiled in "
          f"{time.perf_counter() - start:.1f} s", flush=True)  # fmt: skip
    twin = TorchTwin(compiled.graph, torch, DEVICE)
    rows = []
    backend = CudaBackend(graph_cache=args.graph_cache)
    with Executable(artifact, backend, outputs="device") as exe:
        program = exe._variants[0][1]  # the variant's CudaProgram, for the per-kernel times
        for dims in shapes:
            host, _ = build_feeds(compiled.graph, {}, dims, random=True, seed=0)
            names = list(compiled.graph.input_names)
            gpu = [torch.from_numpy(np.ascontiguousarray(host[n])).cuda() for n in names]
            env = Binder(compiled.graph).bind([host[n] for n in names])
            feeds = dict(zip(names, gpu))
            with torch.inference_mode():
                calls: dict[str, Callable[[], object]] = {
                    "aotc": lambda feeds=feeds: exe.run(feeds),  # guards, GPU inputs in place, graph replay
                    "eager": lambda gpu=gpu, env=env: twin(gpu, env),
                }
                compiled_fn = torch.compile(lambda *xs, env=env: twin(xs, env), dynamic=False)
                calls["compile"] = lambda gpu=gpu, c=compiled_fn: c(*gpu)
                if args.max_autotune:
                    tuned = torch.compile(
                        lambda *xs, env=env: twin(xs, env), dynamic=False, mode="max-autotune-no-cudagraphs"
                    )
                    calls["max-autotune"] = lambda gpu=gpu, c=tuned: c(*gpu)
                ours = [torch.from_dlpack(o) for o in exe.run(feeds)]
                ref = twin(gpu, env)
                err = max(float((a.double() - b.double()).abs().max()) for a, b in zip(ours, ref))
                ms = interleaved(calls, torch.cuda.synchronize, args.runs)
            shape = "x".join(str(v) for v in dims.values())
            ratios = [f"{ms['aotc'] / ms[k]:.2f}x" for k in calls if k != "aotc"]
            rows.append([name, shape, *(f"{ms[k]:.3f}" for k in calls), *ratios, f"{err:.1e}"])
            print(f"  {name} {shape}: aotc {ms['aotc']:.3f} ms; per kernel:")
            kernel_report(torch, program, gpu, env, args.copy_gbps)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help=f"any of {', '.join(c[0] for c in CASES)} (default: all)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--graph-cache", type=int, default=16, help="CUDA graphs kept per variant (0: none)")
    parser.add_argument(
        "--max-autotune", action="store_true", help="also torch.compile(mode='max-autotune-no-cudagraphs') (slow)"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    torch, info = require_gpu()
    known = {c[0]: c for c in CASES}
    unknown = [m for m in args.models if m not in known]
    if unknown:
        fail(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    args.copy_gbps = copy_bandwidth(torch)
    print(f"GPU: {info}; torch {torch.__version__}; copy bandwidth {args.copy_gbps:.0f} GB/s")
    arch = "sm_90" if info.capability == (9, 0) else info.arch
    header = ["model", "shape", "aotc ms", "eager ms", "compile ms"]
    header += ["autotune ms"] if args.max_autotune else []
    header += ["vs eager", "vs compile"] + (["vs autotune"] if args.max_autotune else []) + ["max |diff|"]
    rows = []
    for case in [known[m] for m in args.models] or CASES:
        try:
            rows += bench_case(torch, arch, case, args)
        except Exception as e:  # one model failing must not hide the others' numbers
            print(f"{case[0]}: FAILED: {type(e).__name__}: {e}", flush=True)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
