"""The cases of benchmarks/bench_kernels.py: their sizes and aims, the aotc models, and what each case compiles
(one list of builds for --check, --compile-only and the timed run)."""

from __future__ import annotations

import argparse
import functools
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import bench_cuda  # the sibling benchmark's GPU check and torch twin
import benchlib  # targets, compile, rows and timing

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.ir.templates import KernelKind
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
        # Tuned tiles (aotc/kernels/tuned/) for the seq the aims are stated at, not the artifacts' maximum.
        attention = [
            Build(attention_name(d, causal), functools.partial(attention_model, d, causal, args.max_seq),
                  {"tune_dims": (("seq", max(SEQS)),)}, info={"head_dim": d, "causal": causal})
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
        # tuned tiles for the 8x1024 shape (the table's GPT-2 keys at 1x128 serve a compile sized for it)
        tune = {} if args.small else {"tune_dims": (("batch", 8), ("seq", 1024))}
        return [Build(name, functools.partial(benchlib.gpt2_model, config), {"precision": "bf16", **tune},
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
