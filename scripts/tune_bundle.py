"""Builds the candidate bundle the GPU check's ``tune`` step times (aotc/kernels/tuned/bundle.py has the format),
on a machine with no GPU: each tunable kernel of the benchmark set, its heuristic config and the tile grid,
compiled to sm_90 cubins.

    python scripts/tune_bundle.py OUT.zip                 # the benchmark set (scripts/gpu_prep.sh runs this)
    python scripts/tune_bundle.py OUT.zip --limit 40      # at most 40 candidates (heuristics first)
    python scripts/tune_bundle.py OUT.zip --only attention --list   # which keys and how many candidates
    python scripts/tune_bundle.py OUT.zip --small --limit 6 --sources   # a dry run's bundle (fake driver)
    python scripts/tune_bundle.py OUT.zip --floor 12.8 --only attention # the TMA form's candidates

The set (issue 27): attention bf16 and fp16, b4 h16 seq 4k, head dim 64 and 128, causal or not (8 keys);
the bf16 matmul 8192^3; GPT-2-small's bf16 matmuls at 1x128 and 8x1024 (each distinct key: qkv, attention
projection, MLP fc and projection, lm head); the fp32 lm head at 8x1024; the example LSTM ensemble's
recurrences (rows per program and warps) at batch 1 and 64, as the e2e step times it. ``--small`` swaps in tiny
shapes that the interpreter behind the fake driver runs in seconds.

The candidates are built as a compile at one CUDA driver floor builds them (``--floor``, default aotc's):
from a 12.7 floor sm_90's PTX takes tensor descriptors, so attention and the 16-bit matmuls are their TMA form,
and their keys say ``loads: descriptor``; entries timed for one form are never used for the other.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aotc.functional as F  # noqa: E402
from aotc import Dim, TensorSpec, nn  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.frontend.trace import trace  # noqa: E402
from aotc.ir.launch import check_driver_floor  # noqa: E402
from aotc.kernels.tuned import current_toolchain  # noqa: E402
from aotc.kernels.tuned.bundle import KeyCase, compile_cases, key_cases, write_bundle  # noqa: E402
from aotc.lowering.options import CompileOptions  # noqa: E402
from aotc.lowering.pipeline import lower  # noqa: E402

ARCH = "sm_90"
GPT2_SMALL = {"vocab_size": 50257, "n_positions": 1024, "d_model": 768, "n_layer": 1, "n_head": 12}
GPT2_SHAPES = ({"batch": 1, "seq": 128}, {"batch": 8, "seq": 1024})
LSTM_BATCHES = (1, 64)  # benchmarks/bench_cuda.py's lstm_ensemble batches


class Attention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class Project(nn.Module):
    def __init__(self, k: int, n: int, dtype: str) -> None:
        super().__init__()
        self.proj = nn.Linear(k, n, bias=False, dtype=dtype)

    def forward(self, x):
        return self.proj(x)


DEFAULT_FLOOR = CompileOptions().cuda_driver_floor


def _lowered(model, inputs, floor, precision=None):
    options = CompileOptions(
        targets=(ARCH,), cuda_driver_floor=floor, **({"precision": precision} if precision else {})
    )
    return lower(trace(model, inputs), options)


def attention_cases(small: bool, floor: str) -> list[KeyCase]:
    out = []
    b, h, seq = (1, 2, 128) if small else (4, 16, 4096)
    for dtype in ("bfloat16", "float16"):
        for d in (64, 128):
            for causal in (False, True):
                spec = TensorSpec((b, h, Dim("seq", min=1, max=seq), d), dtype)
                g = _lowered(Attention(causal), {"q": spec, "k": spec, "v": spec}, floor)
                out += key_cases(g, {"seq": seq}, f"attn_{dtype}_d{d}{'_causal' if causal else ''}", ARCH, floor=floor)
    return out


def matmul_cases(small: bool, floor: str) -> list[KeyCase]:
    m = k = n = 64 if small else 8192
    g = _lowered(Project(k, n, "bfloat16"), {"x": TensorSpec((m, k), "bfloat16")}, floor)
    return key_cases(g, {}, f"matmul_{m}x{k}x{n}", ARCH, floor=floor)


def gpt2_cases(small: bool, floor: str) -> list[KeyCase]:
    from aotc_cli.loader import import_file

    gpt2 = import_file(ROOT / "models" / "gpt2.py")
    config = dict(GPT2_SMALL)
    if small:
        config.update(vocab_size=96, n_positions=64, d_model=32, n_head=2)
    shapes = ({"batch": 1, "seq": 16},) if small else GPT2_SHAPES
    out: list[KeyCase] = []
    for precision in ("bf16", "fp32"):
        model, inputs = gpt2.build(**config)
        g = _lowered(model, inputs, floor, precision)
        for env in shapes if precision == "bf16" else shapes[-1:]:
            label = f"gpt2_{precision}_{env['batch']}x{env['seq']}"
            # fp32: the lm head only (vocab-wide N), the one fp32 matmul issue 27 tunes
            keep = None if precision == "bf16" else (lambda key: key["static"].get("n") == config["vocab_size"])
            out += key_cases(g, env, label, ARCH, keep, floor)
    return out


def lstm_cases(small: bool, floor: str) -> list[KeyCase]:
    from aotc_cli.loader import import_file

    lstm = import_file(ROOT / "models" / "lstm_ensemble.py")
    model, inputs = lstm.build(**({"hidden_size": 8, "members": 1, "steps": 3} if small else {}))
    g = _lowered(model, inputs, floor)
    out: list[KeyCase] = []
    for batch in (2,) if small else LSTM_BATCHES:
        out += key_cases(g, {"batch": batch}, f"lstm_ensemble_b{batch}", ARCH, _recurrence, floor)
    return out


def _recurrence(key: dict) -> bool:
    return key["template"] == "recurrent_cell"  # the LSTM cell alone: the set has its matmul shapes already


GROUPS = {"attention": attention_cases, "matmul": matmul_cases, "gpt2": gpt2_cases, "lstm": lstm_cases}


def limited(cases: list[KeyCase], limit: int | None) -> list[KeyCase]:
    """At most ``limit`` candidates: every key's heuristic first, then each key's grid in turn."""
    if limit is None:
        return cases
    budget = limit
    keep = [[] for _ in cases]
    depth = 0
    while budget > 0 and any(depth < len(c.candidates) for c in cases):
        for i, c in enumerate(cases):
            if depth < len(c.candidates) and budget > 0:
                keep[i].append(c.candidates[depth])
                budget -= 1
        depth += 1
    out = []
    for c, kept in zip(cases, keep):
        if kept:
            out.append(KeyCase(c.label, c.key, c.graph, c.env, kept))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", choices=sorted(GROUPS), help="these groups only")
    parser.add_argument("--limit", type=int, help="at most this many candidates in all")
    parser.add_argument("--small", action="store_true", help="tiny shapes (a dry run on the fake driver)")
    parser.add_argument("--sources", action="store_true", help="also each candidate's Kernel (the fake driver's)")
    parser.add_argument("--list", action="store_true", help="print the keys and candidate counts, compile nothing")
    parser.add_argument("--jobs", type=int, help="compile workers (default: every core)")
    parser.add_argument("--floor", default=DEFAULT_FLOOR, help=f"the CUDA driver floor to build for ({DEFAULT_FLOOR})")
    args = parser.parse_args()
    try:
        floor = check_driver_floor(args.floor)
    except AotcError as err:
        parser.error(f"--floor: {err}")
    start = time.perf_counter()
    cases: list[KeyCase] = []
    for name in args.only or GROUPS:
        cases += GROUPS[name](args.small, floor)
    cases = limited(cases, args.limit)
    total = sum(len(c.candidates) for c in cases)
    prepared = time.perf_counter() - start
    print(f"tune_bundle: {len(cases)} keys, {total} candidates ({prepared:.1f} s to trace and emit)", flush=True)
    for c in cases:
        print(f"  {c.label}: {len(c.candidates)} candidates", flush=True)
    if args.list:
        return
    compiled, seconds = compile_cases(cases, ARCH, args.jobs, floor)
    failed = sum(isinstance(r, str) for r in compiled.values())
    built = {"candidates": total, "failed": failed, "compile_s": round(seconds, 1),
             "compile_s_per_candidate": round(seconds / max(total, 1), 3), "small": args.small,
             "cuda_driver_floor": floor}  # fmt: skip
    chain = current_toolchain(ARCH, floor) or {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_bundle(args.out, cases, ARCH, compiled, chain, built, args.sources)
    size = args.out.stat().st_size
    print(f"tune_bundle: {args.out} {size / 2**20:.1f} MiB, {total - failed} cubins ({failed} failed), "
          f"compiled in {seconds:.1f} s ({built['compile_s_per_candidate']} s per candidate wall)")  # fmt: skip
    print(json.dumps(built))


if __name__ == "__main__":
    main()
