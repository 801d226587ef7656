"""A contraction operand computed in float32 and cast to bfloat16 (a layer norm before a bf16 Linear, GPT-2's lm
head under precision="bf16") is stored after the cast when nothing else reads the float32 value: the producer
writes half the bytes and the matmul loads bf16 with no cast in its K loop. Under the interpreter the plan
computes what the cpu backend does."""

from __future__ import annotations

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec, nn
from aotc.ir.dtypes import DType
from aotc.ir.templates import KernelKind
from tests.kernel_layer.kernel_kit import check

pytest.importorskip("triton")


class NormHead(nn.Module):
    """layer norm -> Linear; ``also`` adds the norm's output to the result (a second reader of it)."""

    def __init__(self, also: bool) -> None:
        super().__init__()
        self.also = also
        self.ln = nn.LayerNorm(64)
        self.head = nn.Linear(64, 64 if also else 96, bias=False)

    def forward(self, x):
        y = self.ln(x)
        return self.head(y) + y if self.also else self.head(y)


def _compiled(also: bool) -> aotc.CompiledModel:
    model = NormHead(also)
    rng = np.random.default_rng(0)
    model.load_state_dict({k: rng.standard_normal(v.shape).astype(np.float32) for k, v in model.state_dict().items()})
    spec = {"x": TensorSpec((Dim("rows", min=1, max=256), 64), "float32")}
    return aotc.compile(model, spec, options=aotc.CompileOptions(targets=(), precision="bf16"))


def _stored_dtypes(compiled: aotc.CompiledModel) -> dict[str, set[DType]]:
    g, s = compiled.lowered, compiled.schedule
    types = {o.id: o.type.dtype for n in g.nodes for o in n.outputs}
    return {k.kind.value: {types[v] for v in k.outputs} for k in s.kernels}


def test_the_norm_stores_bf16_and_the_matmul_loads_it_as_is() -> None:
    compiled = _compiled(also=False)
    kinds = [k.kind for k in compiled.schedule.kernels]
    assert kinds == [KernelKind.REDUCTION, KernelKind.MATMUL], compiled.explain()
    assert _stored_dtypes(compiled)["reduction"] == {DType.bfloat16}
    norm, mm = compiled.schedule.kernels
    assert "tl.bfloat16" in norm.source and "tl.bfloat16)" not in mm.source.split("acc = tl.dot")[0]
    # the model's output stays float32 (what it asks for): the matmul stores float32
    assert compiled.lowered.outputs[0].type.dtype is DType.float32
    x = np.random.default_rng(1).standard_normal((37, 64)).astype(np.float32)
    check(compiled.lowered, [x], {"rows": 37}, tol=(2e-2, 2e-2), schedule=compiled.schedule)


def test_a_norm_output_read_twice_stays_float32() -> None:
    compiled = _compiled(also=True)
    assert _stored_dtypes(compiled)["reduction"] == {DType.float32}
    mm = next(k for k in compiled.schedule.kernels if k.kind is KernelKind.MATMUL)
    assert ".to(tl.bfloat16)" in mm.source.split("acc = tl.dot")[0]  # the cast stays in the K loop
    x = np.random.default_rng(1).standard_normal((37, 64)).astype(np.float32)
    check(compiled.lowered, [x], {"rows": 37}, tol=(2e-2, 2e-2), schedule=compiled.schedule)
