"""Issue 10's kernel benchmark: flash attention, bf16 matmuls, GPT-2-small in bf16 and per-call host overhead,
against PyTorch on one GPU. Not a test: it prints rows, each as soon as it is measured.

    python benchmarks/bench_kernels.py --jsonl out/bench_kernels.jsonl   # every case at its default shapes
    python benchmarks/bench_kernels.py attention --seqs 1024 --head-dims 64 --runs 10   # a short run
    python benchmarks/bench_kernels.py --compile-only --targets sm_80,sm_90   # no GPU: fill the kernel cache
    python benchmarks/bench_kernels.py --check          # no GPU, no torch: compile every case, check schedules

Cases, each timed against its reference in the same run (round-robin, each call synchronized, medians; see
benchlib.py) and each with its aim:

- attention: ``F.scaled_dot_product_attention`` on bf16 (batch 4, 16 heads, head dim 64 and 128, seq 1024 and
  4096, causal and not; ``--head-dims``, ``--seqs``), one artifact per (head dim, causal) with a dynamic seq
  in [1, --max-seq], against torch's SDPA. Aim: ratio >= 0.90.
- matmul: bf16 ``x @ W^T`` with W a constant (an ``nn.Linear`` without bias) against torch.matmul (cuBLAS):
  8192^3 (aim: ratio >= 0.85), and the odd 4095x4097x1000 (M x K x N) compiled with matmul padding on and
  off (aim: padded faster than unpadded).
- gpt2: GPT-2-small (models/gpt2.py: 12 layers, 768 wide) compiled with precision="bf16", at batch 1 x seq 128
  and batch 8 x seq 1024 (``--gpt2-shapes``; one artifact with dynamic batch and seq), against one
  ``torch.compile`` of the traced graph run op for op with its weights cast to bfloat16 under
  torch.autocast(bfloat16). aotc is timed with CUDA graph replay (the cuda backend captures a graph on a
  shape's second call). Aim: aotc latency <= 1.0x torch.compile's (ratio >= 1.0).
- overhead: a small Linear (256 -> 256, float32) at batch 1, its input already on the GPU (a torch tensor
  read through DLPack), its output kept there: aotc's wall time per call (graph replay) against the GPU time
  of the same call's CUDA graph (replays queued back to back between CUDA events). Aim: wall - GPU time <=
  20 us per call. Reference: torch eager ``F.linear`` per call (synchronized).

``ratio`` is reference ms / aotc ms: above 1 aotc is faster. Rows also carry ``kernels_ms``: the aotc
kernels of one call each timed alone with CUDA events, so a gap between it and ``aotc_ms`` is the call's own
cost (input and output copies, allocation, host work) rather than the kernels'. ``--jsonl PATH`` appends one JSON object per row
(flushed as it is measured); a case or shape that fails writes a row with "error" and the run goes on.

The timed run compiles for ``benchlib.gpu_targets`` of its GPU (an H100: sm_80 and sm_90). It must not
compile kernels on the GPU machine: run ``--compile-only --targets`` with the same case flags (--small,
--head-dims, --max-seq; the seqs and GPT-2 shapes measured do not change any artifact) on a machine without a
GPU, with the same triton version (the cache key holds it) and AOTC_CACHE_DIR, and carry that cache along; the
timed run says how many kernel binaries it compiled and found. ``--autotune`` tunes on the GPU, so it compiles
there.

``--check`` needs neither a GPU nor torch: it compiles every case at small sizes without cubins (targets none)
and checks that each attention schedule has exactly one attention kernel, that the padded odd matmul is padded
and the unpadded one is not, that the bf16 GPT-2 gets one attention kernel per layer, and that the overhead
Linear is one launch; it exits 1 otherwise. ``--small`` runs the same small sizes in the other modes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cuda  # the sibling benchmark's GPU check and torch twin
import benchlib  # targets, compile, rows and timing

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.ir.ops import Op
from aotc.ir.schedule import KernelKind
from aotc.ir.symbolic_values import evaluate
from aotc.lowering.pipeline import explain_lowering

DTYPE = "bfloat16"
ATTN_BATCH, ATTN_HEADS = 4, 16
HEAD_DIMS = (64, 128)
SEQS = (1024, 4096)
# The attention artifacts' seq range. Fixed, not the largest seq measured, so that a run over fewer seqs uses
# the same artifacts (and kernel cache entries) as the full one.
MAX_SEQ = 16384
SQUARE = (8192, 8192, 8192)  # M, K, N
# M x K x N. K is the odd dim the padding pass pads (in the weight, once, at compile time): an odd N alone is
# never padded here, because the result is the model's output and is stored unpadded anyway.
ODD = (4095, 4097, 1000)
GPT2_SHAPES = ((1, 128), (8, 1024))  # (batch, seq)
OVERHEAD_FEATURES = 256
# --small (and --check): the same models at sizes that compile in seconds. The odd matmul keeps its shape,
# since whether padding pays depends on it (lowering/padding.py's cost rule).
SMALL_SQUARE = (1024, 1024, 1024)
SMALL_GPT2 = {"vocab_size": 512, "n_positions": 128, "d_model": 64, "n_layer": 2, "n_head": 4}
SMALL_GPT2_SHAPES = ((1, 16), (4, 128))
# case -> (aim, the metric it bounds, text)
AIMS: dict[str, tuple[float | None, str, str]] = {
    "attention": (0.90, "ratio", "aotc >= 0.90x SDPA's speed"),
    "matmul": (0.85, "ratio", "aotc >= 0.85x cuBLAS's speed"),
    "matmul_odd": (None, "padded_ms < unpadded_ms", "padded faster than unpadded"),
    "gpt2": (1.00, "ratio", "aotc latency <= 1.0x torch.compile's"),
    "overhead": (20.0, "overhead_us", "host overhead <= 20 us per call (wall - GPU time)"),
}
CASES = ("attention", "matmul", "gpt2", "overhead")


def fail(message: str, code: int = 1) -> None:
    print(f"bench_kernels: {message}", file=sys.stderr)
    raise SystemExit(code)


# -- the aotc models ----------------------------------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class Project(nn.Module):
    """``x @ W^T`` with W (N, K) a constant, so the padding pass may pad it at compile time."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.proj = nn.Linear(k, n, bias=False, dtype=DTYPE)

    def forward(self, x):
        return self.proj(x)


