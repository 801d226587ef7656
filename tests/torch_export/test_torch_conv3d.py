"""3-D (video) convolution, pooling and batch norm through ``aotc.compile(torch_module, specs)``: each against torch
eager with a dynamic batch and a dynamic number of frames on the cpu and reference backends, the kernels once under
the Triton interpreter, and the refusals at the model's line."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec

torch = torch_module()
nn = torch.nn
TF = torch.nn.functional
BATCH = Dim("batch", min=1, max=8)
FRAMES = Dim("frames", min=4, max=16)


def check(module: Any, spec: tuple, shapes: list[tuple], devices: tuple = ("cpu", "reference")) -> None:
    """``module`` compiled over ``{"input": spec}`` matches eager at each of ``shapes`` on each of ``devices``."""
    module.eval()
    compiled = aotc.compile(module, {"input": TensorSpec(spec)})
    runs = {dev: aotc.load(compiled.artifact_bytes, device=dev) for dev in devices}
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        for dev, run in runs.items():
            got = run(input=x)
            assert got.shape == want.shape, (dev, shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{dev} at {shape}")


class Fn(nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, input: Any) -> Any:  # named as torch's own modules name it
        return self.fn(input)


def video(module: Any, channels: int, hw: tuple = (9, 10)) -> None:
    """Dynamic batch and frames, at two values of each."""
    check(module, (BATCH, channels, FRAMES, *hw), [(2, channels, 5, *hw), (3, channels, 8, *hw)])


CONVS = {
    "r3d_stem": nn.Conv3d(3, 4, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False),
    "groups_stride_dilation": nn.Conv3d(
        4, 6, (3, 3, 2), stride=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1), groups=2
    ),
    "depthwise": nn.Conv3d(4, 8, 3, padding=1, groups=4),
    "r2plus1d_temporal": nn.Conv3d(4, 5, (3, 1, 1), padding=(1, 0, 0)),
    "same_padding": nn.Conv3d(3, 2, (2, 3, 4), padding="same"),
    "pointwise_strided": nn.Conv3d(3, 5, 1, stride=2),
}


@pytest.mark.parametrize("case", list(CONVS))
def test_3d_convolution_matches_torch_over_dynamic_batch_and_frames(case: str) -> None:
    torch.manual_seed(0)
    module = CONVS[case]
    video(module, module.in_channels)


POOLS = {
    "max_padded_strided": nn.MaxPool3d(3, stride=(2, 1, 2), padding=1),
    "max_s3d_spatial": nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
    "max_ceil_mode": nn.MaxPool3d(2, stride=2, ceil_mode=True),
    "avg_include_pad": nn.AvgPool3d((2, 3, 3), stride=1, padding=(1, 1, 0)),
    "avg_exclude_pad": nn.AvgPool3d((3, 3, 2), stride=2, padding=1, count_include_pad=False),
    "avg_ceil_mode": nn.AvgPool3d(2, stride=2, ceil_mode=True, count_include_pad=False),
    "adaptive_global": nn.AdaptiveAvgPool3d(1),
}


@pytest.mark.parametrize("case", list(POOLS))
def test_3d_pooling_matches_torch_over_dynamic_batch_and_frames(case: str) -> None:
    video(POOLS[case], 3)


@pytest.mark.parametrize(
    "dhw, out",
    [((4, 6, 6), (2, 3, 3)), ((5, 7, 6), (3, 2, 4)), ((4, 6, 5), (None, 3, 5)), ((2, 2, 2), (3, 4, 4))],
    ids=["dividing", "overlapping", "none-keeps-a-size", "repeated-bins"],
)
def test_adaptive_avg_pool3d_to_any_size_over_static_input_sizes(dhw: tuple, out: tuple) -> None:
    check(nn.AdaptiveAvgPool3d(out), (BATCH, 2, *dhw), [(1, 2, *dhw), (3, 2, *dhw)])


@pytest.mark.parametrize("pool", [nn.MaxPool3d((8, 9, 11), ceil_mode=True)])  # torch refuses avg_pool3d so
def test_a_ceil_mode_kernel_past_static_sizes_is_one_window_over_all_of_them(pool: Any) -> None:
    check(pool, (BATCH, 2, 8, 5, 6), [(1, 2, 8, 5, 6), (3, 2, 8, 5, 6)])


def test_a_video_block_with_5d_batch_norm_and_the_functional_form() -> None:
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv3d(3, 4, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm3d(4)
            with torch.no_grad():  # statistics away from (0, 1), so the norm is not the identity
                self.bn.running_mean.normal_()
                self.bn.running_var.uniform_(0.5, 2.0)
            self.weight = nn.Parameter(torch.randn(2, 4, 1, 3, 3))

        def forward(self, input: Any) -> Any:
            y = torch.relu(self.bn(self.conv(input)))
            y = TF.conv3d(TF.max_pool3d(y, (1, 2, 2)), self.weight, stride=(1, 1, 2))
            return TF.adaptive_avg_pool3d(TF.avg_pool3d(y, (2, 1, 1)), (1, 1, 1)).flatten(1)

    video(Block(), 3, (8, 10))


def test_the_kernels_match_under_the_triton_interpreter() -> None:
    """The 3-D convolution as the implicit-GEMM (and the depthwise direct) template over three spatial dims, and
    the 3-D pools' window slices, as generated Triton kernels."""
    pytest.importorskip("triton")
    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Conv3d(2, 4, (3, 3, 3), stride=(1, 2, 1), padding=1),
        nn.Conv3d(4, 4, 3, padding=(0, 1, 1), groups=4),
        nn.MaxPool3d((2, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
        nn.AvgPool3d(2, stride=1, ceil_mode=True, count_include_pad=False),
    )
    frames = Dim("frames", min=6, max=16)  # the least the pools leave a frame of
    check(module, (BATCH, 2, frames, 6, 7), [(2, 2, 6, 6, 7), (1, 2, 9, 6, 7)], devices=("interpret",))


def test_3d_refusals_name_the_models_line_and_the_op() -> None:
    def compile_fn(fn: Any, spec: tuple) -> None:
        aotc.compile(Fn(fn).eval(), {"input": TensorSpec(spec)})

    frames = (BATCH, 2, FRAMES, 6, 6)
    with pytest.raises(aotc.TraceError, match=r"test_torch_conv3d\.py:\d+: max_pool3d with dilation \[2, 1, 1\]"):
        compile_fn(lambda x: TF.max_pool3d(x, 2, dilation=(2, 1, 1)), frames)
    with pytest.raises(aotc.TraceError, match=r"test_torch_conv3d\.py:\d+: adaptive_avg_pool3d to \(3, 3, 3\) needs "
                                              r"static input sizes .*\(in aten\.adaptive_avg_pool3d"):  # fmt: skip
        compile_fn(lambda x: TF.adaptive_avg_pool3d(x, 3), frames)
    with pytest.raises(aotc.TraceError, match=r"test_torch_conv3d\.py:\d+: avg_pool3d with divisor_override=3"):
        compile_fn(lambda x: TF.avg_pool3d(x, 2, divisor_override=3), frames)
