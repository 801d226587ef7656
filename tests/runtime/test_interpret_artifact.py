"""A model compiled the public way (aotc.compile; the suite builds no cubins, so the artifact holds the launch
plan and kernel sources) and loaded with ``device="interpret"`` runs its stored kernels under the Triton
interpreter and matches ``device="cpu"`` at two values of each dynamic dim. Also: what the Executable hands each
backend's ``prepare``, and that unverified weights are refused."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aotc
from aotc.artifact import read_artifact
from aotc.errors import ArtifactError, UnsupportedError
from aotc.ir.launch import KernelBinary
from aotc.ir.variant import Variant
from aotc.runtime import Executable
from aotc.runtime.backends import CpuBackend
from aotc_cli.loader import import_file

pytest.importorskip("triton")

MODELS = Path(__file__).resolve().parents[2] / "models"
# small configs: the interpreter's cost grows with the programs launched
CONFIGS: dict[str, dict[str, Any]] = {"mlp": {}, "cnn": {"width": 4}, "gpt2": {}}
DIMS = {
    "mlp": [{"batch": 1}, {"batch": 5}],
    "cnn": [{"batch": 1}, {"batch": 2}],
    "gpt2": [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 7}],
}


@cache
def _artifact_bytes(name: str) -> bytes:
    model, inputs = import_file(MODELS / f"{name}.py").build(**CONFIGS[name])
    return aotc.compile(model, inputs).artifact_bytes


def _feeds(exe: Executable, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for spec in exe.inputs:
        shape = tuple(d if isinstance(d, int) else dims[d.symbol_name] for d in spec.shape)
        if spec.dtype.is_int:
            out[spec.name] = rng.integers(0, 50, shape).astype(spec.dtype.np)
        else:
            out[spec.name] = rng.standard_normal(shape).astype(spec.dtype.np)
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_stored_kernels_run_under_the_interpreter(name: str) -> None:
    data = _artifact_bytes(name)
    art = read_artifact(data)
    assert art.kernel_features == ("kernels",) and art.kernels == {}  # no targets: sources only
    assert art.variants[0].plan is not None and art.variants[0].plan.kernels
    interp = aotc.load(data, device="interpret")
    cpu = aotc.load(data, device="cpu")
    assert interp.device == "interpret"
    for seed, dims in enumerate(DIMS[name]):
        feeds = _feeds(cpu, dims, seed)
        got, want = interp.run(feeds), cpu.run(feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)


def test_a_file_without_kernels_says_so_on_interpret() -> None:
    golden = Path(__file__).resolve().parents[1] / "golden" / "v2_mlp.aotc"
    with pytest.raises(UnsupportedError, match="has no kernels"):
        aotc.load(golden, device="interpret")


class _Recorder:
    """A backend recording what the Executable handed its prepare()."""

    name = "cpu"

    def __init__(self) -> None:
        self.calls: list[tuple[Variant, Mapping[str, KernelBinary]]] = []

    def prepare(self, variant: Variant, binaries: Mapping[str, KernelBinary]) -> Any:
        self.calls.append((variant, binaries))
        return CpuBackend().prepare(variant, binaries)


def test_each_backend_prepares_the_files_variants_with_its_binaries() -> None:
    """Every backend's ``prepare`` takes the variant (its graph and plan) and the file's binaries, empty when the
    file has none (no signature is inspected)."""
    art = read_artifact(_artifact_bytes("mlp"))
    backend = _Recorder()
    Executable(art, backend)  # type: ignore[arg-type]
    ((variant, binaries),) = backend.calls
    assert variant is art.variants[0] and variant.plan is not None and dict(binaries) == {}


def test_unverified_weights_are_refused_unless_allowed() -> None:
    data = _artifact_bytes("mlp")
    art = read_artifact(data, verify_weights=False)
    assert not art.weights_verified
    with pytest.raises(ArtifactError, match="verify_weights=False"):
        aotc.load(art, device="cpu")
    with pytest.raises(ArtifactError, match="allow_unverified_weights=True"):
        Executable(art, "cpu")
    exe = aotc.load(art, device="cpu", allow_unverified_weights=True)
    x = np.ones((2, exe.inputs[0].shape[1]), np.float32)
    np.testing.assert_array_equal(exe(x), aotc.load(data, device="cpu")(x))
