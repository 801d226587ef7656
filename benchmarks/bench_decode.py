"""Greedy decoding throughput: aotc's GPT-2 decoder (models/gpt2_decode.py, its cache in a session) against Hugging Face
eager ``generate`` with its static cache, on the same weights, in the same run.

    .venv/bin/python benchmarks/bench_decode.py                   # cpu: onnxruntime vs HF eager, batch 1 and 8
    .venv/bin/python benchmarks/bench_decode.py --device cuda     # cuda: vs torch.compile of HF's static-cache model
    .venv/bin/python benchmarks/bench_decode.py --dry-run         # CI: a tiny model, a few tokens, nothing timed

Each case prefills ``--prompt`` tokens, then decodes ``--new`` tokens per row (no eos: every row runs to the end),
``--rounds`` times, taking each engine's fastest round; the engines take turns, so the box's noise hits both.
Printed per case: tokens per second (batch x new tokens over the whole generation), the prefill time and the
median per-token latency after it, for each engine, the ratio aotc/HF of tokens per second, and whether both
produced the same tokens. Aims (issue 29): on cpu >= 1.5x HF eager's tokens per second; on a GPU >= 1.0x
torch.compile's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # torch_kit: torch and transformers as the tests import them

import aotc  # noqa: E402
from aotc_cli.loader import import_file  # noqa: E402


def build(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """The HF model (random weights of the config) and aotc's decoder compiled on the same weights."""
    from torch_kit import torch_module, transformers_module

    torch, tf = torch_module(False), transformers_module(False)
    max_seq = args.prompt + args.new
    cfg = tf.GPT2Config(
        vocab_size=args.vocab, n_positions=max_seq, n_embd=args.d_model, n_layer=args.layers, n_head=args.heads,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = tf.GPT2LMHeadModel(cfg).eval()
    m = import_file(ROOT / "models" / "gpt2_decode.py")
    model = m.GPT2Decoder(args.vocab, max_seq, args.d_model, args.layers, args.heads, max_batch=max(args.batch))
    model.load_state_dict(m.hf_state_dict(hf))
    targets = () if args.device != "cuda" else ("sm_80", "sm_90")
    compiled = aotc.compile(model, m.inputs_of(model), options=aotc.CompileOptions(targets=targets))
    return hf, compiled, max_seq


class _Clock:
    """HF's per-token timestamps: a logits processor runs once per generated token."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.stamps.append(time.perf_counter())
        return scores


def run_hf(hf: Any, prompt: np.ndarray, new: int, compiled_hf: bool) -> tuple[np.ndarray, float, list[float]]:
    from torch_kit import torch_module, transformers_module

    torch, tf = torch_module(False), transformers_module(False)
    clock = _Clock()
    start = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(
            torch.tensor(prompt),
            attention_mask=torch.ones(prompt.shape, dtype=torch.long),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
            cache_implementation="static",
            logits_processor=tf.LogitsProcessorList([clock]),
            **({"compile_config": tf.CompileConfig(fullgraph=False)} if compiled_hf else {}),
        )
    total = time.perf_counter() - start
    return out.numpy(), total, [start, *clock.stamps]


def run_aotc(exe: Any, prompt: np.ndarray, new: int) -> tuple[np.ndarray, float, list[float]]:
    stamps = [time.perf_counter()]
    tokens = aotc.generate(exe, prompt, new, on_step=lambda step, logits: stamps.append(time.perf_counter()))
    return tokens, stamps[-1] - stamps[0], stamps


def summary(total: float, stamps: list[float], batch: int, new: int) -> dict[str, float]:
    gaps = np.diff(stamps)
    return {
        "tokens_per_s": batch * new / total,
        "prefill_ms": 1e3 * float(gaps[0]),
        "per_token_ms": 1e3 * float(statistics.median(gaps[1:])) if len(gaps) > 1 else float("nan"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="aotc's device: cpu, reference, interpret or cuda")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens (the prefill)")
    parser.add_argument("--new", type=int, default=128, help="new tokens per row")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime's and torch's threads")
    parser.add_argument("--dry-run", action="store_true", help="a tiny model, a few tokens, one round (CI)")
    parser.add_argument("--jsonl", default=None, help="append each case's row as JSON to this file")
    args = parser.parse_args()
    if args.dry_run:
        args.batch, args.prompt, args.new, args.rounds = [1, 2], 8, 4, 1
        args.layers, args.d_model, args.heads, args.vocab = 1, 32, 2, 128
    from torch_kit import torch_module

    torch = torch_module(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    hf, compiled, max_seq = build(args)
    exe = aotc.load(compiled.artifact_bytes, device=args.device, threads=args.threads)
    compiled_hf = args.device == "cuda"
    if compiled_hf:
        hf = hf.to("cuda")
    reference = "torch.compile" if compiled_hf else "HF eager"
    print(f"GPT-2 {args.layers}x{args.d_model}, vocab {args.vocab}, prompt {args.prompt}, {args.new} new tokens, "
          f"cache {max_seq}; aotc on {exe.device} vs {reference} (static cache)")  # fmt: skip
    rng = np.random.default_rng(0)
    for batch in args.batch:
        prompt = rng.integers(1, args.vocab, (batch, args.prompt))
        best: dict[str, tuple[float, Any]] = {}
        same = True
        for _ in range(args.rounds):
            for name in ("aotc", "hf"):
                if name == "aotc":
                    tokens, total, stamps = run_aotc(exe, prompt, args.new)
                else:
                    tokens, total, stamps = run_hf(hf, prompt, args.new, compiled_hf)
                if name not in best or total < best[name][0]:
                    best[name] = (total, stamps)
                if name == "aotc":
                    mine = tokens
                else:
                    same = same and bool(np.array_equal(mine, tokens))
        rows = {n: summary(t, s, batch, args.new) for n, (t, s) in best.items()}
        ratio = rows["aotc"]["tokens_per_s"] / rows["hf"]["tokens_per_s"]
        print(
            f"batch {batch}: aotc {rows['aotc']['tokens_per_s']:.1f} tok/s (prefill {rows['aotc']['prefill_ms']:.1f} ms, "
            f"{rows['aotc']['per_token_ms']:.2f} ms/token)  {reference} {rows['hf']['tokens_per_s']:.1f} tok/s "
            f"(prefill {rows['hf']['prefill_ms']:.1f} ms, {rows['hf']['per_token_ms']:.2f} ms/token)  "
            f"ratio {ratio:.2f}x  same tokens: {same}",
            flush=True,
        )
        if args.jsonl:  # a row of gpu_report.py's speed table: the generation's time, ratio = ref ms / aotc ms
            aim = 1.0 if compiled_hf else 1.5
            row = {
                "bench": "decode", "case": f"greedy batch {batch}", "shape": f"{args.prompt}+{args.new} tokens",
                "dtype": "float32", "aotc_ms": 1e3 * best["aotc"][0], "ref_name": reference,
                "ref_ms": 1e3 * best["hf"][0], "ratio": ratio, "aim": aim, "meets": ratio >= aim, "same_tokens": same,
                "note": f"{rows['aotc']['per_token_ms']:.2f} vs {rows['hf']['per_token_ms']:.2f} ms a token",
            }  # fmt: skip
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row | {f"{n}_{k}": v for n, r in rows.items() for k, v in r.items()}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
