"""The text of generated kernels: a few of GPT-2's and an LSTM time loop's pinned against checked-in files, and
what every kernel of the example models must look like (STYLE.md 7: a header comment naming its nodes,
parameters named by role in the order pointers, sizes, constexprs, none that no line reads, no no-op
broadcast, no sprawling line).

A codegen change that alters a pinned kernel fails ``test_pinned_kernel_text``; when the change is meant, rewrite
the files and review their diff with the change:

    AOTC_UPDATE_KERNEL_TEXT=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/kernel_layer/test_kernel_text.py
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from aotc.ir import DType, Op, TensorType
from aotc.ir.schedule import ArgKind, Kernel, Schedule
from aotc.ir.templates import KernelKind
from aotc.kernels.naming import value_names
from aotc.kernels.scheduler import code, schedule_graph
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check
from tests.kernel_layer.model_kit import CONFIGS, lowered

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "kernels"
UPDATE = "AOTC_UPDATE_KERNEL_TEXT"
LONGEST_LINE = 160  # an index expression or a load may run long; a formula is bound to temporaries


@cache
def _schedule(name: str) -> Schedule:
    return schedule_graph(lowered(name, fuse_attention=True))


def _first(kind: KernelKind, *ops: str) -> Callable[[Schedule], Kernel]:
    def pick(s: Schedule) -> Kernel:
        return next(k for k in s.kernels if k.kind is kind and all(o in k.fused for o in ops))

    return pick


# file stem (the model's name first) -> the kernel it pins
PINNED: dict[str, Callable[[Schedule], Kernel]] = {
    "gpt2_embedding": _first(KernelKind.POINTWISE, "gather"),
    "gpt2_layernorm": _first(KernelKind.REDUCTION, "rsqrt"),
    "gpt2_attention": _first(KernelKind.ATTENTION),
    "gpt2_matmul_bias_gelu": _first(KernelKind.MATMUL, "tanh"),
    "lstm_ensemble_recurrent_cell": _first(KernelKind.RECURRENT_CELL, "flip"),
}


@pytest.mark.parametrize("stem", sorted(PINNED))
def test_pinned_kernel_text(stem: str) -> None:
    kernel = PINNED[stem](_schedule(next(m for m in CONFIGS if stem.startswith(f"{m}_"))))
    path = GOLDEN / f"{stem}.txt"
    if os.environ.get(UPDATE):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(kernel.source)
    assert path.exists(), f"no golden text {path}: run with {UPDATE}=1 to write it"
    assert kernel.source == path.read_text(), (
        f"the generated text of the pinned {stem} kernel changed. If the change is meant, rewrite the golden files "
        f"with {UPDATE}=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/kernel_layer/test_kernel_text.py "
        "and review their diff with your change."
    )


def _function(k: Kernel) -> ast.FunctionDef:
    (fn,) = [n for n in ast.parse(k.source).body if isinstance(n, ast.FunctionDef)]
    return fn


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_kernel_reads_like_hand_written_triton(name: str) -> None:
    s = _schedule(name)
    graph = lowered(name, fuse_attention=True)
    firsts: dict[str, Kernel] = {}
    for k in s.kernels:  # a kernel shared by launches names the nodes of the first
        firsts.setdefault(k.name, k)
    for k in firsts.values():
        lines = k.source.splitlines()
        # a comment naming the nodes it computes, and where the model wrote them, heads the function
        header = "\n".join(t for t in lines if t.startswith("#"))
        assert header.startswith(f"# {k.name} computes these nodes"), k.source
        assert lines[lines.index("@triton.jit") - 1].startswith("#"), k.source
        for i in k.nodes:
            assert f"%{i} {graph.nodes[i].op.value}" in header, (i, k.source)
        # parameters: pointers, then sizes, then constexprs; the same names the launch passes
        fn = _function(k)
        params = [a.arg for a in fn.args.args]
        assert params == [a.name for a in k.args] + [c for c, _ in k.constexprs], k.source
        kinds = [0 if a.kind in (ArgKind.BUFFER, ArgKind.FLAG) else 1 for a in k.args]
        assert kinds == sorted(kinds), k.source
        assert all(re.fullmatch(r"\w+_ptr\d*", a.name) for a in k.args if a.kind is not ArgKind.SIZE), k.source
        assert not any(re.fullmatch(r"in_ptr\d+|[a-z]+_\d+", p) for p in params), k.source  # out_ptr1: plan checks
        # every parameter is read
        read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert set(params) - {c for c, _ in k.constexprs} <= read, (set(params) - read, k.source)
        # no broadcast of a tile to the shape it has, no line a reader has to scroll
        bound = dict(re.findall(r"^ *(\w+) = (.*)$", code(k.source), re.M))
        for tile in re.findall(r"tl\.broadcast_to\((\w+),", k.source):
            text = bound.get(tile, "")
            assert not ("[:, None]" in text and "[None, :]" in text), (tile, k.source)
        long = [t for t in code(k.source).splitlines() if len(t) > LONGEST_LINE]
        assert not long, long


def test_pointer_names_follow_the_model() -> None:
    """Weights by their parameter names (the shortest that tells them apart), graph inputs by theirs, the qkv
    buffer attention reads by its roles, the written value as ``out_ptr``, a compound size by its role."""
    s = _schedule("gpt2")
    names = {k.name: [a.name for a in k.args] for k in s.kernels}
    embedding = PINNED["gpt2_embedding"](s)
    assert [a.name for a in embedding.args][:4] == ["input_ids_ptr", "wte_weight_ptr", "wpe_weight_ptr", "out_ptr"]
    assert [a.name for a in PINNED["gpt2_attention"](s).args][:2] == ["qkv_ptr", "out_ptr"]
    gelu = PINNED["gpt2_matmul_bias_gelu"](s)
    assert [a.name for a in gelu.args] == ["x_ptr", "weight_ptr", "bias_ptr", "out_ptr", "M"], names
    assert gelu.name.endswith("_matmul_bias_gelu")
    assert PINNED["gpt2_layernorm"](s).name.endswith("_reduction_layernorm")


@pytest.mark.parametrize("name", ["gpt2", "lstm_ensemble"])
def test_a_shared_kernels_header_names_the_other_launches_that_run_it(name: str) -> None:
    """A code several launches run says so after the nodes of the first: the others by the names they would have
    had (``k7_reduction_layernorm``: launch 7 of the plan); the binary key reads no comment, so sharing is unchanged."""
    s = _schedule(name)
    launches: dict[str, list[int]] = {}
    for i, k in enumerate(s.kernels):
        launches.setdefault(k.name, []).append(i)
    assert any(len(ks) > 1 for ks in launches.values())
    for code_name, ks in launches.items():
        header = [t for t in s.kernels[ks[0]].source.splitlines() if t.startswith("#")]
        shared = "\n".join(header[next((j for j, t in enumerate(header) if "The same code" in t), len(header)) :])
        assert [int(n) for n in re.findall(r"\bk(\d+)_\w+", shared)] == ks[1:], (code_name, shared)


def test_values_are_named_after_their_pointers() -> None:
    """A load by its pointer's role, numbered where loads share one (never into another's role: ``x1`` is left to
    ``x1_ptr``), where the role is taken in the kernel or is a Python name; a number after a digit takes a ``_``."""
    values = [("v0", "x_ptr"), ("v1", "x_ptr"), ("v2", "x1_ptr"), ("v3", "input_ptr"), ("t0", "out_ptr1")]
    values += [("v4", "w1_ptr"), ("v5", "w1_ptr"), ("v6", "acc_ptr")]
    assert value_names(values, {"acc", "v0"}) == {
        **{"v0": "x", "v1": "x2", "v2": "x1", "v3": "input1", "t0": "out1"},
        **{"v4": "w1", "v5": "w1_1", "v6": "acc1"},
    }


def test_a_value_named_like_a_builtin_runs() -> None:
    """Inputs called ``input`` and ``range`` (a name the kernel calls): their loads are ``input1`` and ``range1``."""
    spec = TensorType(DType.float32, (2, 3))
    g = make_graph({"input": spec, "range": spec}, lambda b, x, y: [b.op(Op.ADD, b.op(Op.EXP, x), y)])
    rng = np.random.default_rng(0)
    (k,) = check(g, [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2)]).kernels
    assert "input1 = tl.load(input_ptr" in k.source and "range1 = tl.load(range_ptr" in k.source, k.source
