"""Split-K under the kernel layer: the split matmul is two kernels (the batched partial products, then one
reduction holding the sum, the cast and the epilogue), and they compute under the Triton interpreter what the
cpu backend computes."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.compiler import CompiledModel
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.templates import KernelKind
from aotc.ir.types import TensorType
from aotc.kernels.scheduler import schedule_graph
from aotc.lowering.options import CompileOptions
from aotc.lowering.splitk import split_k
from tests.graph_kit import const, make_graph
from tests.kernel_layer.kernel_kit import check

pytest.importorskip("triton")

# Small enough for the interpreter: K = 2048 in 8 slices of 256, rows = 3 * batch <= 6, N = 64.
INPUTS = {"x": TensorSpec((Dim("batch", min=1, max=2), 3, 2048), "float32")}


class Proj(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2048, 64)

    def forward(self, x):
        return F.gelu(self.fc(x))


@cache
def _compiled(precision: str) -> CompiledModel:
    model = Proj()
    rng = np.random.default_rng(0)
    model.load_state_dict(
        {k: (rng.standard_normal(v.shape) * 0.05).astype(np.float32) for k, v in model.state_dict().items()}
    )
    options = dataclasses.replace(CompileOptions.from_env(), precision=precision, targets=())
    return aotc.compile(model, INPUTS, options=options)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_split_linear_is_a_batched_matmul_and_one_reduction(precision: str) -> None:
    compiled = _compiled(precision)
    g, s = compiled.lowered, compiled.schedule
    assert s is not None
    assert [k.kind for k in s.kernels] == [KernelKind.MATMUL, KernelKind.REDUCTION], compiled.explain()
    mm, red = s.kernels
    assert mm.grid[1] == 8 and "matmul" in mm.fused and "reduce_sum" not in mm.fused  # S = 8 on grid axis y
    # the Linear's bias and GELU (erf form) moved from the matmul's epilogue into the reduction kernel
    assert {"reduce_sum", "add", "erf", "mul"} <= set(red.fused) and "matmul" not in red.fused
    (mm_node,) = [g.nodes[i] for i in mm.nodes if g.nodes[i].op is Op.MATMUL]
    assert mm_node.outputs[0].type.dtype is DType.float32
    if precision == "bf16":
        assert "cast" in red.fused
        # the float32 partials are stored as they are: no rounding to bf16 in the matmul kernel
        assert "bfloat16" not in mm.source.split("tl.dot")[-1]
        assert 'input_precision="ieee"' not in mm.source


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_split_linear_matches_cpu_under_the_interpreter(precision: str) -> None:
    data = _compiled(precision).artifact_bytes
    interp, cpu = aotc.load(data, device="interpret"), aotc.load(data, device="cpu")
    for batch in (1, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 2048)).astype(np.float32)
        (got,), (want,) = interp.run({"x": x}), cpu.run({"x": x})
        assert got.shape == want.shape == (batch, 3, 64) and got.dtype == want.dtype
        if precision == "fp32":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
        else:
            # Three bf16 roundings (the product, + bias, GELU), each of a float32 sum the kernel orders
            # differently from numpy: a value on a rounding boundary may land one ulp (2^-7) off each time.
            np.testing.assert_allclose(got, want, rtol=3 * 2.0**-7, atol=2.0**-7 * float(np.abs(want).max()))


def _final_projection(dtype: DType) -> Graph:
    """logits = h[4, 2048] @ w^T with a tiny N = 10, returned as they are (the sum is the model output)."""
    w = (np.random.default_rng(0).standard_normal((10, 2048)) * 0.05).astype(dtype.np)

    def body(b, h):
        return [b.op(Op.MATMUL, h, b.permute(const(b, "w", w), (1, 0)))]

    return split_k(make_graph({"h": TensorType(dtype, (4, 2048))}, body, constants={"w": w}))


@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.bfloat16], ids=lambda d: d.value)
def test_tiny_n_projection_matches_cpu(dtype: DType) -> None:
    g = _final_projection(dtype)
    (mm,) = [n for n in g.nodes if n.op is Op.MATMUL]
    assert mm.inputs[1].type.shape == (8, 256, 10)
    h = np.random.default_rng(1).standard_normal((4, 2048)).astype(np.float32).astype(dtype.np)
    tol = {DType.float32: (1e-5, 1e-5), DType.float16: (2e-3, 2e-3), DType.bfloat16: (2.0**-7, 2.0**-7)}[dtype]
    s = check(g, [h], {}, tol=tol, schedule=schedule_graph(g))
    assert len(s.kernels) == 2