class Tiny(nn.Module):
    """The overhead case's model: one small Linear, so a call is almost all host work."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x):
        return self.fc(x)


def attention_model(head_dim: int, causal: bool, max_seq: int) -> tuple[nn.Module, dict[str, TensorSpec]]:
    seq = Dim("seq", min=1, max=max_seq)
    spec = TensorSpec((ATTN_BATCH, ATTN_HEADS, seq, head_dim), DTYPE)
    return Attention(causal), {"q": spec, "k": spec, "v": spec}


def matmul_model(m: int, k: int, n: int) -> tuple[nn.Module, dict[str, TensorSpec]]:
    return Project(k, n), {"x": TensorSpec((m, k), DTYPE)}


def overhead_model(features: int) -> tuple[nn.Module, dict[str, TensorSpec]]:
    batch = Dim("batch", min=1, max=64)
    return Tiny(features), {"x": TensorSpec((batch, features), "float32")}


def gpt2_small_config() -> dict[str, int]:
    return next(dict(c[2]) for c in bench_cuda.CASES if c[0] == "gpt2-small")


def attention_name(head_dim: int, causal: bool) -> str:
    return f"attention_d{head_dim}" + ("_causal" if causal else "")


# -- what each case compiles: one list for --check, --compile-only and the timed run --------------------------


@dataclass(frozen=True)
class Build:
    """One artifact a case compiles: its name, how to build the model, its compile options beyond targets."""

    name: str
    make: Callable[[], tuple[nn.Module, dict[str, TensorSpec]]]
    options: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""  # printed after the name
    info: Mapping[str, Any] = field(default_factory=dict)  # what the case needs to know (head dim, ...)


def builds(case: str, args: argparse.Namespace) -> list[Build]:
    """The artifacts ``case`` compiles under these flags; the measured seqs and GPT-2 shapes change none."""
    if case == "attention":
        attention = [
            Build(attention_name(d, causal), functools.partial(attention_model, d, causal, args.max_seq),
                  info={"head_dim": d, "causal": causal})
            for d in args.head_dims for causal in (False, True)
        ]  # fmt: skip
        return attention
    if case == "matmul":
        square = SMALL_SQUARE if args.small else SQUARE
        text = "x".join(map(str, ODD))
        return [
            Build("matmul_square", functools.partial(matmul_model, *square),
                  label=f" {'x'.join(map(str, square))} (M x K x N)", info={"mkn": square}),
            Build("matmul_odd_padded", functools.partial(matmul_model, *ODD), {"matmul_padding": True},
                  f" {text} (M x K x N)", {"mkn": ODD}),
            Build("matmul_odd_unpadded", functools.partial(matmul_model, *ODD), {"matmul_padding": False},
                  f" {text} (M x K x N)", {"mkn": ODD}),
        ]  # fmt: skip
    if case == "gpt2":
        config = SMALL_GPT2 if args.small else gpt2_small_config()
        name = "gpt2_bf16" if args.small else "gpt2_small_bf16"
        return [Build(name, functools.partial(benchlib.gpt2_model, config), {"precision": "bf16"},
                      f" ({config['n_layer']} layers)", {"config": config})]  # fmt: skip
    if case == "overhead":
        return [Build("overhead_linear", functools.partial(overhead_model, OVERHEAD_FEATURES),
                      label=f" (Linear {OVERHEAD_FEATURES} -> {OVERHEAD_FEATURES})")]  # fmt: skip
    raise ValueError(f"unknown case {case!r}")


def compile_build(
    build: Build, targets: tuple[str, ...], args: argparse.Namespace, built: tuple | None = None
) -> tuple[aotc.CompiledModel, int]:
    """The one compile of a build: --check (no targets), --compile-only and the timed run all come here."""
    options = dict(build.options)
    if args.autotune:
        options = {"autotune": True, **options}
    return benchlib.compile_model(built or build.make(), build.name, targets, **options)


def kernels_of(compiled: aotc.CompiledModel) -> list[Any]:
    if compiled.schedule is None:
        raise RuntimeError(f"{compiled.graph.name}: no kernels: {compiled.kernels.note}")
    return list(compiled.schedule.kernels)


def count(compiled: aotc.CompiledModel, kind: KernelKind) -> int:
    return sum(k.kind is kind for k in kernels_of(compiled))


def kernel_names(compiled: aotc.CompiledModel) -> str:
    """The kernels one call launches, by name; for a long schedule, how many of each kind."""
    kernels = kernels_of(compiled)
    if len(kernels) <= 8:
        return ", ".join(f"{k.name} ({k.kind.value})" for k in kernels)
    kinds = Counter(k.kind.value for k in kernels)
    return f"{len(kernels)} launches: " + ", ".join(f"{n} {kind}" for kind, n in kinds.items())


def padding_lines(compiled: aotc.CompiledModel) -> list[str]:
    return [line for line in explain_lowering(compiled.graph, compiled.options) if "padded:" in line]


# -- --check: every case compiled without cubins ---------------------------------------------------------


def check_attention(compiled: Mapping[str, aotc.CompiledModel], args: argparse.Namespace) -> list[str]:
    return [
        f"{name}: expected exactly one attention kernel, got {kernel_names(c)}"
        for name, c in compiled.items()
        if count(c, KernelKind.ATTENTION) != 1
    ]


def check_matmul(compiled: Mapping[str, aotc.CompiledModel], args: argparse.Namespace) -> list[str]:
    problems = []
    if "matmul_square" in compiled and count(compiled["matmul_square"], KernelKind.MATMUL) < 1:
        problems.append(f"matmul_square: no matmul kernel in {kernel_names(compiled['matmul_square'])}")
    if "matmul_odd_padded" in compiled:
        lines = padding_lines(compiled["matmul_odd_padded"])
        if not [line for line in lines if line.startswith("padded:")]:
            problems.append(f"matmul_odd_padded: the padding pass padded nothing: {lines or 'no padding lines'}")
    if "matmul_odd_unpadded" in compiled:
        lines = padding_lines(compiled["matmul_odd_unpadded"])
        if lines:
            problems.append(f"matmul_odd_unpadded: matmul_padding=False still reports padding: {lines}")
    return problems


def check_gpt2(compiled: Mapping[str, aotc.CompiledModel], args: argparse.Namespace) -> list[str]:
    problems = []
    for name, c in compiled.items():
        layers = SMALL_GPT2["n_layer"] if args.small else gpt2_small_config()["n_layer"]
        attention = count(c, KernelKind.ATTENTION)
        if attention != layers:
            problems.append(f"{name}: expected {layers} attention kernels (one per layer), got {attention}")
    return problems


def check_overhead(compiled: Mapping[str, aotc.CompiledModel], args: argparse.Namespace) -> list[str]:
    return [
        f"{name}: expected one launch (the matmul with its bias), got {kernel_names(c)}"
        for name, c in compiled.items()
        if len(kernels_of(c)) != 1 or count(c, KernelKind.MATMUL) != 1
    ]


CHECKS: dict[str, Callable[[Mapping[str, aotc.CompiledModel], argparse.Namespace], list[str]]] = {
    "attention": check_attention, "matmul": check_matmul, "gpt2": check_gpt2, "overhead": check_overhead,
}  # fmt: skip


def check(args: argparse.Namespace) -> int:
    """Compile every case for no GPU target and check its schedule; 0 when all hold, else 1."""
    problems: list[str] = []
    for case in args.cases or CASES:
        compiled: dict[str, aotc.CompiledModel] = {}
        for build in builds(case, args):
            try:
                compiled[build.name], _ = compile_build(build, (), args)
                print(f"{build.name}{build.label}: {kernel_names(compiled[build.name])}", flush=True)
            except Exception as e:
                problems.append(f"{build.name}: {type(e).__name__}: {e}")
                compiled.pop(build.name, None)
                continue
            if case == "matmul" and build.name != "matmul_square":
                print("".join(f"  {line}\n" for line in padding_lines(compiled[build.name])), end="")
        problems += CHECKS[case](compiled, args)
    for p in problems:
        print(f"FAILED: {p}", file=sys.stderr)
    print("check: ok" if not problems else f"check: {len(problems)} problem(s)")
    return 1 if problems else 0


# -- --compile-only: every artifact the timed run compiles, for the given targets ------------------------------


def compile_only(args: argparse.Namespace, targets: tuple[str, ...]) -> int:
    """Compile what the timed run would on a GPU whose ``gpu_targets`` are ``targets``; 0 when all compiled."""
    start = time.perf_counter()
    print(f"compile only, for {','.join(targets)} (triton {bench_cuda.triton_version()}): a timed run with the "
          "same case flags on a GPU with these targets and this triton finds every kernel in the cache",
          flush=True)  # fmt: skip
    done = failed = 0
    for case in args.cases or CASES:
        for build in builds(case, args):
            t0 = time.perf_counter()
            try:
                compiled, new = compile_build(build, targets, args)
            except Exception as e:
                failed += 1
                print(f"{build.name}: FAILED: {type(e).__name__}: {e}", flush=True)
                continue
            done += 1
            jobs = benchlib.binary_jobs(compiled)
            print(f"{build.name}{build.label}: {kernel_names(compiled)}; kernel binaries: {new} compiled, "
                  f"{max(jobs - new, 0)} from the cache ({time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
    print(benchlib.TALLY.line())
    print(f"compile only: {done} of {done + failed} artifacts in {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


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
    """The kernels one call launches, each timed alone with CUDA events (aotc's profile): their summed ms as
    row fields, ``kernels_ms`` (a µs-scale kernel's time includes its host launch). A diagnostic: a failure
    only prints."""
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
    return {"kernels_ms": sum(r.ms for r in rows)}


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
                # an aotc call returns once its stream is done: nothing more to wait for
                wall = benchlib.per_call_ms(lambda: exe.run(feeds), lambda: None)
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
        (entry,) = program._graphs.values()
        dev, drv = program.device, program.device.drv
    except (AttributeError, ValueError):
        return None
    if not entry.lock.acquire(blocking=False):
        return None
    dev.make_current()
    stream = entry.slot.stream
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
    print(benchlib.TALLY.line())
    if benchlib.TALLY.compiled and not args.autotune:
        print(f"WARNING: {benchlib.TALLY.compiled} kernel binaries were compiled on this machine: the kernel cache was "
              "not filled for these targets and this triton (--compile-only)", flush=True)  # fmt: skip
    return 1 if rec.errors else 0


# -- flags ---------------------------------------------------------------------------------------------------


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def shape_list(text: str) -> tuple[tuple[int, int], ...]:
    """``1x128,8x1024`` -> ((1, 128), (8, 1024))."""
    try:
        pairs = tuple(tuple(int(v) for v in t.lower().split("x")) for t in text.split(",") if t.strip())
    except ValueError:
        pairs = ()
    if not pairs or any(len(p) != 2 or min(p) < 1 for p in pairs):
        raise argparse.ArgumentTypeError(f"expected BATCHxSEQ pairs such as 1x128,8x1024, got {text!r}")
    return pairs  # type: ignore[return-value]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help=f"any of {', '.join(CASES)} (default: all)")
    parser.add_argument("--check", action="store_true", help="no GPU: compile every case small, check the schedules")
    parser.add_argument("--compile-only", action="store_true",
                        help="no GPU, no torch: compile what the timed run would for --targets, then stop")  # fmt: skip
    parser.add_argument("--targets", help="with --compile-only: GPU targets (default sm_80,sm_90: an H100's)")
    parser.add_argument("--small", action="store_true", help="the --check sizes (fast to compile and run)")
    parser.add_argument("--jsonl", metavar="PATH", help="append one JSON object per measured row (flushed)")
    parser.add_argument("--seqs", type=int_list, default=SEQS, help="attention seqs (default 1024,4096)")
    parser.add_argument("--head-dims", type=int_list, default=HEAD_DIMS, help="attention head dims (default 64,128)")
    parser.add_argument("--max-seq", type=int, default=MAX_SEQ, help=f"the attention artifacts' seq range (default "
                        f"{MAX_SEQ}; changing it changes the artifacts, so --compile-only needs the same)")  # fmt: skip
    parser.add_argument("--gpt2-shapes", type=shape_list, default=None,
                        help="GPT-2 BATCHxSEQ shapes (default 1x128,8x1024; --small: 1x16,4x128)")  # fmt: skip
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--graph-cache", type=int, default=16, help="CUDA graphs kept per variant (0: none)")
    parser.add_argument(
        "--autotune", action="store_true", help="compile with autotuning on this GPU (each dim timed at its maximum)"
    )
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        fail(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}", 2)
    if args.max_seq < 1:
        fail(f"--max-seq must be at least 1, got {args.max_seq}", 2)
    if args.check:
        args.small = True
    args.seqs = tuple(s for s in args.seqs if s <= args.max_seq) or fail(
        f"every --seqs value is above --max-seq {args.max_seq}", 2
    )
    if args.gpt2_shapes is None:
        args.gpt2_shapes = SMALL_GPT2_SHAPES if args.small else GPT2_SHAPES
    positions = (SMALL_GPT2 if args.small else gpt2_small_config())["n_positions"]
    too_big = [f"{b}x{s}" for b, s in args.gpt2_shapes if b > 64 or s > positions]
    if too_big:
        fail(f"--gpt2-shapes {', '.join(too_big)} outside batch <= 64, seq <= {positions}", 2)
    if args.targets is not None and not args.compile_only:
        fail("--targets goes with --compile-only: a timed run compiles for its GPU (benchlib.gpu_targets)", 2)
    if args.compile_only and (args.check or args.autotune):
        fail("--compile-only goes with neither --check nor --autotune (autotuning needs the GPU)", 2)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.check:
        return check(args)
    if args.compile_only:
        try:
            targets = benchlib.targets_from_flag(args.targets or "sm_80,sm_90")
        except Exception as e:
            fail(str(e), 2)
        return compile_only(args, targets)
    return run_gpu(args)


if __name__ == "__main__":
    raise SystemExit(main())
