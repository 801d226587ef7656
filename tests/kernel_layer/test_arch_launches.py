"""Per-target kernels: a newer target whose heuristics pick other tiles gets an ArchLaunch of the launch
(same args, reads and writes), and the plan a GPU of that target runs computes what the cpu backend does."""

from __future__ import annotations

import numpy as np

import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.frontend.trace import trace
from aotc.ir.schedule import same_launch
from aotc.ir.templates import KernelKind
from aotc.kernels.scheduler import schedule_graph
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from tests.kernel_layer.kernel_kit import check

BOTH = CompileOptions(targets=("sm_80", "sm_90"))


class Proj(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 512)

    def forward(self, x):
        return F.gelu(self.fc(x))


def _graph(precision: str = "bf16"):
    # up to 65536 rows: 128x256 tiles fill sm_90's waves (1024 tiles on 132 SMs), so its heuristic takes them
    batch = Dim("batch", min=1, max=65536)
    model = Proj()
    spec = {"x": TensorSpec((batch, 64))}
    return lower(trace(model, spec, "proj"), CompileOptions(precision=precision))


def test_a_large_bf16_matmul_gets_wider_sm90_tiles() -> None:
    s = schedule_graph(_graph(), BOTH)
    (mm,) = [k for k in s.kernels if k.kind is KernelKind.MATMUL]
    (v,) = mm.arch_launches
    assert v.arch == "sm_90" and v.kernel.name.endswith("_sm90") and same_launch(mm, v.kernel)
    assert dict(mm.constexprs)["BLOCK_N"] == 128 and dict(v.kernel.constexprs)["BLOCK_N"] == 256
    assert v.kernel.grid != mm.grid  # half the column tiles
    # one target, or none: no arch launches
    for options in (CompileOptions(targets=("sm_80",)), CompileOptions(targets=("sm_90",)), None):
        assert not any(k.arch_launches for k in schedule_graph(_graph(), options).kernels)


def test_float32_matmuls_keep_one_kernel() -> None:
    s = schedule_graph(_graph("fp32"), BOTH)
    assert not any(k.arch_launches for k in s.kernels if k.kind is KernelKind.MATMUL)


def test_the_sm90_plan_matches_the_cpu_backend_under_the_interpreter() -> None:
    g = _graph()
    s = schedule_graph(g, BOTH)
    hopper = s.for_capability((9, 0))
    assert [k.name for k in hopper.kernels] != [k.name for k in s.kernels]
    rng = np.random.default_rng(0)
    for rows in (3, 130):
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        check(g, [x], {"batch": rows}, tol=(2e-2, 2e-2), schedule=hopper)


def test_explain_names_each_arch_launch_and_its_tiles() -> None:
    from aotc.kernels.explain import explain

    g = _graph()
    text = explain(g, schedule_graph(g, BOTH))
    assert "sm_90: " in text and "BLOCK_N=256" in text
