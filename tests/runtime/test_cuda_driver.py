"""The cuda driver layer over the fake driver: which image a GPU loads (cubin for its arch, else the PTX, else a
clear error), a driver too old for the PTX, the large-shared-memory opt-in, cluster launches, scratch buffers,
CUDA errors named; and, on this machine without cuda-bindings, `device="cuda"` gives one clear error while
`device=None` quietly stays on the cpu."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries

import aotc.runtime
from aotc.errors import ExecError, UnsupportedError, VerifyError
from aotc.ir.evaluate import GraphRunner
from aotc.ir.variant import Variant
from aotc.runtime.backends import CpuBackend, default_backend, get_backend
from aotc.runtime.backends.cuda import CudaBackend, CudaError, probe, runs_here
from aotc.runtime.backends.cuda.modules import choose_image, ptx_driver_needs, runs_on
from aotc.runtime.guards import Binder
from tests.runtime.runtime_graphs import artifact_bytes
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

cuda_bindings_missing = pytest.mark.skipif(
    __import__("importlib").util.find_spec("cuda") is not None, reason="cuda-bindings is installed here"
)


def _loaded_archs(fake: FakeDriver, **binary_args: object) -> set[str]:
    binaries = fake_binaries(SCHEDULE, **binary_args)  # type: ignore[arg-type]
    fake.register(SCHEDULE, binaries)
    with CudaBackend(driver=fake) as backend:
        program = backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
        feeds = _feeds(3, [1, 2, 3])
        for a, b in zip(program.run(feeds, Binder(GRAPH).bind(feeds)), GraphRunner(GRAPH).run(feeds, {"n": 3})):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        return {m.arch for m in fake.modules}


@pytest.mark.parametrize(
    ("capability", "archs", "loaded"),
    [
        ((9, 0), ("sm_80", "sm_90a"), {"sm_90a"}),  # Hopper: its arch-specific cubin
        ((8, 0), ("sm_80", "sm_90a"), {"sm_80"}),
        ((8, 6), ("sm_80", "sm_90a"), {"sm_80"}),  # same major version, newer minor: the sm_80 cubin runs
        ((8, 9), ("sm_80", "sm_86"), {"sm_86"}),  # the newest compatible minor version wins
        ((12, 0), ("sm_80", "sm_90a"), {"ptx"}),  # Blackwell: nothing fits, the driver JIT-compiles the PTX
        ((10, 0), ("sm_80", "sm_90a", "sm_100"), {"sm_100"}),
    ],
)
def test_the_gpu_loads_the_image_for_its_arch(capability, archs, loaded) -> None:
    assert _loaded_archs(FakeDriver(capability=capability), archs=archs) == loaded


def test_no_image_for_the_gpu_names_it_its_arch_and_what_the_artifact_has() -> None:
    fake = FakeDriver(capability=(12, 0), name="NVIDIA RTX PRO 6000")
    binaries = fake_binaries(SCHEDULE, archs=("sm_80", "sm_90a"), ptx=False)
    fake.register(SCHEDULE, binaries)
    with CudaBackend(driver=fake) as backend, pytest.raises(UnsupportedError) as err:
        backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
    assert str(err.value) == (
        "kernel add_bias has no code for NVIDIA RTX PRO 6000 (sm_120): the artifact has cubins for sm_80, sm_90a "
        "and no PTX; recompile with --target sm_120"
    )
    assert fake.live()["modules"] == 0


def test_a_gpu_older_than_the_ptx_is_refused() -> None:
    fake = FakeDriver(capability=(7, 5), name="Tesla T4")
    binaries = fake_binaries(SCHEDULE)
    with CudaBackend(driver=fake) as backend, pytest.raises(UnsupportedError, match=r"Tesla T4 \(sm_75\)"):
        backend.prepare(Variant(GRAPH, SCHEDULE), binaries)


def test_a_driver_too_old_for_the_ptx_names_both_versions() -> None:
    fake = FakeDriver(capability=(12, 0), name="NVIDIA B200", driver_version=12080)
    binaries = fake_binaries(SCHEDULE, ptx_version="9.4")
    with CudaBackend(driver=fake) as backend, pytest.raises(UnsupportedError) as err:
        backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
    assert str(err.value) == (
        "this artifact's kernels need a CUDA 13.4 driver or newer (kernel add_bias is PTX 9.4); NVIDIA B200 has a "
        "CUDA 12.8 driver: update the NVIDIA driver, or recompile with --cuda-driver-floor 12.8"
    )
    # One image alone says the same of itself (what device=None's choice and a file without a floor rely on).
    with pytest.raises(UnsupportedError) as err:
        choose_image(next(iter(binaries.values())), probe(fake))
    assert "PTX 9.4, which needs a CUDA 13.4 driver" in str(err.value)
    assert "NVIDIA B200 has driver CUDA 12.8" in str(err.value)


def test_a_cubin_the_driver_refuses_falls_back_to_the_ptx() -> None:
    assert _loaded_archs(FakeDriver(reject_cubins=True)) == {"ptx"}
    fake = FakeDriver(reject_cubins=True)
    binaries = fake_binaries(SCHEDULE, ptx=False)
    with CudaBackend(driver=fake) as backend, pytest.raises(UnsupportedError) as err:
        backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
    assert "sm_90a cubin (PTX 8.7, Triton 3.9.0) fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in str(err.value)


def test_arch_rules() -> None:
    assert runs_on("sm_90a", (9, 0)) and not runs_on("sm_90a", (10, 0))
    assert runs_on("sm_80", (8, 9)) and not runs_on("sm_86", (8, 0)) and not runs_on("sm_80", (9, 0))
    assert ptx_driver_needs("8.7") == (12, 8) and ptx_driver_needs("8.4") == (12, 4)
    assert ptx_driver_needs("9.4") == (13, 4) and ptx_driver_needs("garbage") is None


def test_large_shared_memory_opts_in_and_too_much_is_refused() -> None:
    _loaded_archs(FakeDriver(), shared=100 * 1024)  # the fake fails a launch above 48 KiB without the attribute
    fake = FakeDriver()
    binaries = fake_binaries(SCHEDULE, shared=300 * 1024)
    fake.register(SCHEDULE, binaries)
    with CudaBackend(driver=fake) as backend, pytest.raises(UnsupportedError, match="needs 307200 bytes of shared"):
        backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
    assert fake.live()["modules"] == 0


def test_cluster_kernels_launch_with_their_cluster_and_scratch_is_passed() -> None:
    fake = FakeDriver()
    _loaded_archs(fake, num_ctas=2, global_scratch=64)  # the fake checks the cluster and the scratch size
    assert {cluster for *_, cluster in fake.launches} == {2}
    assert ("row_sum", (6, 1, 1), 128, 0, 2) in fake.launches  # grid x doubled for 2 CTAs per program


def test_a_schedule_that_does_not_match_its_binary_is_refused() -> None:
    binaries = fake_binaries(SCHEDULE)
    b = binaries["row_sum"]
    bad = dataclasses.replace(b.cubins[1].meta, params=("*fp32", "*i8", "*i8"))
    binaries["row_sum"] = dataclasses.replace(b, cubins=(b.cubins[0], dataclasses.replace(b.cubins[1], meta=bad)))
    fake = FakeDriver()
    fake.register(SCHEDULE, binaries)
    with CudaBackend(driver=fake) as backend, pytest.raises(VerifyError, match="kernel row_sum: its binary takes"):
        backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
    with CudaBackend(driver=fake) as backend, pytest.raises(VerifyError, match="has no compiled binary"):
        backend.prepare(Variant(GRAPH, SCHEDULE), {k: v for k, v in binaries.items() if k != "row_sum"})
    with CudaBackend(driver=fake) as backend, pytest.raises(UnsupportedError, match="has no compiled kernels"):
        backend.prepare(Variant(GRAPH, SCHEDULE), {})


def test_cuda_errors_carry_their_name() -> None:
    with CudaBackend(driver=FakeDriver()) as backend:
        with pytest.raises(CudaError, match=r"cuMemFree failed on NVIDIA H100.*: CUDA_ERROR_INVALID_VALUE") as err:
            backend.device.free(12345)
        assert err.value.name == "CUDA_ERROR_INVALID_VALUE" and isinstance(err.value, ExecError)


def test_no_gpu_is_one_clear_error() -> None:
    with pytest.raises(UnsupportedError, match=r"device 'cuda' is not available: .*CUDA_ERROR_NO_DEVICE"):
        CudaBackend(driver=FakeDriver(devices=0))
    with pytest.raises(UnsupportedError, match=r"device 'cuda:3' is not available: the driver sees 1 GPU"):
        CudaBackend(driver=FakeDriver(), ordinal=3)


@cuda_bindings_missing
def test_device_cuda_without_cuda_bindings_says_how_to_install_them() -> None:
    for device in ("cuda", "cuda:0"):
        with pytest.raises(UnsupportedError) as err:
            aotc.runtime.load(artifact_bytes(GRAPH), device=device)
        assert str(err.value).startswith(f"device '{device}' is not available: NVIDIA's cuda-bindings is not installed")
        assert str(err.value).endswith("pip install aotc[cuda]")
    with pytest.raises(Exception, match="non-negative integer"):
        get_backend("cuda:x")


def test_device_none_probing_never_raises() -> None:
    class Broken:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError("driver library is broken")

    assert probe(Broken()) is None
    assert probe(FakeDriver(devices=0)) is None
    assert probe(FakeDriver(capability=(8, 6))).arch == "sm_86"  # type: ignore[union-attr]
    binaries = fake_binaries(SCHEDULE)
    assert runs_here(binaries.values(), driver=FakeDriver())
    assert not runs_here(binaries.values(), driver=FakeDriver(capability=(7, 0)))
    assert not runs_here([object()], driver=FakeDriver())  # type: ignore[list-item]
    assert isinstance(default_backend(None), CpuBackend)
    if probe() is None:  # this machine: no GPU or no bindings
        assert isinstance(default_backend(binaries.values()), CpuBackend)


def test_a_cubin_is_placed_by_the_arch_its_code_targets() -> None:
    """compile_kernels files the sm_90 build under "sm_90" while its code is sm_90a (Hopper only)."""
    from aotc.runtime.backends.cuda.driver import DeviceInfo

    b = fake_binaries(SCHEDULE, archs=("sm_80", "sm_90a"))["row_sum"]
    b = dataclasses.replace(b, cubins=(b.cubins[0], dataclasses.replace(b.cubins[1], arch="sm_90")))
    hopper = DeviceInfo(0, "H100", (9, 0), 13000, 227 * 1024)
    blackwell = DeviceInfo(0, "B200", (10, 0), 13000, 227 * 1024)
    assert choose_image(b, hopper).arch == "sm_90"
    assert choose_image(b, blackwell).kind == "ptx"
