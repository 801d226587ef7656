"""Issue 10's kernel benchmark: flash attention, bf16 matmuls and GPT-2-small in bf16 against PyTorch, on one GPU.
Not a test: it prints a table.

    python benchmarks/bench_kernels.py                        # attention, matmul and gpt2
    python benchmarks/bench_kernels.py attention --max-seq 4096 --runs 20
    python benchmarks/bench_kernels.py --check                # no GPU: compile every case, check the schedules

Cases, each timed against its reference in the same run (round-robin, synchronized, medians: see
bench_cuda.py, whose GPU check, torch twin and timing this reuses):

- attention: ``F.scaled_dot_product_attention`` on bf16 (batch 4, 16 heads, head dim 64 and 128, seq 1024 to
  16384, causal and not), one artifact per (head dim, causal) with a dynamic seq, against torch's SDPA.
- matmul: bf16 ``x @ W^T`` with W a constant (an ``nn.Linear`` without bias), against torch.matmul (cuBLAS):
  8192^3, and an odd shape compiled with matmul padding on and off.
- gpt2: GPT-2-small (models/gpt2.py) compiled with precision="bf16" at 8x1024, against torch.compile of the
  traced graph run op for op with its weights cast to bfloat16 under torch.autocast(bfloat16).

The speed column is reference ms / aotc ms (aotc TFLOP/s over the reference's): above 1 aotc is faster.
``--check`` needs neither a GPU nor torch: it compiles every case without cubins (targets none) and checks
that each attention schedule has exactly one attention kernel, that the padded odd matmul is padded and the
unpadded one is not, and that the bf16 GPT-2 gets one attention kernel per layer; it exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cuda  # the sibling benchmark's GPU check, torch twin and timing

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.ir.ops import Op
from aotc.ir.schedule import KernelKind
from aotc.ir.symbolic import evaluate
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import explain_lowering

DTYPE = "bfloat16"
ATTN_BATCH, ATTN_HEADS, HEAD_DIMS = 4, 16, (64, 128)
SEQS = (1024, 2048, 4096, 8192, 16384)
SQUARE = (8192, 8192, 8192)  # M, K, N
# M x K x N. K is the odd dim the padding pass pads (in the weight, once, at compile time): an odd N alone is
# never padded here, because the result is the model's output and is stored unpadded anyway.
ODD = (4095, 4097, 1000)
GPT2_SHAPE = {"batch": 8, "seq": 1024}
# --check: the same models at sizes that compile in seconds. The odd matmul keeps its shape, since whether
# padding pays depends on it (lowering/padding.py's cost rule).
CHECK_SQUARE = (1024, 1024, 1024)
CHECK_GPT2 = {"vocab_size": 512, "n_positions": 128, "d_model": 64, "n_layer": 2, "n_head": 4}
AIMS = {
    "attention": (0.90, "aotc >= 0.90x SDPA's speed"),
    "matmul": (0.85, "aotc >= 0.85x cuBLAS's speed at 8192^3"),
    "gpt2": (1.00, "aotc latency <= 1.0x torch.compile's"),
}
CASES = ("attention", "matmul", "gpt2")


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


def attention_model(head_dim: int, causal: bool, max_seq: int) -> tuple[nn.Module, dict[str, TensorSpec]]:
    seq = Dim("seq", min=1, max=max_seq)
    spec = TensorSpec((ATTN_BATCH, ATTN_HEADS, seq, head_dim), DTYPE)
    return Attention(causal), {"q": spec, "k": spec, "v": spec}


def matmul_model(m: int, k: int, n: int) -> tuple[nn.Module, dict[str, TensorSpec]]:
    return Project(k, n), {"x": TensorSpec((m, k), DTYPE)}


def gpt2_model(config: Mapping[str, int]) -> tuple[nn.Module, dict[str, TensorSpec]]:
    from aotc_cli.loader import import_file

    return import_file(bench_cuda.MODELS / "gpt2.py").build(**config)


def gpt2_small_config() -> dict[str, int]:
    return next(dict(c[2]) for c in bench_cuda.CASES if c[0] == "gpt2-small")


def compile_case(
    built: tuple[nn.Module, dict[str, TensorSpec]], name: str, targets: tuple[str, ...], **options: Any
) -> aotc.CompiledModel:
    model, inputs = built
    # from the environment, so the AOTC_NO_* switches that bisect a miscompile reach the benchmark too
    opts = dataclasses.replace(CompileOptions.from_env(), targets=targets, **options)
    return aotc.compile(model, inputs, name=name, options=opts)


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


def attention_name(head_dim: int, causal: bool) -> str:
    return f"attention_d{head_dim}" + ("_causal" if causal else "")


# -- --check: every case compiled without cubins ---------------------------------------------------------


def check(args: argparse.Namespace) -> int:
    """Compile every case for no GPU target and check its schedule; 0 when all hold, else 1."""
    problems: list[str] = []
    none: tuple[str, ...] = ()
    for head_dim in HEAD_DIMS:
        for causal in (False, True):
            name = attention_name(head_dim, causal)
            compiled = compile_case(attention_model(head_dim, causal, args.max_seq), name, none)
            print(f"{name}: {kernel_names(compiled)}")
            if count(compiled, KernelKind.ATTENTION) != 1:
                problems.append(f"{name}: expected exactly one attention kernel, got {kernel_names(compiled)}")

    square = compile_case(matmul_model(*CHECK_SQUARE), "matmul_square", none)
    print(f"matmul {'x'.join(map(str, CHECK_SQUARE))} (M x K x N): {kernel_names(square)}")
    if count(square, KernelKind.MATMUL) < 1:
        problems.append(f"matmul_square: no matmul kernel in {kernel_names(square)}")
    for padding in (True, False):
        name = f"matmul_odd_{'padded' if padding else 'unpadded'}"
        compiled = compile_case(matmul_model(*ODD), name, none, matmul_padding=padding)
        lines = padding_lines(compiled)
        print(f"{name} {'x'.join(map(str, ODD))} (M x K x N): {kernel_names(compiled)}")
        print("".join(f"  {line}\n" for line in lines), end="")
        padded = [line for line in lines if line.startswith("padded:")]
        if padding and not padded:
            problems.append(f"{name}: the padding pass padded nothing: {lines or 'no padding lines'}")
        if not padding and lines:
            problems.append(f"{name}: matmul_padding=False still reports padding: {lines}")

    compiled = compile_case(gpt2_model(CHECK_GPT2), "gpt2_bf16", none, precision="bf16")
    layers = CHECK_GPT2["n_layer"]
    attention = count(compiled, KernelKind.ATTENTION)
    print(f"gpt2 bf16 ({layers} layers): {kernel_names(compiled)}")
    if attention != layers:
        problems.append(f"gpt2_bf16: expected {layers} attention kernels (one per layer), got {attention}")

    for p in problems:
        print(f"FAILED: {p}", file=sys.stderr)
    print("check: ok" if not problems else f"check: {len(problems)} problem(s)")
    return 1 if problems else 0


# -- on the GPU --------------------------------------------------------------------------------------------


class Bench:
    """What every GPU case shares: torch, the target arch, the options and the rows of the table."""

    def __init__(self, torch: Any, arch: str, args: argparse.Namespace) -> None:
        self.torch, self.arch, self.args = torch, arch, args
        self.rows: list[list[str]] = []

    def load(self, compiled: aotc.CompiledModel) -> Any:
        from aotc.artifact.reader import read_artifact
        from aotc.runtime import Executable
        from aotc.runtime.backends.cuda import CudaBackend

        artifact = read_artifact(compiled.artifact_bytes)
        if not artifact.kernels:
            raise RuntimeError(f"{compiled.graph.name}: the artifact has no kernels: {artifact.meta.get('kernels')}")
        return Executable(artifact, CudaBackend(graph_cache=self.args.graph_cache), outputs="device")

    def compile(self, built: tuple[nn.Module, dict[str, TensorSpec]], name: str, **options: Any) -> Any:
        if self.args.autotune:
            options = {"autotune": True, **options}
        compiled = compile_case(built, name, (self.arch,), **options)
        print(f"{name}: {kernel_names(compiled)}", flush=True)
        if compiled.kernels.tuning is not None:
            print("\n".join(compiled.kernels.tuning.lines()), flush=True)
        return compiled

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
            ms = bench_cuda.interleaved({**ours, **(others or {}), "ref": ref}, torch.cuda.synchronize, self.args.runs)
        return ms, errs

    def row(self, case: str, shape: str, ours: float, ref: float, flops: int, aim: str, met: bool, err: float) -> None:
        self.rows.append(
            [case, shape, f"{ours:.3f}", f"{ref:.3f}", f"{ref / ours:.2f}x", f"{flops / ours / 1e9:.1f}",
             f"{flops / ref / 1e9:.1f}", aim, "yes" if met else "NO", f"{err:.1e}"]
        )  # fmt: skip


def bench_attention(b: Bench) -> None:
    torch = b.torch
    sdpa = torch.nn.functional.scaled_dot_product_attention
    seqs = [s for s in SEQS if s <= b.args.max_seq]
    floor, _ = AIMS["attention"]
    for head_dim in HEAD_DIMS:
        for causal in (False, True):
            name = attention_name(head_dim, causal)
            compiled = b.compile(attention_model(head_dim, causal, b.args.max_seq), name)
            with b.load(compiled) as exe:
                for seq in seqs:
                    shape = (ATTN_BATCH, ATTN_HEADS, seq, head_dim)
                    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                    feeds = {"q": q, "k": k, "v": v}
                    ms, errs = b.time(
                        {"aotc": lambda feeds=feeds: exe.run(feeds)},
                        lambda q=q, k=k, v=v, causal=causal: sdpa(q, k, v, is_causal=causal),
                    )
                    flops = 4 * ATTN_BATCH * ATTN_HEADS * seq * seq * head_dim // (2 if causal else 1)
                    speed = ms["ref"] / ms["aotc"]
                    b.row(name, "x".join(map(str, shape)), ms["aotc"], ms["ref"], flops, f">= {floor:.2f}x",
                          speed >= floor, errs["aotc"])  # fmt: skip
                    del q, k, v, feeds


def bench_matmul(b: Bench) -> None:
    torch = b.torch
    floor, _ = AIMS["matmul"]
    square = matmul_model(*SQUARE)
    compiled = {"matmul_8192": b.compile(square, "matmul_8192")}
    odd = matmul_model(*ODD)
    for padding in (True, False):
        name = f"matmul_odd_{'padded' if padding else 'unpadded'}"
        compiled[name] = b.compile(odd, name, matmul_padding=padding)
        print("".join(f"  {line}\n" for line in padding_lines(compiled[name])) or "  no padding lines\n", end="")
    with contextlib.ExitStack() as stack:
        exes = {k: stack.enter_context(b.load(c)) for k, c in compiled.items()}
        for model, (m, k, n), names in ((square[0], SQUARE, ["matmul_8192"]), (odd[0], ODD, list(compiled)[1:])):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.from_numpy(np.asarray(model.proj.weight.data, np.float32)).to("cuda", torch.bfloat16)
            ours = {name: lambda exe=exes[name], x=x: exe.run({"x": x}) for name in names}
            ms, errs = b.time(ours, lambda x=x, w=w: torch.matmul(x, w.T))
            for name in names:
                if name == "matmul_8192":
                    aim, met = f">= {floor:.2f}x", ms["ref"] / ms[name] >= floor
                else:  # the aim for odd shapes: padding pays
                    aim, met = "padded < unpadded", ms["matmul_odd_padded"] < ms["matmul_odd_unpadded"]
                b.row(name, f"{m}x{k}x{n} MxKxN", ms[name], ms["ref"], 2 * m * n * k, aim, met, errs[name])
                kernel_times(name, exes[name], [x])
            del x, w


def kernel_times(name: str, exe: Any, feeds: Sequence[Any]) -> None:
    """The kernels one call launched, each timed alone with CUDA events."""
    from aotc.runtime.backends.cuda.profile import profile

    program = exe._variants[0][1]  # the static-shaped model's only variant: its CudaProgram
    print(f"  {name}: kernels that ran")
    for r in profile(program, feeds, {}):
        print(f"    ran {r.name} ({r.kind}): {r.ms * 1e3:.1f} us, {r.tflops:.1f} TFLOP/s")


def bench_gpt2(b: Bench) -> None:
    from aotc.runtime.guards import Binder
    from aotc_cli.feeds import build_feeds

    torch = b.torch
    ceiling, _ = AIMS["gpt2"]
    compiled = b.compile(gpt2_model(gpt2_small_config()), "gpt2_small_bf16", precision="bf16")
    print("  torch side: the traced graph op for op, weights cast to bfloat16, run under torch.autocast(bfloat16)")
    twin = bench_cuda.TorchTwin(compiled.graph, torch, bench_cuda.DEVICE)
    twin.consts = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in twin.consts.items()}
    host, _ = build_feeds(compiled.graph, {}, GPT2_SHAPE, random=True, seed=0)
    names = list(compiled.graph.input_names)
    gpu = [torch.from_numpy(np.ascontiguousarray(host[n])).cuda() for n in names]
    env = Binder(compiled.graph).bind([host[n] for n in names])

    def twin_bf16(*xs: Any) -> Any:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return twin(xs, env)[0]

    compiled_twin = torch.compile(twin_bf16, dynamic=False)
    feeds = dict(zip(names, gpu))
    with b.load(compiled) as exe:
        ms, errs = b.time(
            {"aotc": lambda: exe.run(feeds)}, lambda: compiled_twin(*gpu), {"eager": lambda: twin_bf16(*gpu)}
        )
    shape = "x".join(str(v) for v in GPT2_SHAPE.values())
    ratio = ms["aotc"] / ms["ref"]
    b.row("gpt2_small_bf16", shape, ms["aotc"], ms["ref"], model_flops(compiled.graph, env),
          f"latency <= {ceiling:.1f}x", ratio <= ceiling, errs["aotc"])  # fmt: skip
    print(f"  gpt2: torch.compile {ms['ref']:.3f} ms, eager {ms['eager']:.3f} ms, aotc {ms['aotc']:.3f} ms")


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
                                                "gpt2": bench_gpt2}  # fmt: skip


def run_gpu(args: argparse.Namespace) -> int:
    torch, info = bench_cuda.require_gpu()
    import triton

    arch = "sm_90" if info.capability == (9, 0) else info.arch
    print(f"GPU: {info}; torch {torch.__version__}; triton {triton.__version__}; kernels compiled for {arch}")
    print(
        "aims (issue 10): " + "; ".join(text for _, text in AIMS.values()) + "; padded odd shapes faster than unpadded"
    )
    b = Bench(torch, arch, args)
    failed = 0
    for case in args.cases or CASES:
        try:
            BENCHES[case](b)
        except Exception as e:  # one case failing must not hide the others' numbers
            failed += 1
            print(f"{case}: FAILED: {type(e).__name__}: {e}", flush=True)
    header = ["case", "shape", "aotc ms", "ref ms", "speed", "aotc TFLOP/s", "ref TFLOP/s", "aim", "met", "rel err"]
    widths = [max(len(r[i]) for r in [header, *b.rows]) for i in range(len(header))]
    for r in [header, *b.rows]:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    print("speed: reference ms / aotc ms; references: torch SDPA (attention), torch.matmul on cuBLAS (matmul), "
          "torch.compile (gpt2)")  # fmt: skip
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help=f"any of {', '.join(CASES)} (default: all)")
    parser.add_argument("--check", action="store_true", help="no GPU: compile every case, check the schedules")
    parser.add_argument("--max-seq", type=int, default=SEQS[-1], help="longest attention sequence")
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
    return check(args) if args.check else run_gpu(args)


if __name__ == "__main__":
    raise SystemExit(main())
