"""Autotuning's plumbing, without a GPU: candidates per launch, one plan per candidate round run by the
cuda backend on the fake driver (kernels interpreted), the winner recorded as the launch's variant for the
GPU's target, and the clear errors. The fake driver has no clock, so the tests choose the times."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries

import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc import autotune as at
from aotc.errors import AotcError, UnsupportedError
from aotc.frontend.trace import trace
from aotc.ir.schedule import Schedule
from aotc.ir.templates import KernelKind
from aotc.kernels.scheduler import schedule_graph
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from tests.kernel_layer.kernel_kit import check

pytest.importorskip("triton")
TARGETS = ("sm_80", "sm_90")


class Proj(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 96)

    def forward(self, x):
        return F.relu(self.fc(x))


def _graph():
    spec = {"x": TensorSpec((Dim("batch", min=1, max=48), 64))}
    return lower(trace(Proj(), spec, "proj"), CompileOptions(precision="bf16"))


def _fake_compile(kernels, targets):
    return fake_binaries(Schedule(tuple(kernels), (), 0), archs=tuple(targets))


def _measure(fake: FakeDriver, favourite: int, ran: list[str]):
    """Runs each plan for real on the fake driver, then reports candidate ``favourite`` as the fastest."""
    real = at._cuda_measure(fake, repeats=1)

    def measure(graph, plan, binaries, feeds, env):
        fake.register(plan, binaries)
        ms = real(graph, plan, binaries, feeds, env)
        ran.extend(k.name for k in plan.kernels if k.kind is KernelKind.MATMUL)
        return [0.1 if k.name.endswith(f"t{favourite}") else t for k, t in zip(plan.kernels, ms)]

    return measure


def test_the_fastest_candidate_becomes_the_targets_variant() -> None:
    g = _graph()
    schedule = schedule_graph(g, CompileOptions(targets=TARGETS))
    fake, ran = FakeDriver(capability=(9, 0)), []
    tuned, report = at.autotune(
        g, schedule, TARGETS, dims={"batch": 5}, driver=fake, measure=_measure(fake, 2, ran), compile=_fake_compile
    )
    (i,) = [i for i, k in enumerate(schedule.kernels) if k.kind is KernelKind.MATMUL]
    (v,) = tuned.kernels[i].arch_launches
    assert v.arch == "sm_90" and v.kernel.name == f"{schedule.kernels[i].name}_sm90t2"
    (t,) = report.launches
    # the fake's clock reads 0.25 ms for every launch; the test makes candidate 2 take 0.1
    assert t.winner == 2 and t.candidates[2][1] == 0.1 and t.candidates[0][1] == 0.25
    assert len(ran) == len(t.candidates)  # one plan per candidate round, each run on the (fake) GPU
    assert report.arch == "sm_90" and report.dims == {"batch": 5}
    assert "1 launches" in report.lines()[0] and "2.50x over the heuristic" in report.lines()[1]
    assert report.to_meta()["launches"][0]["ms"] == 0.1
    hopper = tuned.for_capability((9, 0))
    x = np.random.default_rng(0).standard_normal((7, 64)).astype(np.float32)
    check(g, [x], {"batch": 7}, tol=(2e-2, 2e-2), schedule=hopper)
    assert tuned.for_capability((8, 0)).kernels[i].name == schedule.kernels[i].name


def test_the_heuristic_is_kept_when_nothing_beats_it() -> None:
    g = _graph()
    schedule = schedule_graph(g, CompileOptions(targets=TARGETS))
    fake = FakeDriver(capability=(8, 0))

    def measure(graph, plan, binaries, feeds, env):
        return [1.0 if "_sm80t" in k.name else 0.1 for k in plan.kernels]

    tuned, report = at.autotune(g, schedule, TARGETS, driver=fake, measure=measure, compile=_fake_compile)
    assert tuned.kernels == schedule.kernels
    assert report.arch == "sm_80" and report.dims == {"batch": 48} and report.launches[0].winner == 0
    assert "heuristic kept" in "\n".join(report.lines())


def test_a_failing_candidate_counts_as_never_faster() -> None:
    g = _graph()
    schedule = schedule_graph(g, CompileOptions(targets=TARGETS))

    def compile(kernels, targets):
        if any(k.name.endswith("t1") for k in kernels):
            raise AotcError("does not compile")
        return _fake_compile(kernels, targets)

    def measure(graph, plan, binaries, feeds, env):
        return [0.1 if k.name.endswith("t1") else 1.0 for k in plan.kernels]

    _, report = at.autotune(g, schedule, TARGETS, driver=FakeDriver(), measure=measure, compile=compile)
    t = report.launches[0]
    assert t.candidates[1] == ("failed", math.inf) and t.winner != 1


def test_candidates_fit_the_problem_and_shared_memory() -> None:
    g = _graph()
    (k,) = [k for k in schedule_graph(g).kernels if k.kind is KernelKind.MATMUL]
    cands = at.tile_candidates(g, k, 90)
    assert cands[0] is None and len(cands) == len(set(cands)) > 3
    for c in cands[1:]:
        assert c.block_m <= 64 and c.block_n <= 128 and c.block_k <= 64  # rows <= 48, N = 96, K = 64
        assert (c.block_m + c.block_n) * c.block_k * 2 * c.num_stages <= at.SHARED_LIMIT[90]


def test_errors_name_what_is_wrong() -> None:
    g = _graph()
    schedule = schedule_graph(g)
    with pytest.raises(UnsupportedError, match="--autotune measures kernels on an NVIDIA GPU"):
        at.autotune(g, schedule, TARGETS, driver=_NoGpu())
    with pytest.raises(UnsupportedError, match="add --target sm_80"):
        at.autotune(g, schedule, ("sm_90",), driver=FakeDriver(capability=(8, 0)))
    with pytest.raises(AotcError, match="no dim of that name"):
        at.tuning_env(g, {"seq": 4})
    with pytest.raises(AotcError, match=r"batch=99: expected an int in \[1, 48\]"):
        at.tuning_env(g, {"batch": 99})


class _NoGpu:
    def __getattr__(self, name: str):
        raise RuntimeError("no CUDA driver")


class _Attention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def test_candidates_are_built_at_the_compiles_driver_floor() -> None:
    """At a CUDA 12.8 floor the sm_90 attention candidates load through tensor descriptors, as the artifact's own
    kernels do (timing the pointer form would tune another kernel than the one shipped)."""
    from aotc.kernels.toolchain import choose_toolchain

    try:
        if choose_toolchain("sm_90", "12.8").ptx_version < 86:
            pytest.skip("no PTX 8.6 toolchain for sm_90 here")
    except UnsupportedError as e:
        pytest.skip(str(e))
    spec = TensorSpec((1, 2, Dim("seq", min=1, max=64), 64), "bfloat16")
    g = lower(trace(_Attention(), {"q": spec, "k": spec, "v": spec}), CompileOptions(targets=("sm_90",)))
    schedule = schedule_graph(g, CompileOptions(targets=("sm_90",), cuda_driver_floor="12.8"))
    sources: dict[str, list[bool]] = {"12.8": [], "12.4": []}
    for floor, seen in sources.items():

        def measure(graph, plan, binaries, feeds, env, seen=seen):
            seen += ["tl.make_tensor_descriptor(" in k.source for k in plan.kernels if k.kind is KernelKind.ATTENTION]
            return [1.0 for _ in plan.kernels]

        at.autotune(
            g, schedule, ("sm_90",), driver=FakeDriver(capability=(9, 0)), measure=measure, compile=_fake_compile,
            driver_floor=None if floor == "12.4" else floor,
        )  # fmt: skip
    assert len(sources["12.8"]) > 3 and all(sources["12.8"])
    assert sources["12.4"] and not any(sources["12.4"])
