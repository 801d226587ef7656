"""Upsampling (``F.interpolate`` / ``nn.Upsample``: nearest, bilinear and bicubic, align_corners both ways, by scale or by
size) through ``aotc.compile(torch_module, specs)`` with dynamic batch, height and width, against torch eager at
two sizes on the cpu and reference backends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec

torch = torch_module()
TF = torch.nn.functional
BATCH, H, W = Dim("batch", min=1, max=4), Dim("h", min=2, max=32), Dim("w", min=2, max=32)


class Fn(torch.nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(x)


def check(fn: Any, spec: tuple, shapes: list[tuple], devices: tuple = ("cpu", "reference")) -> None:
    module = Fn(fn).eval()
    compiled = aotc.compile(module, {"x": TensorSpec(spec)})
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        for dev in devices:
            got = aotc.load(compiled.artifact_bytes, device=dev)(x=x)
            assert got.shape == want.shape, (dev, shape, got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{dev} at {shape}")


DYNAMIC = {
    "nearest_x2": lambda x: TF.interpolate(x, scale_factor=2),
    "nearest_x2_module": torch.nn.Upsample(scale_factor=2, mode="nearest"),
    "nearest_uneven_scales": lambda x: TF.interpolate(x, scale_factor=(2, 3)),
    "nearest_x1_5": lambda x: TF.interpolate(x, scale_factor=1.5),
    "bilinear_x2": lambda x: TF.interpolate(x, scale_factor=2, mode="bilinear"),
    "bilinear_x2_align_corners": lambda x: TF.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
    "bilinear_x1_5": lambda x: TF.interpolate(x, scale_factor=1.5, mode="bilinear"),
    "bicubic_x2": lambda x: TF.interpolate(x, scale_factor=2, mode="bicubic"),
    "bicubic_x2_align_corners": lambda x: TF.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True),
    "bilinear_to_a_size_of_the_input": lambda x: TF.interpolate(x, size=(x.shape[2] * 2 + 1, x.shape[3]),
                                                                mode="bilinear"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(DYNAMIC))
def test_upsampling_over_dynamic_height_and_width_matches_torch(case: str) -> None:
    check(DYNAMIC[case], (BATCH, 3, H, W), [(2, 3, 5, 7), (1, 3, 8, 4)])


STATIC = {
    "nearest_to_size": lambda x: TF.interpolate(x, size=(7, 9)),
    "bilinear_to_size": lambda x: TF.interpolate(x, size=(7, 9), mode="bilinear"),
    "bilinear_down_align_corners": lambda x: TF.interpolate(x, size=(3, 2), mode="bilinear", align_corners=True),
    "bilinear_odd_scale": lambda x: TF.interpolate(x, scale_factor=1.7, mode="bilinear"),
    "bicubic_down_to_size": lambda x: TF.interpolate(x, size=(3, 4), mode="bicubic"),
    "linear_1d": lambda x: TF.interpolate(x[:, :, 0], scale_factor=2.5, mode="linear"),
    "nearest_1d": lambda x: TF.interpolate(x[:, :, 0], size=11),
    # over a dynamic dim torch.export computes this size in Python floats (torch.sym_float nodes): refused there
    "nearest_recomputed_scale": lambda x: TF.interpolate(x, scale_factor=1.5, recompute_scale_factor=True),
}


@pytest.mark.parametrize("case", list(STATIC))
def test_upsampling_of_static_spatial_dims_matches_torch(case: str) -> None:
    check(STATIC[case], (BATCH, 3, 5, 6), [(2, 3, 5, 6), (3, 3, 5, 6)])


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_downsampling_by_half_over_dynamic_dims_takes_torchs_truncated_size_guards(mode: str) -> None:
    """torch guards the output size as ``math.trunc(0.5 * torch.sym_float(h)) >= 2``: read as (h // 2) >= 2."""
    h, w = Dim("h", min=4, max=32), Dim("w", min=4, max=32)
    check(lambda x: TF.interpolate(x, scale_factor=0.5, mode=mode), (BATCH, 3, h, w), [(2, 3, 5, 7), (1, 3, 8, 4)])


def test_a_scale_without_an_exact_length_over_a_dynamic_dim_is_refused_at_its_line() -> None:
    with pytest.raises(aotc.TraceError, match=r"test_torch_upsample\.py:\d+: .*scale_factor 1\.7 over the dynamic "
                                              r"dim h has no exact output length"):  # fmt: skip
        aotc.compile(Fn(lambda x: TF.interpolate(x, scale_factor=1.7)), {"x": TensorSpec((BATCH, 3, H, W))})


def test_the_kernels_match_under_the_triton_interpreter() -> None:
    pytest.importorskip("triton")
    check(DYNAMIC["bilinear_x2"], (BATCH, 3, H, W), [(2, 3, 5, 7)], devices=("interpret",))
