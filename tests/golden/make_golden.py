"""Writes the golden artifact of the current schema version and its expected outputs.

    .venv/bin/python tests/golden/make_golden.py            # writes tests/golden/v<SCHEMA_VERSION>_mlp.{aotc,npz}

From version 3 the file also holds the variant's launch plan and its kernels compiled for sm_80 (cubin and
PTX; triton compiles them with no GPU); from version 4 for sm_80 and sm_90, with sm_90 arch launches; from
version 6 every launch carries its digest and extents and every binary the constexprs it was compiled with; from
version 7 the file stores the source graph as ONNX for onnxruntime (aotc/onnx/runtime_model.py); from version 8 each
kernel names its template (KernelCode.kind_name) and the source graph is bound to the variants by its digest
(meta aotc.source_digest); from version 9 the variant is a Variant table (its graph and its plan); from version 10 the
model keeps a state across calls (``memory``, written in place at the row an input names, its initial value a
broadcast weight), so the file holds the State table and its launch plan writes the state's own storage. Run it once per schema
version, when SCHEMA_VERSION is bumped, and check both files in. Never
regenerate an older version's files: they prove that files written by earlier aotc versions still load.
The model touches most of the schema: symbols with ranges and multiple_of, a guard with its source
location, float32/int64/bool constants, attrs of every kind, a nested output tree and a source graph.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from aotc.artifact import SCHEMA_VERSION, save_artifact
from aotc.ir import Builder, DType, Graph, Guard, Op, Symbol, TensorType, Value, sym, verify
from aotc.ir.evaluate import run_graph
from aotc.ir.graph import State
from aotc.ir.verify import graph_ctx
from aotc.lowering.decompose import decompose as lower

HERE = Path(__file__).resolve().parent
F32, I64 = DType.float32, DType.int64


def source_graph(with_state: bool = False) -> Graph:
    """The golden model; ``with_state`` (the files of schema 10 on) adds its state. The kernel and plan tests build on
    the stateless model (tests/artifact/kernel_kit.py)."""
    rng = np.random.default_rng(20250601)
    consts = {
        "embed.weight": rng.standard_normal((10, 16)).astype(np.float32),
        "fc1.weight": (rng.standard_normal((32, 16)) * 0.3).astype(np.float32),
        "fc1.bias": (rng.standard_normal(32) * 0.1).astype(np.float32),
        "fc2.weight": (rng.standard_normal((16, 32)) * 0.3).astype(np.float32),
        "ln.weight": (1 + 0.1 * rng.standard_normal(16)).astype(np.float32),
        "keep": np.arange(16) % 3 != 0,
        "offsets": np.array([0, 1, 2], dtype=np.int64),
    }
    if with_state:
        consts["memory.init"] = (0.1 * np.arange(16, dtype=np.float32)).reshape(1, 16)
    batch, seq = sym("batch"), sym("seq")
    symbols = (Symbol("batch", 1, 8), Symbol("seq", 2, 64, multiple_of=2))
    guards = (Guard(seq, "<=", 48, "model.py:12"),)
    stub = Graph((), (), (), (), {"tuple": []}, symbols, guards)
    b = Builder(graph_ctx(stub), loc="model.py:20")
    x = b.new_value(TensorType(F32, (batch, seq, 16)))
    ids = b.new_value(TensorType(I64, (batch, seq)))

    def c(name: str) -> Value:
        arr = consts[name]
        return b.op(Op.CONSTANT, name=name, shape=arr.shape, dtype=DType(arr.dtype.name))

    h = b.op(
        Op.ADD,
        x,
        b.op(
            Op.EMBEDDING,
            c("embed.weight"),
            b.op(Op.ADD, ids, b.op(Op.REDUCE_SUM, c("offsets"), axes=(0,), keepdim=False)),
        ),
    )
    h = b.op(Op.LAYER_NORM, h, c("ln.weight"), ndim=1, eps=1e-5)
    b.loc = "model.py:21"
    y = b.op(
        Op.LINEAR,
        b.op(Op.GELU, b.op(Op.LINEAR, h, c("fc1.weight"), c("fc1.bias")), approximate="tanh"),
        c("fc2.weight"),
    )
    y = b.op(Op.WHERE, c("keep"), b.op(Op.ADD, x, y), b.full(-0.0, F32))
    probs = b.op(Op.SOFTMAX, y, axis=2)
    first_half = b.op(Op.SLICE, y, starts=(0, 0, 0), stops=(batch, seq // 2, 16), steps=(1, 1, 2))
    total = b.op(Op.REDUCE_MAX, first_half, axes=(1, 2), keepdim=True)
    flags = b.op(Op.CAST, b.op(Op.GT, total, b.full(float("inf"), F32)), dtype=I64)
    if not with_state:
        tree = {"tuple": [{"dict": [["y", 0], ["probs", 1]]}, {"list": [2, 3]}]}
        outputs = (y, probs, total, flags)
        return Graph((x, ids), ("x", "ids"), tuple(b.nodes), outputs, tree, symbols, guards, consts, "golden_mlp")
    slot = b.new_value(TensorType(I64, (1,)))  # from version 10: the state's row this call writes
    memory = b.new_value(TensorType(F32, (4, 16)))
    b.loc = "model.py:22"
    row = b.op(Op.REDUCE_MEAN, y, axes=(0, 1), keepdim=False)
    written = b.op(
        Op.SCATTER,
        memory,
        b.op(Op.RESHAPE, slot, shape=(1, 1)),
        b.op(Op.RESHAPE, row, shape=(1, 16)),
        negative_indices=False,
    )
    recall = b.op(Op.REDUCE_SUM, written, axes=(0,), keepdim=False)
    outputs = (y, probs, total, flags, recall, written)
    tree = {"tuple": [{"dict": [["y", 0], ["probs", 1], ["recall", 4]]}, {"list": [2, 3]}]}
    return Graph(
        (x, ids, slot, memory),
        ("x", "ids", "slot", "memory"),
        tuple(b.nodes),
        outputs,
        tree,
        symbols,
        guards,
        consts,
        "golden_mlp",
        (State("memory", "memory.init"),),
    )


def sample_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "x": rng.standard_normal((3, 10, 16)).astype(np.float32),
        "ids": rng.integers(0, 7, size=(3, 10)).astype(np.int64),
        "slot": np.array([2], dtype=np.int64),  # from version 10
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="overwrite this version's files")
    args = parser.parse_args()
    stem = HERE / f"v{SCHEMA_VERSION}_mlp"
    if stem.with_suffix(".aotc").exists() and not args.force:
        print(f"{stem}.aotc exists; golden files of a released schema version must not change (--force to overwrite)")
        return 1
    src = source_graph(with_state=True)
    variant = lower(src)
    verify(src)
    verify(variant, primitive_only=True)
    from aotc.ir.digest import seal
    from aotc.ir.schedule import ArchLaunch
    from aotc.ir.templates import KernelKind
    from aotc.ir.variant import Variant
    from aotc.kernels.aot import compile_kernels
    from aotc.kernels.scheduler import schedule_graph
    from aotc.lowering.options import CompileOptions

    # From version 4: sm_80 kernels, and sm_90 arch launches where sm_90's heuristics choose other tiles.
    targets = ("sm_80", "sm_90")
    schedule = schedule_graph(variant, CompileOptions(targets=targets))
    if not any(k.arch_launches for k in schedule.kernels):
        # The model is too small for sm_90's heuristics to differ: give its first matmul an arch launch with
        # twice the warps, so the file holds the version-4 table all the same.
        i = next(i for i, k in enumerate(schedule.kernels) if k.kind is KernelKind.MATMUL)
        k = schedule.kernels[i]
        name = f"{k.name}_sm90"
        v = k.replace(
            name=name, source=k.source.replace(f"def {k.name}(", f"def {name}(", 1), num_warps=2 * k.num_warps
        )
        kernels = list(schedule.kernels)
        kernels[i] = seal(variant, k.replace(arch_launches=(ArchLaunch("sm_90", v),)))  # digests of both codes
        schedule = dataclasses.replace(schedule, kernels=tuple(kernels))
    distinct = list({k.name: k for k in schedule.kernels}.values())
    binaries = compile_kernels(distinct, targets=targets)
    print(
        f"{len(schedule.kernels)} launches, {sum(len(k.arch_launches) for k in schedule.kernels)} with an sm_90 arch launch"
    )
    from aotc.onnx.runtime_model import runtime_onnx

    onnx = runtime_onnx(src)  # from version 7
    assert onnx.model is not None, onnx.note
    save_artifact(
        stem.with_suffix(".aotc"),
        [Variant(variant, schedule)],
        source=src,
        meta={"golden": True, "schema_version": SCHEMA_VERSION, "onnx": onnx.summary},
        binaries=tuple(binaries.values()),
        onnx=onnx.model,
    )
    feeds = sample_inputs()
    init = np.broadcast_to(src.constants["memory.init"], (4, 16)).copy()  # the state as a session starts
    outs = run_graph(variant, [*feeds.values(), init], {"batch": 3, "seq": 10})[: variant.num_results]
    np.savez(
        stem.with_suffix(".npz"),
        **{f"in_{k}": v for k, v in feeds.items()},
        **{f"out_{i}": o for i, o in enumerate(outs)},
    )
    print(f"wrote {stem}.aotc and {stem}.npz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
