"""The generated pointwise and reduction sources compile ahead of time for a real GPU target (no GPU needed):
the interpreter accepts some code that the compiler refuses, so each kind of generated code is compiled once.
The same graphs also run under the interpreter against the cpu backend (half precision: 1e-2, as the
ops round to float16/bfloat16 one at a time)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aotc.ir import DType, Op, Symbol, TensorType
from aotc.ir.gather_ids import NEGATIVE_INDICES
from aotc.ir.symbolic import sym
from aotc.kernels.aot import AotOptions, compile_kernels
from aotc.kernels.scheduler import schedule_graph
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check

F32, F16, BF16, I32, I64 = DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.int64
N = Symbol("n", 1, 100000)


def _looped_reductions(b, x):
    out = [b.op(op, x, axes=(1,), keepdim=True) for op in (Op.REDUCE_MAX, Op.REDUCE_PROD)]
    return [*out, b.op(Op.ARGMIN, x, axis=1, keepdim=False)]


def _softmax_half(b, x):
    x32 = b.cast(x, F32)
    e = b.op(Op.EXP, b.op(Op.SUB, x32, b.op(Op.REDUCE_MAX, x32, axes=(1,), keepdim=True)))
    return [b.cast(b.op(Op.DIV, e, b.op(Op.REDUCE_SUM, e, axes=(1,), keepdim=True)), x.type.dtype)]


def _views_and_math(b, x, ids, k):
    g = b.op(Op.GATHER, x, ids, axis=0, **{NEGATIVE_INDICES: True})
    p = b.op(Op.PAD, b.op(Op.FLIP, g, axes=(1,)), pads=(1, 0, 0, 2), value=float("-inf"))
    c = b.op(Op.CONCAT, p, b.op(Op.TANH, p), axis=0)
    q = b.op(Op.DIV, k, b.full(3, I32))
    r = b.op(Op.MOD, k, b.full(-4, I32))
    return [c, b.op(Op.ROUND, b.op(Op.POW, c, c)), q, r, b.op(Op.ARGMAX, c, axis=0)]


CASES = {
    "looped_reductions": ({"x": TensorType(F32, (4, sym("n")))}, _looped_reductions),
    "softmax_f16": ({"x": TensorType(F16, (sym("n"), 300))}, _softmax_half),
    "softmax_bf16": ({"x": TensorType(BF16, (3, sym("n")))}, _softmax_half),
    "views_and_math": (
        {"x": TensorType(F16, (10, 4)), "ids": TensorType(I64, (sym("n"),)), "k": TensorType(I32, (7,))},
        _views_and_math,
    ),
}


def compile_case(name: str) -> list[str]:
    """Compiles the distinct kernels of one case for sm_80; returns their names."""
    inputs, body = CASES[name]
    s = schedule_graph(make_graph(inputs, body, symbols=(N,)))
    distinct = {k.name: k for k in s.kernels}
    binaries = compile_kernels(list(distinct.values()), targets=("sm_80",), options=AotOptions(cache=False, jobs=1))
    assert set(binaries) == set(distinct) and all(b.ptx for b in binaries.values())
    return sorted(binaries)


def test_generated_kernels_compile_for_sm80() -> None:
    # A fresh process: Triton's interpreter, which other tests run in this one, patches triton.language
    # in a way the in-process compiler then trips on.
    root = Path(__file__).resolve().parents[2]
    code = "from tests.kernel_layer.test_codegen_compiles import CASES, compile_case\nfor c in sorted(CASES): compile_case(c)"
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("n", [3, 9000])
@pytest.mark.parametrize("name", sorted(CASES))
def test_same_graphs_match_the_cpu_backend(name: str, n: int) -> None:
    inputs, body = CASES[name]
    g = make_graph(inputs, body, symbols=(N,))
    rng = np.random.default_rng(n)
    feeds = []
    for v in g.inputs:
        shape = tuple(d if isinstance(d, int) else n for d in v.type.shape)
        if v.type.dtype.is_int:
            feeds.append(rng.integers(-10, 10, shape).astype(v.type.dtype.np))
        elif name == "looped_reductions":  # products of 9000 numbers near 1 stay finite
            feeds.append(rng.uniform(0.99, 1.01, shape).astype(v.type.dtype.np))
        else:
            feeds.append(rng.standard_normal(shape).astype(v.type.dtype.np))
    check(g, feeds, {"n": n}, tol=None if name == "looped_reductions" else (1e-2, 1e-2))
