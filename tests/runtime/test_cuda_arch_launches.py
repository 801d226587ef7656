"""Per-target arch launches on the cuda backend (fake driver: each launch's source runs under the
Triton interpreter): a GPU launches the arch launch for its architecture, with that launch's grid, and
any other GPU the launch's own kernel; both compute what the cpu runner does."""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries
from fake_cuda_types import CUresult

from aotc.ir.evaluate import GraphRunner
from aotc.ir.schedule import ArchLaunch, Schedule
from aotc.ir.symbolic import floordiv, sym
from aotc.ir.variant import Variant
from aotc.runtime.backends.cuda import CudaBackend
from aotc.runtime.guards import Binder
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")


def _with_arch_launch(schedule: Schedule) -> Schedule:
    """add_bias gets an sm_90 arch launch with half the block, so twice the programs."""
    kernels = list(schedule.kernels)
    i = next(i for i, k in enumerate(kernels) if k.name == "add_bias")
    k = kernels[i]
    n = sym("n")
    v = k.replace(
        name="add_bias_sm90",
        source=k.source.replace("def add_bias(", "def add_bias_sm90(", 1),
        constexprs=(("BLOCK", 64),),
        grid=(floordiv(n * 8 + 63, 64), 1, 1),
    )
    kernels[i] = k.replace(arch_launches=(ArchLaunch("sm_90", v),))
    return dataclasses.replace(schedule, kernels=tuple(kernels))


ARCH_SCHEDULE = _with_arch_launch(SCHEDULE)


@pytest.mark.parametrize(
    ("capability", "name", "programs"),
    [((9, 0), "add_bias_sm90", 5), ((8, 0), "add_bias", 3), ((8, 9), "add_bias", 3)],
)
def test_the_gpu_launches_its_architectures_arch_launch(capability: tuple[int, int], name: str, programs: int) -> None:
    assert "n" in GRAPH.ranges, "the test schedule's grid is over the symbol n"
    fake = FakeDriver(capability=capability)
    binaries = fake_binaries(ARCH_SCHEDULE, archs=("sm_80", "sm_90"))
    fake.register(ARCH_SCHEDULE, binaries)
    backend = CudaBackend(driver=fake, graph_cache=0)
    with backend:
        program = backend.prepare(Variant(GRAPH, ARCH_SCHEDULE), binaries)
        feeds = _feeds(37, [1, 2, 3])
        env = Binder(GRAPH).bind(feeds)
        got = program.run(feeds, env)
        for a, b in zip(got, GraphRunner(GRAPH).run(feeds, env)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    bias = [(n, grid) for n, grid, *_ in fake.launches if n.startswith("add_bias")]
    assert bias == [(name, (programs, 1, 1))]


def test_for_capability_picks_the_newest_arch_launch_of_the_same_major_version() -> None:
    k = ARCH_SCHEDULE.kernel("add_bias")
    assert k.for_capability((9, 0)).name == "add_bias_sm90"
    assert k.for_capability((10, 0)).name == "add_bias"  # another major version: the launch's own kernel
    assert k.for_capability((8, 6)).name == "add_bias"
    assert SCHEDULE.for_capability((9, 0)) is SCHEDULE
    assert [c.name for c in ARCH_SCHEDULE.codes()][:2] == ["add_bias", "add_bias_sm90"]


def test_an_arch_launch_that_does_not_load_falls_back_to_the_launchs_own_kernel() -> None:
    """An sm_90 arch launch whose cubin the driver refuses (a CUDA 13.4 build on a 13.0 driver, say) and which has
    no PTX: the GPU runs the launch's own kernel (its portable PTX) instead, with a warning, and computes the
    same; the other launches are untouched."""
    fake = FakeDriver(capability=(9, 0), driver_version=13000)
    binaries = fake_binaries(ARCH_SCHEDULE, archs=("sm_80",))
    sm90 = fake_binaries(ARCH_SCHEDULE, archs=("sm_90a",))["add_bias_sm90"]
    refused = b"FAKE-CUBIN sm_90a refused\0"
    binaries["add_bias_sm90"] = dataclasses.replace(
        sm90, cubins=(dataclasses.replace(sm90.cubins[0], arch="sm_90", data=refused),), ptx=""
    )
    fake.register(ARCH_SCHEDULE, binaries)
    load = fake.cuModuleLoadData

    def refuse(image: int) -> tuple[object, object]:
        if ctypes.string_at(image, len(refused) - 1) == refused[:-1]:
            return CUresult.CUDA_ERROR_INVALID_IMAGE, None
        return load(image)

    fake.cuModuleLoadData = refuse
    with CudaBackend(driver=fake, graph_cache=0) as backend:
        with pytest.warns(
            RuntimeWarning, match=r"kernel add_bias_sm90 for sm_90 does not load .*CUDA_ERROR_INVALID_IMAGE"
        ):
            program = backend.prepare(Variant(GRAPH, ARCH_SCHEDULE), binaries)
        assert backend.fallbacks == ["add_bias_sm90"]
        feeds = _feeds(37, [1, 2, 3])
        env = Binder(GRAPH).bind(feeds)
        for a, b in zip(program.run(feeds, env), GraphRunner(GRAPH).run(feeds, env)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert [(n, grid) for n, grid, *_ in fake.launches if n.startswith("add_bias")] == [("add_bias", (3, 1, 1))]
