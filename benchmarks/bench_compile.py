"""Ahead-of-time compile cost of every example model: cold (empty kernel cache) and warm (cached), in wall
seconds and in CPU seconds (this process and its compile workers: what a busy machine does not inflate as it
does the wall time), kernel count, distinct kernels, kernels per layer where the model has layers, and
artifact size. Not a test: it prints a table and asserts nothing; compare numbers only between runs on one
machine.

    python benchmarks/bench_compile.py [MODEL ...] [--target sm_80 --target sm_90]

The PyTorch models (``torch_gpt2``: Hugging Face GPT2Model at the example GPT-2's size; ``torch_resnet18``:
torchvision's, at 64x64 images) go through ``aotc.compile(torch_module, inputs)`` and get a second table split by
stage: torch.export (with torch's decompositions where needed), the ATen translation, lowering, and the kernel
schedule plus ahead-of-time compile, each cold and warm. They need the test extra's torch, transformers and
torchvision.

Each model is compiled twice in this process with ``CompileOptions(targets=...)``: first against a
fresh, empty kernel cache (``AOTC_CACHE_DIR`` and Triton's ``TRITON_CACHE_DIR`` pointed at a
temporary folder), then again against the
cache the first compile filled. No GPU is needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aotc
from aotc.lowering.options import CompileOptions, parse_targets
from aotc_cli.loader import load_model
from aotc_cli.text import format_size, table

MODELS = Path(__file__).resolve().parents[1] / "models"
AOTC_NAMES = ("mlp", "gpt2", "bert", "lstm_ensemble", "cnn")
TORCH_NAMES = ("torch_gpt2", "torch_resnet18")
NAMES = AOTC_NAMES + TORCH_NAMES
# compile progress stage -> the column it is timed under (lowering: every stage between translate and scheduling)
STAGE_COLUMNS = {"torch.export": "export", "translate": "import", "schedule kernels": "kernels"}
STAGE_COLUMNS |= {"compile kernels": "kernels", "autotune kernels": "kernels", "write artifact": "write"}
# decoder/encoder layers of the default build(), for the kernels-per-layer column
LAYERS = {"gpt2": 2, "bert": 2}


def cpu_seconds() -> float:
    """CPU time of this process and of the children it has waited for (the compile workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def bench(name: str, options: CompileOptions) -> list[str]:
    model, inputs = load_model(MODELS / f"{name}.py")
    times, cpu = [], []
    for _ in ("cold", "warm"):
        start, start_cpu = time.perf_counter(), cpu_seconds()
        compiled = aotc.compile(model, inputs, options=options)
        times.append(time.perf_counter() - start)
        cpu.append(cpu_seconds() - start_cpu)
    schedule = compiled.schedule
    kernels = len(schedule.kernels) if schedule is not None else 0
    distinct = len({k.name for k in schedule.kernels}) if schedule is not None else 0
    per_layer = f"{kernels / LAYERS[name]:.1f}" if name in LAYERS else "-"
    targets = sorted({arch for b in compiled.kernels.binaries.values() for arch in b.archs})
    return [
        name,
        f"{times[0]:.1f}",
        f"{cpu[0]:.1f}",
        f"{times[1]:.2f}",
        str(kernels),
        str(distinct),
        per_layer,
        ",".join(targets) or "none",
        format_size(len(compiled.artifact_bytes)),
    ]


def torch_model(name: str) -> tuple[Any, dict[str, Any]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from torch_kit import torch_module, torchvision_module, transformers_module

    torch = torch_module(skip=False)
    torch.manual_seed(0)
    batch = aotc.Dim("batch", min=1, max=8)
    if name == "torch_gpt2":
        tf = transformers_module(skip=False)
        cfg = tf.GPT2Config(vocab_size=512, n_positions=128, n_embd=64, n_layer=2, n_head=4, use_cache=False)
        seq = aotc.Dim("seq", min=1, max=128)
        return tf.GPT2Model(cfg).eval(), {"input_ids": aotc.TensorSpec((batch, seq), "int64")}
    model = torchvision_module(skip=False).models.resnet18(num_classes=10).eval()
    return model, {"x": aotc.TensorSpec((batch, 3, 64, 64))}


class StageTimer:
    """A compile progress callback adding up the seconds spent under each column of STAGE_COLUMNS."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self._column, self._since = "lowering", time.perf_counter()

    def __call__(self, stage: str, *counts: int) -> None:  # "compile kernels" also passes (done, total)
        now = time.perf_counter()
        self.times[self._column] = self.times.get(self._column, 0.0) + now - self._since
        self._column, self._since = STAGE_COLUMNS.get(stage, "lowering"), now


def bench_torch(name: str, options: CompileOptions) -> list[list[str]]:
    """One row per run (cold, warm): seconds in each stage of compiling the torch model."""
    model, inputs = torch_model(name)
    rows = []
    for run in ("cold", "warm"):
        timer = StageTimer()
        start = time.perf_counter()
        compiled = aotc.compile(model, inputs, options=options, progress=timer)
        timer("end")
        total = time.perf_counter() - start
        kinds = [k.kind.value for k in compiled.schedule.kernels] if compiled.schedule is not None else []
        cols = [f"{timer.times.get(c, 0.0):.2f}" for c in ("export", "import", "lowering", "kernels")]
        rows.append([name, run, *cols, f"{total:.2f}", str(len(kinds)), str(kinds.count("attention"))])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help="any of: " + ", ".join(NAMES) + " (default: all)")
    parser.add_argument("--target", action="append", metavar="SM", help="repeatable (default: sm_80 and sm_90)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(NAMES))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    options = CompileOptions.from_env()
    options = dataclasses.replace(options, targets=parse_targets(",".join(args.target or ["sm_80", "sm_90"])))
    rows = [["model", "cold s", "cold cpu s", "warm s", "kernels", "distinct", "per layer", "binaries", "artifact"]]
    torch_rows = [
        ["torch model", "run", "export s", "import s", "lowering s", "kernels s", "total s", "kernels", "attn"]
    ]
    with tempfile.TemporaryDirectory() as cache:
        # cold: nothing cached from earlier runs, neither by aotc nor by Triton's own cache
        os.environ["AOTC_CACHE_DIR"] = os.path.join(cache, "aotc")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
        for name in args.models or NAMES:
            if name in TORCH_NAMES:
                torch_rows.extend(bench_torch(name, options))
            else:
                rows.append(bench(name, options))
            print(f"{name}: done", file=sys.stderr)
    load = ", load average " + " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else ""
    print(f"{os.cpu_count()} cores{load}; targets {', '.join(options.targets)}")
    if len(rows) > 1:
        print("\n".join(table(rows)))
    if len(torch_rows) > 1:
        print("\n".join(table(torch_rows)))


if __name__ == "__main__":
    main()
