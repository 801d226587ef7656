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
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cuda  # the sibling benchmark's GPU check and torch twin
import benchlib  # targets, compile, rows and timing
from kernel_cases import (
    CASES,
    GPT2_SHAPES,
    HEAD_DIMS,
    MAX_SEQ,
    SEQS,
    SMALL_GPT2,
    SMALL_GPT2_SHAPES,
    builds,
    compile_build,
    count,
    gpt2_small_config,
    kernel_names,
    kernels_of,
    padding_lines,
)
from kernel_timing import run_gpu

import aotc
from aotc.ir.templates import KernelKind


def fail(message: str, code: int = 1) -> None:
    print(f"bench_kernels: {message}", file=sys.stderr)
    raise SystemExit(code)


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
