"""The cuda backend behind ``Executable`` (over the fake driver): numpy in and out, ``outputs="device"``, GPU
tensors as inputs read in place with their guards checked, and ``close()`` / ``with`` freeing the device."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries

from aotc.artifact.reader import read_artifact
from aotc.errors import AotcError, GuardError, UnsupportedError
from aotc.ir.evaluate import GraphRunner
from aotc.ir.launch import KernelBinary
from aotc.ir.variant import Variant
from aotc.runtime import Executable
from aotc.runtime.backends.cuda import CudaBackend, CudaProgram, DeviceArray
from tests.runtime.runtime_graphs import artifact_bytes
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")

BINARIES = fake_binaries(SCHEDULE)


class WiredBackend(CudaBackend):
    """A file whose variant has SCHEDULE as its plan and BINARIES as its kernels."""

    def prepare(self, variant: Variant, binaries: Mapping[str, KernelBinary]) -> CudaProgram:
        return super().prepare(variant.replace(plan=SCHEDULE), BINARIES)


def _exe(outputs: str = "numpy") -> tuple[FakeDriver, Executable]:
    fake = FakeDriver()
    fake.register(SCHEDULE, BINARIES)
    return fake, Executable(read_artifact(artifact_bytes(GRAPH)), WiredBackend(driver=fake), outputs=outputs)


def _want(x: np.ndarray, ids: np.ndarray) -> list[np.ndarray]:
    return GraphRunner(GRAPH).run([x, ids], {"n": x.shape[0]})


def test_numpy_in_numpy_out_and_device_out() -> None:
    fake, exe = _exe()
    with exe:
        assert exe.device == "cuda"
        x, ids = _feeds(5, [3, 1, 4])
        for got, want in zip(exe(x, ids=ids), _want(x, ids)):
            assert isinstance(got, np.ndarray)
            np.testing.assert_allclose(got, want, rtol=1e-6)
        out = exe.run({"x": x, "ids": ids}, outputs="device")
        assert all(isinstance(o, DeviceArray) for o in out)
        np.testing.assert_allclose(out[2].numpy(), _want(x, ids)[2], rtol=1e-6)
        del out
    assert all(v == 0 for v in fake.live().values()), fake.live()


def test_outputs_device_as_the_executable_default() -> None:
    _, exe = _exe("device")
    with exe:
        x, ids = _feeds(2, [0, 0, 9])
        *_, g = exe(x=x, ids=ids)
        assert isinstance(g, DeviceArray) and g.shape == (3, 4)
        assert isinstance(exe.run({"x": x, "ids": ids}, outputs="numpy")[0], np.ndarray)
        with pytest.raises(AotcError, match="outputs must be 'numpy' or 'device', got 'gpu'"):
            exe.run({"x": x, "ids": ids}, outputs="gpu")


def test_outputs_device_needs_the_cuda_backend() -> None:
    with pytest.raises(AotcError, match="outputs='device' needs device='cuda'; this executable runs on cpu"):
        Executable(read_artifact(artifact_bytes(GRAPH)), "cpu", outputs="device")


def test_gpu_inputs_are_checked_by_the_guards_and_read_in_place() -> None:
    fake, exe = _exe()
    with exe:
        x, ids = _feeds(4, [1, 2, 3])
        got = exe(fake.device_array(x), fake.device_array(ids))
        for a, b in zip(got, _want(x, ids)):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        with pytest.raises(GuardError, match="input 'x' has dtype float64, expected float32"):
            exe(fake.device_array(x.astype(np.float64)), ids)
        with pytest.raises(GuardError, match=r"input 'x' dim 1 = 4, expected 8"):
            exe(fake.device_array(x[:, :4]), ids)
        with pytest.raises(GuardError, match="C-contiguous"):
            exe(x=fake.device_array(np.ones((8, 8), np.float32)).transposed(), ids=fake.device_array(ids))


def test_an_artifact_without_kernels_is_refused_naming_the_device() -> None:
    fake = FakeDriver()
    with pytest.raises(UnsupportedError, match=r"^device 'cuda:0' is not available for this artifact: its variant"):
        Executable(read_artifact(artifact_bytes(GRAPH)), CudaBackend(driver=fake, label="cuda:0"))
    assert fake.live()["contexts"] == 0  # the failed load released what it held
