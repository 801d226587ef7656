"""``bench_host.py --gpu``: a call's host cost on a real GPU (the GPU check's ``host`` step), issue 26's aims.

Per case (the overhead case's Linear 256 at batch 1 in float32, one bf16 attention launch at batch 4 x 16 heads x
seq 1024 x d64, the bf16 8192^3 matmul), with torch CUDA tensors in and device outputs kept there, each over
--calls calls after a warm-up:

- aotc's whole call (``exe.run`` with the tensors, each call then ``torch.cuda.synchronize()``) and its host time
  (the calls queued back to back, then one synchronize: what the host spends per call while the GPU keeps up);
- the GPU time of one call (calls queued behind a spin kernel, between two CUDA events);
- the floors, with the same kernel and packed parameters: a bare ``cuLaunchKernel`` + ``cuStreamSynchronize``
  loop, and a bare ``cuGraphLaunch`` + ``cuStreamSynchronize`` loop of a graph holding that one launch;
- the reference's whole call (torch eager ``F.linear``, SDPA, ``torch.matmul``), synchronized;
- per driver call: how many aotc makes per call and the µs each takes (the bindings timed through a proxy).

Aims (issue 26): host overhead (whole call - GPU time) <= 20 µs; aotc's whole call within 2x of the bare-launch
floor; attention seq 1k whole call >= 1.0x SDPA's; matmul 8192^3 per call >= 0.93x cuBLAS's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import bench_cuda  # the GPU check and context fields
import benchlib  # targets, compile, rows
import numpy as np

AIMS = {
    "overhead_us": (20.0, "host overhead <= 20 us per call (wall - GPU time)"),
    "floor": (2.0, "whole call within 2x of the bare cuLaunchKernel + sync floor"),
    "attention": (1.0, "attention seq 1k whole call >= 1.0x SDPA's"),
    "matmul": (0.93, "matmul 8192^3 per call >= 0.93x cuBLAS's"),
}


class Timed:
    """A driver module whose ``cu*`` calls are timed (perf_counter around each): µs and counts by name."""

    def __init__(self, driver: Any) -> None:
        object.__setattr__(self, "_driver", driver)
        object.__setattr__(self, "us", defaultdict(float))
        object.__setattr__(self, "count", defaultdict(int))

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._driver, name)
        if not name.startswith("cu") or not callable(value):
            return value
        us, count, clock = self.us, self.count, time.perf_counter

        def timed(*args: Any) -> Any:
            start = clock()
            try:
                return value(*args)
            finally:
                us[name] += (clock() - start) * 1e6
                count[name] += 1

        return timed

    def reset(self) -> None:
        self.us.clear()
        self.count.clear()


def per_call_us(call: Callable[[], Any], sync: Callable[[], Any], calls: int, each: bool) -> float:
    """µs per call: median of 5 rounds of ``calls`` calls, synchronized after each (``each``) or once a round."""
    rounds = []
    for _ in range(5):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            call()
            if each:
                sync()
        if not each:
            sync()
        rounds.append((time.perf_counter() - start) * 1e6 / calls)
    return statistics.median(rounds)


def gpu_us(torch: Any, call: Callable[[], Any], calls: int) -> float:
    """GPU µs per call: ``calls`` calls queued behind a spin kernel on torch's stream, between two events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # tens of ms of spinning: every call is queued before any runs
    start.record()
    for _ in range(calls):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def floors(prepared: Any, calls: int) -> tuple[float | None, float | None]:
    """(bare launch + sync, bare graph launch + sync) µs for the preparation's one launch; None for a plan of more
    launches (no single kernel to launch bare)."""
    p = prepared
    program, dev = p.program, p.device
    if len(program.launches) != 1:
        return None, None
    drv, launch, args = dev.drv, program.launches[0], p.launch_args[0]
    stream = p.stream
    f, gx, gy, gz, block, address, _ = args

    def bare() -> None:
        drv.cuLaunchKernel(f, gx, gy, gz, block, 1, 1, launch.shared, stream, address, 0)
        drv.cuStreamSynchronize(stream)

    mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    dev.check("cuStreamBeginCapture", drv.cuStreamBeginCapture(p.stream_handle, mode))
    drv.cuLaunchKernel(f, gx, gy, gz, block, 1, 1, launch.shared, stream, address, 0)
    graph = dev.get("cuStreamEndCapture", drv.cuStreamEndCapture(p.stream_handle))
    exec_ = dev.get("cuGraphInstantiate", drv.cuGraphInstantiate(graph, 0))

    def replay() -> None:
        drv.cuGraphLaunch(exec_, stream)
        drv.cuStreamSynchronize(stream)

    try:
        return per_call_us(bare, lambda: None, calls, False), per_call_us(replay, lambda: None, calls, False)
    finally:
        dev.destroy_graph_exec(exec_)
        dev.destroy_graph(graph)


def run_gpu(args: argparse.Namespace) -> int:
    torch, info = bench_cuda.require_gpu()
    import bench_kernels
    from kernel_cases import ATTN_BATCH, ATTN_HEADS, builds

    targets = benchlib.gpu_targets(info.capability)
    kargs = bench_kernels.parse(["--head-dims", "64"])  # the same artifacts as bench_kernels (cache hits)
    rec = benchlib.Recorder("bench_host", args.jsonl)
    rec.context = bench_cuda.run_context(torch, info, targets)
    print(f"GPU: {info}; aims: " + "; ".join(text for _, text in AIMS.values()), flush=True)
    dims = (ATTN_BATCH, ATTN_HEADS, 1024, 64)
    bf16 = torch.bfloat16
    cases = [
        ("overhead_linear", builds("overhead", kargs)[0], {"x": ((1, 256), torch.float32)}, "float32"),
        ("attention_d64", builds("attention", kargs)[0], {n: (dims, bf16) for n in "qkv"}, "bfloat16"),
        ("matmul_square", builds("matmul", kargs)[0], {"x": ((8192, 8192), bf16)}, "bfloat16"),
    ]
    for name, build, shapes, dtype in cases:
        shape = {n: list(s) for n, (s, _) in shapes.items()}
        with rec.attempt(name, shape, dtype=dtype):
            measure_case(torch, rec, args, kargs, targets, name, build, shapes, dtype)
        benchlib.release_gpu_memory()
    return 1 if rec.errors else 0


