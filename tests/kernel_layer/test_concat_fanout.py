"""Nested concats (rolls of rolls; Swin's shifted-window masks built by slice assignment) each compute their
parts under their own masks, so inline they multiply a kernel's code: past ``CONCAT_FANOUT`` parts' worth the
fusion plan stores the inner parts (aotc/kernels/fusion.py), and the kernels still compute the same values."""

from __future__ import annotations

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec
from aotc.frontend.functions import cat
from aotc.kernels.fusion import CONCAT_FANOUT

DEPTH = 8  # 2 parts a level: 2**8 = 256 parts' worth inline without the rule


def rolls(x):
    for level in range(DEPTH):
        axis = 1 + level % 2
        x = cat([x[:, 1:, :], x[:, :1, :]] if axis == 1 else [x[:, :, 1:], x[:, :, :1]], dim=axis)
        x = x * 1.5 + 0.25  # a pointwise op between levels, as a residual add would be
    return x


def reference(x: np.ndarray) -> np.ndarray:
    for level in range(DEPTH):
        x = np.roll(x, -1, axis=1 + level % 2) * np.float32(1.5) + np.float32(0.25)
    return x


@pytest.fixture(scope="module")
def compiled():
    spec = {"x": TensorSpec((Dim("batch", min=1, max=8), 8, 8))}
    return aotc.compile(rolls, spec, options=aotc.CompileOptions(targets=()))


def test_nested_concats_store_their_parts_past_the_fanout(compiled) -> None:
    assert "through nested concats" in compiled.explain()
    for k in compiled.schedule.kernels:
        assert k.source.count("tl.where(") <= 2 * CONCAT_FANOUT, k.name


@pytest.mark.parametrize("device", ["cpu", "interpret"])
def test_the_stored_parts_compute_the_same_values(compiled, device: str) -> None:
    if device == "interpret":
        pytest.importorskip("triton")
    exe = aotc.load(compiled.artifact_bytes, device=device)
    x = np.random.default_rng(0).standard_normal((3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(exe(x=x), reference(x), rtol=1e-5, atol=1e-5)
