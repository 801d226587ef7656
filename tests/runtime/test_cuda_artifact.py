"""A model compiled the public way (aotc.compile: schedule + real ahead-of-time cubins and PTX in the artifact)
and loaded on the cuda backend over the fake driver: the artifact's schedule and binaries reach the backend,
the GPU picks its cubin (or the PTX on a newer GPU), and the outputs match the cpu backend at two batch sizes."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from fake_cuda import FakeDriver

import aotc
from aotc.artifact.reader import Artifact, read_artifact
from aotc.lowering.options import CompileOptions
from aotc.runtime import Executable
from aotc.runtime.backends.cuda import CudaBackend
from aotc_cli.loader import import_file

pytest.importorskip("triton")

MODELS = Path(__file__).resolve().parents[2] / "models"


@cache
def _artifact() -> Artifact:
    model, inputs = import_file(MODELS / "mlp.py").build()
    compiled = aotc.compile(model, inputs, options=CompileOptions(targets=("sm_80", "sm_90")))
    return read_artifact(compiled.artifact_bytes)


@pytest.mark.parametrize(("capability", "loaded"), [((9, 0), {"sm_90"}), ((8, 6), {"sm_80"}), ((12, 0), {"ptx"})])
def test_a_compiled_artifact_runs_on_the_cuda_backend(capability: tuple[int, int], loaded: set[str]) -> None:
    art = _artifact()
    assert art.kernels and art.variants[0].plan is not None
    fake = FakeDriver(capability=capability)
    fake.register(art.variants[0].plan, art.kernels)
    cpu = Executable(art, "cpu")
    rng = np.random.default_rng(0)
    with Executable(art, CudaBackend(driver=fake)) as exe:
        assert exe.device == "cuda"
        for batch in (1, 5, 1, 5):
            x = rng.standard_normal((batch, *cpu.inputs[0].shape[1:])).astype(np.float32)
            np.testing.assert_allclose(exe(x), cpu(x), rtol=2e-4, atol=2e-4)
    assert {m.arch for m in fake.modules} == loaded
    assert all(v == 0 for v in fake.live().values()), fake.live()
