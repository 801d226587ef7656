"""The cuda backend against PyTorch eager and torch.compile, on one GPU. Not a test: it prints rows.

    python benchmarks/bench_cuda.py --jsonl out/bench_cuda.jsonl     # every example model + GPT-2-small
    python benchmarks/bench_cuda.py gpt2-small --runs 50 --max-autotune
    python benchmarks/bench_cuda.py --compile-only --targets sm_80,sm_90  # no GPU: fill the kernel cache

The timed run needs an NVIDIA GPU, torch with CUDA and cuda-bindings (and triton's metadata: the kernel cache
is keyed by its version); it stops with a clear message otherwise. It compiles each model for
``benchlib.gpu_targets`` of the GPU (sm_80 and the GPU's own: on an H100, sm_80 and sm_90), the same list
``--compile-only --targets`` names, so a cache filled by ``--compile-only`` on a machine without a GPU (with
the same triton version) is all hits and the timed run compiles no kernel; it prints how many it compiled.

Per model and shape, on the same weights and inputs (already on the GPU): aotc (``CudaBackend`` program: a
CUDA graph replayed per shape, inputs read in place, outputs kept on the device), PyTorch eager and
``torch.compile`` (default; with --max-autotune also ``max-autotune-no-cudagraphs``, whose autotuning takes
minutes) run the model's traced high-level graph op for op as torch ops (``TorchTwin``: one torch call per op
the user wrote, as the module's own forward would make). One ``torch.compile`` object per model serves all
its shapes (dynamo recompiles per shape). Calls are interleaved round-robin, each timed to completion
(synchronized); each row (medians, ratio = torch.compile ms / aotc ms: above 1 aotc is faster) is printed as
soon as it is measured and appended to ``--jsonl PATH``; a model or shape that fails writes a row with
"error" and the run goes on. Also: achieved device-to-device copy bandwidth, and per model the slowest
memory-bound kernels (GB/s, as a fraction of the copy) and slowest matmuls (TFLOP/s, next to torch.matmul at
the same shape), timed one by one with CUDA events (``aotc.runtime.backends.cuda.profile``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # the targets, compile, rows and timing both benchmarks share

ROOT = benchlib.ROOT
MODELS = benchlib.MODELS
DEVICE = "cuda"  # where the torch side runs
interleaved = benchlib.interleaved

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
        triton_version()  # the kernel cache is keyed by it; a miss compiles here
    except Exception as e:
        fail(f"needs triton (pip install aotc[compiler]): {e}")
    import torch._dynamo

    config = torch._dynamo.config  # one compiled function per model: room for every model's shapes
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, limit):
            setattr(config, limit, max(getattr(config, limit), 64))
    return torch, info


def triton_version() -> str:
    from aotc.kernels.aot import triton_version as installed

    return installed()


def run_context(torch: Any, info: Any, targets: tuple[str, ...]) -> dict[str, Any]:
    """What every row of a timed run records about where it ran."""
    return {"gpu": info.name, "arch": info.arch, "targets": list(targets), "torch": torch.__version__,
            "triton": triton_version()}  # fmt: skip


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

    def prepare(self, env: Mapping[str, int]) -> None:
        """Each node's concrete attrs for this shape, as plain dicts (torch.compile sees constants). Prepare every
        shape before the first compiled call, so the compiled code only looks them up."""
        key = tuple(sorted(env.items()))
        if key not in self._by_shape:
            self._by_shape[key] = [dict(self._attrs(n.attrs, env)) for n in self.graph.nodes]

    def __call__(self, feeds: Sequence[Any], env: Mapping[str, int]) -> list[Any]:
        key = tuple(sorted(env.items()))
        if key not in self._by_shape:
            self.prepare(env)
        attrs = self._by_shape[key]
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


def copy_bandwidth(torch: Any) -> float:
    """GB/s of a 256 MiB device-to-device copy (read + write counted), timed with CUDA events."""
    a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = event_ms(torch, lambda: b.copy_(a), 20)
    return 2 * a.numel() / ms / 1e6


def matmul_tflops(torch: Any, m: int, n: int, k: int, dtype: Any) -> float:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    return 2 * m * n * k / event_ms(torch, lambda: a @ b, 20) / 1e9


def event_ms(torch: Any, call: Callable[[], object], repeats: int) -> float:
    """Mean GPU milliseconds of ``call`` queued ``repeats`` times between two CUDA events, after a warm-up."""
    for _ in range(3):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


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
        print(f"    {r.name}: {m}x{n}x{k} {r.ms * 1e3:.1f} us, {r.tflops:.1f} TFLOP/s vs torch.matmul {ref:.1f}",
              flush=True)  # fmt: skip


# -- one model ----------------------------------------------------------------------------------------------


def build_case(case: tuple) -> tuple[Any, dict[str, Any]]:
    """The model and its input specs: GPT-2s with their weights drawn fast (benchlib.gpt2_model)."""
    _, file, config, _ = case
    if file == "gpt2":
        return benchlib.gpt2_model(config)
    return benchlib.import_model_file(file).build(**config)


def compile_case(case: tuple, targets: tuple[str, ...]) -> Any:
    """The model compiled for ``targets``, as the timed run and --compile-only both compile it."""
    name = case[0]
    start = time.perf_counter()
    compiled, new = benchlib.compile_model(build_case(case), name, targets)
    if compiled.schedule is None:
        raise RuntimeError(f"{name}: no kernels: {compiled.kernels.note}")
    launches, distinct = len(compiled.schedule.kernels), len({k.name for k in compiled.schedule.kernels})
    jobs = benchlib.binary_jobs(compiled)
    print(f"{name}: {launches} launches, {distinct} distinct kernels, compiled in {time.perf_counter() - start:.1f} s "
          f"for {','.join(targets)}; kernel binaries: {new} compiled, {max(jobs - new, 0)} from the cache",
          flush=True)  # fmt: skip
    return compiled


def random_feeds(graph: Any, shapes: list[dict[str, int]], twin: Any) -> tuple[list[str], list[dict], list[dict]]:
    """Random host inputs for each shape (the CLI's ``--random``), their symbol bindings, and ``twin`` prepared
    for each binding."""
    from aotc.runtime.guards import Binder
    from aotc_cli.feeds import build_feeds

    names = list(graph.input_names)
    hosts = [build_feeds(graph, {}, dims, random=True, seed=0)[0] for dims in shapes]
    envs = [Binder(graph).bind([host[n] for n in names]) for host in hosts]
    for env in envs:
        twin.prepare(env)
    return names, hosts, envs


def bench_case(torch: Any, targets: tuple[str, ...], case: tuple, args: argparse.Namespace, rec: Any) -> None:
    """One model at each of its shapes: a row each (an error row for each shape the model could not reach)."""
    from aotc.artifact.reader import read_artifact
    from aotc.runtime import Executable
    from aotc.runtime.backends.cuda import CudaBackend

    name, _, _, shapes = case
    fields: dict[str, Any] = {"ref_name": "torch.compile"}
    try:
        compiled = compile_case(case, targets)
        artifact = read_artifact(compiled.artifact_bytes)
        if not artifact.kernels:
            raise RuntimeError(f"the artifact has no kernels: {artifact.meta.get('kernels', 'no reason recorded')}")
        fields["dtype"] = compiled.graph.outputs[0].type.dtype.value
        twin = TorchTwin(compiled.graph, torch, DEVICE)
        names, hosts, envs = random_feeds(compiled.graph, shapes, twin)
    except Exception as e:
        for dims in shapes:
            rec.error(name, dims, e, **fields)
        return
    # one torch.compile object per model: dynamo recompiles it per shape (dynamic=False: shapes as constants)
    compiled_fn = torch.compile(lambda env, *xs: twin(xs, env), dynamic=False)
    tuned = None
    if args.max_autotune:
        tuned = torch.compile(lambda env, *xs: twin(xs, env), dynamic=False, mode="max-autotune-no-cudagraphs")
    launches = len(compiled.schedule.kernels)
    try:
        with Executable(artifact, CudaBackend(graph_cache=args.graph_cache), outputs="device") as exe:
            program = exe._variants[0][1]  # the variant's CudaProgram, for the per-kernel times
            for dims, host, env in zip(shapes, hosts, envs):
                with rec.attempt(name, dims, **fields):
                    gpu = [torch.from_numpy(np.ascontiguousarray(host[n])).cuda() for n in names]
                    feeds = dict(zip(names, gpu))
                    with torch.inference_mode():
                        calls: dict[str, Callable[[], object]] = {
                            "aotc": lambda feeds=feeds: exe.run(feeds),  # guards, GPU inputs in place, replay
                            "eager": lambda gpu=gpu, env=env: twin(gpu, env),
                            "compile": lambda gpu=gpu, env=env: compiled_fn(env, *gpu),
                        }
                        if tuned is not None:
                            calls["max-autotune"] = lambda gpu=gpu, env=env: tuned(env, *gpu)
                        ours = [torch.from_dlpack(o) for o in exe.run(feeds)]
                        ref = twin(gpu, env)
                        err = max(float((a.double() - b.double()).abs().max()) for a, b in zip(ours, ref))
                        del ours, ref
                        before = dict(program.stats)
                        ms = benchlib.interleaved(calls, torch.cuda.synchronize, args.runs)
                        replays = program.stats["replay"] - before["replay"]
                        eagers = program.stats["eager"] - before["eager"]
                    extra = {"max_autotune_ms": ms["max-autotune"]} if tuned is not None else {}
                    rec.add(name, dims, aotc_ms=ms["aotc"], ref_ms=ms["compile"], eager_ms=ms["eager"],
                            ratio_vs_eager=ms["eager"] / ms["aotc"], max_abs_diff=err, launches=launches,
                            aotc_graph_replays=replays / max(replays + eagers, 1), **extra, **fields)  # fmt: skip
                    try:
                        print(f"  {name} {'x'.join(map(str, dims.values()))}: per kernel:", flush=True)
                        kernel_report(torch, program, gpu, env, args.copy_gbps)
                    except Exception as e:  # a diagnostic: the row is already recorded
                        print(f"  per-kernel report failed: {type(e).__name__}: {e}", flush=True)
                    del gpu, feeds, calls
    finally:
        torch._dynamo.reset()  # this model's compiled code goes: the next model starts clean
        benchlib.release_gpu_memory()


# -- without a GPU ----------------------------------------------------------------------------------------------


def compile_only(cases: Sequence[tuple], targets: tuple[str, ...]) -> int:
    """Compile every model the timed run would, for ``targets``, filling the kernel cache; 0 when all compiled."""
    start = time.perf_counter()
    print(f"compile only, for {','.join(targets)} (triton {triton_version()}): a timed run on a GPU whose "
          f"targets are these, with this triton, finds every kernel in the cache", flush=True)  # fmt: skip
    failed = 0
    for case in cases:
        try:
            compile_case(case, targets)
        except Exception as e:
            failed += 1
            print(f"{case[0]}: FAILED: {type(e).__name__}: {e}", flush=True)
    print(benchlib.TALLY.line())
    print(f"compile only: {len(cases) - failed} of {len(cases)} models in {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help=f"any of {', '.join(c[0] for c in CASES)} (default: all)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--graph-cache", type=int, default=16, help="CUDA graphs kept per variant (0: none)")
    parser.add_argument(
        "--max-autotune", action="store_true", help="also torch.compile(mode='max-autotune-no-cudagraphs') (slow)"
    )
    parser.add_argument("--jsonl", metavar="PATH", help="append one JSON object per measured row (flushed)")
    parser.add_argument(
        "--compile-only", action="store_true", help="no GPU, no torch: compile every model for --targets, then stop"
    )
    parser.add_argument(
        "--targets", help="with --compile-only: the GPU targets to compile for (default sm_80,sm_90: an H100's)"
    )
    args = parser.parse_args(argv)
    known = {c[0]: c for c in CASES}
    unknown = [m for m in args.models if m not in known]
    if unknown:
        fail(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    cases = [known[m] for m in args.models] or CASES
    if args.targets is not None and not args.compile_only:
        fail("--targets goes with --compile-only: a timed run compiles for its GPU (benchlib.gpu_targets)")
    if args.compile_only:
        try:
            targets = benchlib.targets_from_flag(args.targets or "sm_80,sm_90")
        except Exception as e:
            fail(str(e))
        return compile_only(cases, targets)
    torch, info = require_gpu()
    targets = benchlib.gpu_targets(info.capability)
    rec = benchlib.Recorder("bench_cuda", args.jsonl)
    rec.context = run_context(torch, info, targets)
    args.copy_gbps = copy_bandwidth(torch)
    print(f"GPU: {info}; torch {torch.__version__}; triton {triton_version()}; kernels for {','.join(targets)}; "
          f"copy bandwidth {args.copy_gbps:.0f} GB/s", flush=True)  # fmt: skip
    for case in cases:
        bench_case(torch, targets, case, args, rec)
    columns = [("model", "case"), ("shape", "shape"), ("aotc ms", "aotc_ms"), ("eager ms", "eager_ms"),
               ("compile ms", "ref_ms")]  # fmt: skip
    columns += [("autotune ms", "max_autotune_ms")] if args.max_autotune else []
    columns += [("vs eager", "ratio_vs_eager"), ("vs compile", "ratio"), ("max |diff|", "max_abs_diff")]
    print(rec.table(columns))
    print("vs X: X ms / aotc ms (above 1: aotc is faster)")
    print(benchlib.TALLY.line())
    if benchlib.TALLY.compiled:
        print(f"WARNING: {benchlib.TALLY.compiled} kernel binaries were compiled on this machine: the kernel cache was "
              "not filled for these targets and this triton (--compile-only)", flush=True)  # fmt: skip
    return 1 if rec.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
