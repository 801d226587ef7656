"""The timed run of benchmarks/bench_kernels.py on one GPU: each case against its reference in the same run
(round-robin, each call synchronized, medians; see benchlib.py), a row per measurement."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import bench_cuda  # the sibling benchmark's GPU check and torch twin
import benchlib  # targets, compile, rows and timing
import numpy as np
from kernel_cases import (
    AIMS,
    ATTN_BATCH,
    ATTN_HEADS,
    CASES,
    DTYPE,
    ODD,
    OVERHEAD_FEATURES,
    Build,
    Project,
    builds,
    compile_build,
    kernel_names,
    kernels_of,
    padding_lines,
)
from kernel_profile import report_lines, summarize

import aotc
from aotc.ir.ops import Op
from aotc.ir.symbolic_values import evaluate

# -- on the GPU --------------------------------------------------------------------------------------------


class Bench:
    """What every GPU case shares: torch, the targets, the flags and the rows."""

    def __init__(self, torch: Any, targets: tuple[str, ...], args: argparse.Namespace, rec: Any) -> None:
        self.torch, self.targets, self.args, self.rec = torch, targets, args, rec

    def compile(self, build: Build, built: tuple | None = None) -> tuple[aotc.CompiledModel, tuple]:
        """The build's artifact (compiled for this GPU's targets: cache hits after --compile-only) and its
        model and input specs (``built``, else made here), whose weights the torch side reads."""
        built = built or build.make()
        compiled, new = compile_build(build, self.targets, self.args, built)
        jobs = benchlib.binary_jobs(compiled)
        print(f"{build.name}{build.label}: {kernel_names(compiled)}; kernel binaries: {new} compiled, "
              f"{max(jobs - new, 0)} from the cache", flush=True)  # fmt: skip
        if compiled.kernels.tuning is not None:
            print("\n".join(compiled.kernels.tuning.lines()), flush=True)
        return compiled, built

    def load(self, compiled: aotc.CompiledModel) -> Any:
        from aotc.artifact.reader import read_artifact
        from aotc.runtime import Executable
        from aotc.runtime.backends.cuda import CudaBackend

        artifact = read_artifact(compiled.artifact_bytes)
        if not artifact.kernels:
            raise RuntimeError(f"{compiled.graph.name}: the artifact has no kernels: {artifact.meta.get('kernels')}")
        return Executable(artifact, CudaBackend(graph_cache=self.args.graph_cache), outputs="device")

    def time(
        self,
        ours: Mapping[str, Callable[[], Any]],
        ref: Callable[[], Any],
        others: Mapping[str, Callable] | None = None,
    ) -> tuple[dict, dict]:
        """Median ms of each aotc call, of ``ref`` and of ``others``, all in one round-robin, and each aotc
        result's largest difference from the reference's relative to the reference's largest magnitude."""
        torch = self.torch
        with torch.inference_mode():
            want = ref().double()
            scale = max(float(want.abs().max()), 1e-30)
            errs = {k: float((torch.from_dlpack(f()[0]).double() - want).abs().max()) / scale for k, f in ours.items()}
            del want
            ms = benchlib.interleaved({**ours, **(others or {}), "ref": ref}, torch.cuda.synchronize, self.args.runs)
        return ms, errs


def replays(program: Any) -> Callable[[], float]:
    """Call before a timing; the returned function gives the share of aotc calls since then that replayed a
    CUDA graph (the rest ran eagerly)."""
    before = dict(program.stats)

    def share() -> float:
        replayed = program.stats["replay"] - before["replay"]
        return replayed / max(replayed + program.stats["eager"] - before["eager"], 1)

    return share


