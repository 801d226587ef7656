"""Per-kernel GPU times of one call, for benchmarks: each launch of a program timed alone between two events
(medians over repeats), with the bytes its buffers hold and the FLOPs of its matmuls and attentions, so a reader
can put achieved bandwidth next to a copy's and matmul throughput next to torch.matmul's."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.ir.ops import Op
from aotc.ir.schedule import ArgKind
from aotc.ir.symbolic_values import evaluate
from aotc.runtime.backends.cuda.plan import nbytes_of
from aotc.runtime.backends.cuda.program import CudaProgram


@dataclass(frozen=True, slots=True)
class KernelTime:
    name: str
    kind: str
    ms: float  # median GPU time of one launch
    bytes: int  # the storage its buffer arguments span (reads + writes): a lower bound on its traffic
    flops: int  # 2*M*N*K summed over its matmuls, 4*b*h*Lq*Lk*d over its attentions (half causal); 0 for none
    mnk: tuple[int, int, int] | None  # its first matmul as one (M, K) x (K, N) product (batch folded into M)

    @property
    def gbps(self) -> float:
        return self.bytes / self.ms / 1e6 if self.ms > 0 else 0.0

    @property
    def tflops(self) -> float:
        return self.flops / self.ms / 1e9 if self.ms > 0 else 0.0


def profile(program: CudaProgram, feeds: Sequence[Any], env: Mapping[str, int], repeats: int = 10) -> list[KernelTime]:
    """Time every launch of one call of ``program`` (a warm-up call first, then each launch alone, in order, on one
    stream), on a preparation of its own that is freed afterwards."""
    dev, drv = program.device, program.device.drv
    dev.make_current()
    call = program.prepare(env)
    start, end = dev.get("cuEventCreate", drv.cuEventCreate(0)), dev.get("cuEventCreate", drv.cuEventCreate(0))
    try:
        call.run(list(feeds), "device", None, None, True)  # fills every intermediate, binds the inputs
        stream = call.last_stream
        times: list[list[float]] = [[] for _ in program.launches]
        for _ in range(repeats):
            for i, launch in enumerate(program.launches):
                times[i].append(timed(dev, stream, (start, end), launch.launch_args, dev, stream, call.launch_args[i]))
        dev.sync(stream)
    finally:
        dev.destroy_event(start)
        dev.destroy_event(end)
        program.forget(call)
        call.close()
    return [
        KernelTime(
            launch.kernel.name,
            launch.kernel.kind.value,
            statistics.median(t),
            _bytes(program, i, env),
            *_matmuls(program, i, env),
        )
        for i, (launch, t) in enumerate(zip(program.launches, times))
    ]


def timed(dev: Any, stream: Any, events: tuple[Any, Any], work: Any, *args: Any) -> float:
    """The GPU milliseconds of what ``work(*args)`` enqueues on ``stream``, between two events (the one timing
    primitive of ``profile``, ``--autotune`` and the GPU check's tune step)."""
    start, end = events
    dev.record(start, stream)
    work(*args)
    dev.record(end, stream)
    dev.check("cuEventSynchronize", dev.drv.cuEventSynchronize(end))
    return float(dev.get("cuEventElapsedTime", dev.drv.cuEventElapsedTime(start, end)))


def _bytes(program: CudaProgram, index: int, env: Mapping[str, int]) -> int:
    k = program.launches[index].kernel
    seen: set[int] = set()
    total = 0
    for a in k.args:
        if a.kind is ArgKind.BUFFER and a.value not in seen:
            seen.add(a.value)
            total += nbytes_of(program._values[a.value], env)
    return total


def _matmuls(program: CudaProgram, index: int, env: Mapping[str, int]) -> tuple[int, tuple[int, int, int] | None]:
    total, first = 0, None
    for n in program.launches[index].kernel.nodes:
        node = program.graph.nodes[n]
        if node.op is Op.MATMUL:
            out = [evaluate(d, env) for d in node.outputs[0].type.shape]
            k = evaluate(node.inputs[0].type.shape[-1], env)
            rows = int(np.prod(out[:-1], dtype=np.int64))
            total += 2 * rows * out[-1] * k
            first = first or (rows, out[-1], k)
        elif node.op is Op.SDPA:
            # q @ k^T and p @ v: 2 * Lq * Lk * d each per (batch, head); a causal mask halves the work done
            q = [evaluate(d, env) for d in node.inputs[0].type.shape]
            keys = evaluate(node.inputs[1].type.shape[-2], env)
            flops = 4 * int(np.prod(q, dtype=np.int64)) * keys
            total += flops // 2 if node.attrs.get("is_causal") else flops
    return total, first
