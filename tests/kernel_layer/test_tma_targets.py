"""Which compiles get the sm_90 attention's tensor-descriptor loads: the launch for sm_90 takes them at a driver
floor whose PTX is 8.6 or newer (CUDA 12.7 on), whether sm_90 is the only target (the launch's own kernel) or
beside sm_80 (its sm_90 arch launch); the default 12.4 floor and sm_80 keep the pointer loads."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.frontend.trace import trace
from aotc.ir.templates import KernelKind
from aotc.kernels.scheduler import schedule_graph
from aotc.kernels.toolchain import choose_toolchain
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower

TMA = "tl.make_tensor_descriptor("


class Attention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def scheduled(targets, floor):
    spec = TensorSpec((2, 4, Dim("seq", min=1, max=256), 64), "bfloat16")
    g = lower(trace(Attention(), {"q": spec, "k": spec, "v": spec}), CompileOptions(targets=targets))
    return g, schedule_graph(g, SimpleNamespace(targets=targets, cuda_driver_floor=floor, tune_dims=()))


def attention(targets, floor):
    return next(k for k in scheduled(targets, floor)[1].kernels if k.kind is KernelKind.ATTENTION)


@pytest.fixture(autouse=True)
def _ptx86():
    try:
        chain = choose_toolchain("sm_90", "12.8")
    except Exception as e:  # no ptxas here that builds PTX 8.6
        pytest.skip(f"no toolchain for sm_90 at a 12.8 floor: {e}")
    if chain.ptx_version < 86:
        pytest.skip(f"sm_90 at a 12.8 floor builds PTX {chain.ptx_version}")


def test_sm90_alone_at_a_new_floor_loads_through_descriptors() -> None:
    k = attention(("sm_90",), "12.8")
    assert TMA in k.source and not k.arch_launches
    assert TMA not in attention(("sm_90",), "12.4").source


def test_beside_sm80_the_sm90_arch_launch_takes_them_and_sm80_keeps_pointers() -> None:
    k = attention(("sm_80", "sm_90"), "12.8")
    assert TMA not in k.source
    (arch,) = k.arch_launches
    assert arch.arch == "sm_90" and TMA in arch.kernel.source


def test_explain_says_what_an_sm90_only_launch_moves_by_tma() -> None:
    from aotc.kernels.explain import explain

    (line,) = [x for x in explain(*scheduled(("sm_90",), "12.8")).splitlines() if "(attention, grid" in x]
    assert ", TMA loads of q, k, v, TMA store of out)" in line
    assert "TMA" not in explain(*scheduled(("sm_90",), "12.4"))