def measure_case(torch: Any, rec: Any, args: argparse.Namespace, kargs: argparse.Namespace, targets: tuple[str, ...],
                 name: str, build: Any, shapes: dict[str, Any], dtype: str) -> None:  # fmt: skip
    from kernel_cases import compile_build

    from aotc.artifact.reader import read_artifact
    from aotc.runtime import Executable
    from aotc.runtime.backends.cuda import CudaBackend
    from aotc.runtime.backends.cuda.driver import import_driver

    shape = {n: list(s) for n, (s, _) in shapes.items()}
    built = build.make()
    compiled, _ = compile_build(build, targets, kargs, built)
    model = built[0]
    artifact = read_artifact(compiled.artifact_bytes)
    timed = Timed(import_driver())
    sync = torch.cuda.synchronize
    feeds = {n: torch.randn(s, device="cuda", dtype=t) for n, (s, t) in shapes.items()}
    with (
        Executable(artifact, CudaBackend(), outputs="device") as exe,
        Executable(artifact, CudaBackend(driver=timed), outputs="device") as probe,
        torch.inference_mode(),
    ):
        ref = reference(torch, name, model, feeds)
        err = float((torch.from_dlpack(exe.run(feeds)[0]).double() - ref().double()).abs().max())
        call = exe.prepare({n: s for n, (s, _) in shapes.items()}, outputs="device")

        def run() -> Any:  # the implicit path: what a server calls
            return exe.run(feeds)

        def prepared() -> Any:
            return call.run(feeds)

        for _ in range(20):
            run()
            prepared()
        wall = per_call_us(run, sync, args.calls, True)
        host = per_call_us(run, sync, args.calls, False)
        prepared_wall = per_call_us(prepared, sync, args.calls, True)
        gpu = gpu_us(torch, run, args.calls)
        ref_us = per_call_us(ref, sync, args.calls, True)
        bare, graph = floors(call._call, args.calls)
        for _ in range(20):
            probe.run(feeds)
        sync()
        timed.reset()
        for _ in range(args.calls):
            probe.run(feeds)
        sync()
        by_call = {k: round(timed.us[k] / args.calls, 2) for k in timed.us}
        count = {k: timed.count[k] / args.calls for k in timed.count}
        call.close()
        program = exe._variants[0][1]
        stats = dict(program.stats)
        launches = len(program.launches)
    overhead = wall - gpu
    fields: dict[str, Any] = {
        "wall_us": wall, "host_us": host, "prepared_wall_us": prepared_wall, "gpu_us": gpu,
        "overhead_us": overhead, "floor_launch_us": bare, "floor_graph_us": graph,
        "vs_floor": wall / bare if bare else None, "driver_us_per_call": by_call,
        "driver_calls_per_call": count, "max_abs_diff": err, "launches": launches, "stats": stats,
    }  # fmt: skip
    aim, text = AIMS["overhead_us"]
    note = f"floor {bare:.1f} us launch, {graph:.1f} us graph" if bare and graph else ""
    rec.add(name, shape, dtype=dtype, aotc_ms=wall / 1e3, ref_name=ref_name(name), ref_ms=ref_us / 1e3, aim=aim,
            aim_text=text, aim_metric="overhead_us", meets=overhead <= aim, note=note, **fields)  # fmt: skip
    if bare:
        aim, text = AIMS["floor"]
        rec.add(f"{name}_vs_floor", shape, dtype=dtype, aotc_ms=wall / 1e3, ref_name="bare launch + sync",
                ref_ms=bare / 1e3, aim=1 / aim, aim_text=text, meets=wall <= aim * bare)  # fmt: skip
    if name in ("attention_d64", "matmul_square"):
        aim, text = AIMS["attention" if name.startswith("attention") else "matmul"]
        rec.add(f"{name}_whole_call", shape, dtype=dtype, aotc_ms=wall / 1e3, ref_name=ref_name(name),
                ref_ms=ref_us / 1e3, aim=aim, aim_text=text)  # fmt: skip
    print(f"  {name}: driver calls per call {count}; µs each {by_call}", flush=True)


def ref_name(case: str) -> str:
    return {"overhead_linear": "eager F.linear", "attention_d64": "sdpa", "matmul_square": "cublas"}[case]


def reference(torch: Any, case: str, model: Any, feeds: dict[str, Any]) -> Callable[[], Any]:
    """The same computation in torch, the whole call (its result, for the difference check)."""
    if case == "attention_d64":
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return lambda: sdpa(feeds["q"], feeds["k"], feeds["v"])
    if case == "matmul_square":
        w = torch.from_numpy(np.asarray(model.proj.weight.data, np.float32)).to("cuda", torch.bfloat16)
        return lambda: torch.matmul(feeds["x"], w.T)
    w = torch.from_numpy(np.asarray(model.fc.weight.data)).cuda()
    b = torch.from_numpy(np.asarray(model.fc.bias.data)).cuda()
    return lambda: torch.nn.functional.linear(feeds["x"], w, b)