def bench_attention(b: Bench) -> None:
    torch = b.torch
    sdpa = torch.nn.functional.scaled_dot_product_attention
    aim, _, text = AIMS["attention"]
    for build in builds("attention", b.args):
        head_dim, causal = build.info["head_dim"], build.info["causal"]
        shapes = [{"batch": ATTN_BATCH, "heads": ATTN_HEADS, "seq": s, "head_dim": head_dim} for s in b.args.seqs]
        fields = {"dtype": DTYPE, "ref_name": "sdpa", "aim": aim, "aim_text": text, "causal": causal}
        try:
            compiled, _ = b.compile(build)
            exe = b.load(compiled)
        except Exception as e:
            for shape in shapes:
                b.rec.error(build.name, shape, e, **fields)
            continue
        with exe:
            for shape in shapes:
                with b.rec.attempt(build.name, shape, **fields):
                    dims = tuple(shape.values())
                    q, k, v = (torch.randn(dims, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                    feeds = {"q": on_gpu(q), "k": on_gpu(k), "v": on_gpu(v)}
                    ms, errs = b.time(
                        {"aotc": lambda exe=exe, feeds=feeds: exe.run(feeds)},
                        lambda q=q, k=k, v=v, causal=causal: sdpa(q, k, v, is_causal=causal),
                    )
                    seq = shape["seq"]
                    flops = 4 * ATTN_BATCH * ATTN_HEADS * seq * seq * head_dim // (2 if causal else 1)
                    kernels = kernel_times(build.name, exe, list(feeds.values()), {"seq": seq}, show=False)
                    b.rec.add(build.name, shape, aotc_ms=ms["aotc"], ref_ms=ms["ref"], tflops=flops / ms["aotc"] / 1e9,
                              ref_tflops=flops / ms["ref"] / 1e9, rel_err=errs["aotc"], **kernels,
                              **fields)  # fmt: skip
                    del q, k, v, feeds


def bench_matmul(b: Bench) -> None:
    torch = b.torch
    square, *odd = builds("matmul", b.args)
    aim, _, text = AIMS["matmul"]
    fields = {"dtype": DTYPE, "ref_name": "cublas", "aim": aim, "aim_text": text}
    m, k, n = square.info["mkn"]
    shape = {"M": m, "K": k, "N": n}
    with b.rec.attempt(square.name, shape, **fields):
        compiled, (model, _) = b.compile(square)
        with b.load(compiled) as exe:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = weight_on_gpu(torch, model)
            feeds = {"x": on_gpu(x)}
            ms, errs = b.time({"aotc": lambda: exe.run(feeds)}, lambda: torch.matmul(x, w.T))
            flops = 2 * m * n * k
            kernels = kernel_times(square.name, exe, [feeds["x"]])
            b.rec.add(square.name, shape, aotc_ms=ms["aotc"], ref_ms=ms["ref"], tflops=flops / ms["aotc"] / 1e9,
                      ref_tflops=flops / ms["ref"] / 1e9, rel_err=errs["aotc"], **kernels, **fields)  # fmt: skip
            del x, w

    # the odd shape: padded and unpadded compiled from one model and timed together, against cuBLAS
    aim, metric, text = AIMS["matmul_odd"]
    m, k, n = ODD
    shape = {"M": m, "K": k, "N": n}
    built = odd[0].make()
    exes: dict[str, tuple[Any, dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        for build in odd:
            padded = build.options["matmul_padding"]
            fields = {"dtype": DTYPE, "ref_name": "cublas", "matmul_padding": padded}
            if padded:
                fields.update(aim=aim, aim_metric=metric, aim_text=text)
            with b.rec.attempt(build.name, shape, **fields):
                compiled, _ = b.compile(build, built)
                print("".join(f"  {line}\n" for line in padding_lines(compiled)) or "  no padding lines\n", end="")
                exes[build.name] = (stack.enter_context(b.load(compiled)), fields)
        if not exes:
            return
        with b.rec.attempt("matmul_odd", shape, dtype=DTYPE, ref_name="cublas"):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = weight_on_gpu(torch, built[0])
            feeds = {"x": on_gpu(x)}
            ours = {name: lambda exe=exe: exe.run(feeds) for name, (exe, _) in exes.items()}
            ms, errs = b.time(ours, lambda: torch.matmul(x, w.T))
            both = "matmul_odd_padded" in ms and "matmul_odd_unpadded" in ms
            for name, (exe, fields) in exes.items():
                extra: dict[str, Any] = {}
                if name == "matmul_odd_padded":
                    extra["unpadded_ms"] = ms.get("matmul_odd_unpadded")
                    extra["meets"] = ms[name] < ms["matmul_odd_unpadded"] if both else None
                flops = 2 * m * n * k
                kernels = kernel_times(name, exe, [feeds["x"]])
                b.rec.add(name, shape, aotc_ms=ms[name], ref_ms=ms["ref"], tflops=flops / ms[name] / 1e9,
                          ref_tflops=flops / ms["ref"] / 1e9, rel_err=errs[name], **kernels, **extra,
                          **fields)  # fmt: skip


def weight_on_gpu(torch: Any, model: Project) -> Any:
    return torch.from_numpy(np.asarray(model.proj.weight.data, np.float32)).to("cuda", torch.bfloat16)


def kernel_times(
    name: str, exe: Any, feeds: Sequence[Any], env: Mapping[str, int] | None = None, show: bool = True
) -> dict[str, Any]:
    """The kernels one call launches, each timed alone with CUDA events (aotc's profile), as row fields: their
    summed ms, ``kernels_ms`` (a µs-scale kernel's time includes its host launch), and ``profile``, the slowest
    (kernel_profile.summarize), which the run prints for each aim it misses. A diagnostic: a failure only
    prints."""
    from aotc.runtime.backends.cuda.profile import profile

    try:
        program = exe._variants[0][1]  # the model's only variant: its CudaProgram
        rows = profile(program, feeds, env or {})
    except Exception as e:
        print(f"  {name}: per-kernel times failed: {type(e).__name__}: {e}", flush=True)
        return {}
    if show:
        print(f"  {name}: kernels that ran")
        for r in rows:
            print(f"    ran {r.name} ({r.kind}): {r.ms * 1e3:.1f} us, {r.tflops:.1f} TFLOP/s", flush=True)
    return {"kernels_ms": sum(r.ms for r in rows), "profile": summarize(rows)}


def bench_gpt2(b: Bench) -> None:
    torch = b.torch
    aim, _, text = AIMS["gpt2"]
    (build,) = builds("gpt2", b.args)
    shapes = [{"batch": batch, "seq": seq} for batch, seq in b.args.gpt2_shapes]
    fields = {"dtype": DTYPE, "ref_name": "torch.compile", "aim": aim, "aim_text": text}
    try:
        compiled, _ = b.compile(build)
        print("  torch side: the traced graph op for op, weights cast to bfloat16, under torch.autocast(bfloat16), "
              "one torch.compile for every shape", flush=True)  # fmt: skip
        twin = bench_cuda.TorchTwin(compiled.graph, torch, bench_cuda.DEVICE)
        twin.consts = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in twin.consts.items()}
        names, hosts, envs = bench_cuda.random_feeds(compiled.graph, shapes, twin)
    except Exception as e:
        for shape in shapes:
            b.rec.error(build.name, shape, e, **fields)
        return

    def twin_bf16(env: Mapping[str, int], *xs: Any) -> Any:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return twin(xs, env)[0]

    compiled_twin = torch.compile(twin_bf16, dynamic=False)  # one compiled module; dynamo recompiles per shape
    with b.load(compiled) as exe:
        program = exe._variants[0][1]
        for shape, host, env in zip(shapes, hosts, envs):
            with b.rec.attempt(build.name, shape, **fields):
                gpu = [torch.from_numpy(np.ascontiguousarray(host[n])).cuda() for n in names]
                feeds = {n: on_gpu(t) for n, t in zip(names, gpu)}
                share = replays(program)
                ms, errs = b.time(
                    {"aotc": lambda feeds=feeds: exe.run(feeds)},
                    lambda gpu=gpu, env=env: compiled_twin(env, *gpu),
                    {"eager": lambda gpu=gpu, env=env: twin_bf16(env, *gpu)},
                )
                flops = model_flops(compiled.graph, env)
                kernels = kernel_times(build.name, exe, list(feeds.values()), env, show=False)
                b.rec.add(build.name, shape, aotc_ms=ms["aotc"], ref_ms=ms["ref"], eager_ms=ms["eager"],
                          ratio_vs_eager=ms["eager"] / ms["aotc"], tflops=flops / ms["aotc"] / 1e9,
                          ref_tflops=flops / ms["ref"] / 1e9, rel_err=errs["aotc"], aotc_graph_replays=share(),
                          launches=len(kernels_of(compiled)), **kernels, **fields)  # fmt: skip
                del gpu, feeds


def bench_overhead(b: Bench) -> None:
    from aotc.runtime.backends.cuda.profile import profile

    torch = b.torch
    aim, metric, text = AIMS["overhead"]
    (build,) = builds("overhead", b.args)
    shape = {"batch": 1, "features": OVERHEAD_FEATURES}
    fields = {"dtype": "float32", "ref_name": "eager", "aim": aim, "aim_metric": metric, "aim_text": text}
    with b.rec.attempt(build.name, shape, **fields):
        compiled, (model, _) = b.compile(build)
        with b.load(compiled) as exe:
            x = torch.randn(1, OVERHEAD_FEATURES, device="cuda")
            w = torch.from_numpy(np.asarray(model.fc.weight.data)).cuda()
            bias = torch.from_numpy(np.asarray(model.fc.bias.data)).cuda()
            feeds = {"x": on_gpu(x)}
            program = exe._variants[0][1]
            with torch.inference_mode():
                want = torch.nn.functional.linear(x, w, bias)
                err = float((torch.from_dlpack(exe.run(feeds)[0]) - want).abs().max())
                share = replays(program)
                # a call with device outputs returns while its stream runs: each timed to completion
                wall = benchlib.per_call_ms(lambda: exe.run(feeds), torch.cuda.synchronize)
                replayed = share()
                ref = benchlib.per_call_ms(lambda: torch.nn.functional.linear(x, w, bias), torch.cuda.synchronize)
            gpu, source = replay_gpu_ms(torch, program), "graph replays queued back to back"
            if gpu is None:  # no graph to replay: the kernels one by one (host launch gaps included)
                gpu, source = sum(r.ms for r in profile(program, [x], {"batch": 1})), "kernels timed one by one"
            overhead_us = (wall - gpu) * 1e3
            b.rec.add(build.name, shape, aotc_ms=wall, ref_ms=ref, meets=overhead_us <= aim, wall_us=wall * 1e3,
                      gpu_us=gpu * 1e3, gpu_time=source, overhead_us=overhead_us, aotc_graph_replays=replayed,
                      max_abs_diff=err, **fields)  # fmt: skip


def on_gpu(tensor: Any) -> Any:
    """What an aotc call is fed: the torch CUDA tensor itself, read in place through DLPack."""
    return benchlib.DLPackOnly(tensor)


def replay_gpu_ms(torch: Any, program: Any, repeats: int = 200) -> float | None:
    """GPU ms of one replay of the CUDA graph ``program`` captured (it ran one shape): ``repeats`` replays
    queued behind a spin kernel on torch's stream, so they run back to back with no host gap, between two
    events. None when there is no single graph to replay (or the runtime's internals moved)."""
    try:
        (entry,) = program._graphed.values()  # the one shape's preparation holding a graph
        dev, drv = program.device, program.device.drv
    except (AttributeError, ValueError):
        return None
    if entry.exec is None or not entry.lock.acquire(blocking=False):
        return None
    dev.make_current()
    stream = entry.stream
    start, end = (dev.get("cuEventCreate", drv.cuEventCreate(0)) for _ in range(2))
    try:
        torch.cuda._sleep(50_000_000)  # tens of ms of spinning: time to queue every replay before any runs
        dev.wait_for(stream, torch.cuda.current_stream().cuda_stream)
        dev.record(start, stream)
        for _ in range(repeats):
            dev.check("cuGraphLaunch", drv.cuGraphLaunch(entry.exec, stream))
        dev.record(end, stream)
        dev.check("cuEventSynchronize", drv.cuEventSynchronize(end))
        return float(dev.get("cuEventElapsedTime", drv.cuEventElapsedTime(start, end))) / repeats
    finally:
        dev.sync(stream)
        torch.cuda.synchronize()
        for event in (start, end):
            dev.destroy_event(event)
        entry.lock.release()


def model_flops(graph: Any, env: Mapping[str, int]) -> int:
    """2*M*N*K per matmul and 4*b*h*Lq*Lk*d per attention (half when causal) of a high-level graph."""
    total = 0
    for node in graph.nodes:
        if node.op in (Op.MATMUL, Op.LINEAR):
            out = [evaluate(d, env) for d in node.outputs[0].type.shape]
            total += 2 * int(np.prod(out, dtype=np.int64)) * evaluate(node.inputs[0].type.shape[-1], env)
        elif node.op is Op.SDPA:
            q = [evaluate(d, env) for d in node.inputs[0].type.shape]
            keys = evaluate(node.inputs[1].type.shape[-2], env)
            flops = 4 * int(np.prod(q, dtype=np.int64)) * keys
            total += flops // 2 if node.attrs.get("is_causal") else flops
    return total


BENCHES: dict[str, Callable[[Bench], None]] = {"attention": bench_attention, "matmul": bench_matmul,
                                                "gpt2": bench_gpt2, "overhead": bench_overhead}  # fmt: skip


def run_cases(b: Bench, cases: Sequence[str]) -> None:
    """Each case in turn; one that fails outside its rows writes an error row and the next one runs."""
    for case in cases:
        try:
            BENCHES[case](b)
        except Exception as e:  # one case failing must not hide the others' numbers
            b.rec.error(case, "all", e)
            benchlib.release_gpu_memory()


def run_gpu(args: argparse.Namespace) -> int:
    torch, info = bench_cuda.require_gpu()
    targets = benchlib.gpu_targets(info.capability)
    rec = benchlib.Recorder("bench_kernels", args.jsonl)
    rec.context = bench_cuda.run_context(torch, info, targets)
    print(f"GPU: {info}; torch {torch.__version__}; triton {rec.context['triton']}; kernels for "
          f"{','.join(targets)}", flush=True)  # fmt: skip
    print("aims (issue 10): " + "; ".join(f"{case}: {text}" for case, (_, _, text) in AIMS.items()), flush=True)
    if args.autotune:
        print("--autotune: kernels are tuned and compiled on this GPU (no cache from --compile-only)", flush=True)
    run_cases(Bench(torch, targets, args, rec), args.cases or CASES)
    columns = [("case", "case"), ("shape", "shape"), ("aotc ms", "aotc_ms"), ("ref", "ref_name"),
               ("ref ms", "ref_ms"), ("ratio", "ratio"), ("aotc TFLOP/s", "tflops"), ("aim", "aim_text"),
               ("met", "meets"), ("rel err", "rel_err")]  # fmt: skip
    print(rec.table(columns))
    print("ratio: reference ms / aotc ms (above 1: aotc is faster)")
    print("profiles of the aims missed (slowest kernels, their share of the kernels' time, what they achieved):")
    print("\n".join(report_lines(rec.rows)), flush=True)
    print(benchlib.TALLY.line())
    if benchlib.TALLY.compiled and not args.autotune:
        print(f"WARNING: {benchlib.TALLY.compiled} kernel binaries were compiled on this machine: the kernel cache was "
              "not filled for these targets and this triton (--compile-only)", flush=True)  # fmt: skip
    return 1 if rec.errors else 0
