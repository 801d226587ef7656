"""Transposed convolution and ceil-mode pooling through ``aotc.compile(torch_module, specs)``: each model against
torch eager at two batch sizes (and two lengths where the spatial dim is dynamic) on the cpu and reference
backends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec

torch = torch_module()
nn = torch.nn
BATCH = Dim("batch", min=1, max=8)


def check(
    module: Any, spec: tuple, shapes: list[tuple], name: str = "input", devices: tuple = ("cpu", "reference")
) -> None:
    """``module`` compiled over ``{name: spec}`` matches eager at each of ``shapes`` on each of ``devices``."""
    module.eval()
    compiled = aotc.compile(module, {name: TensorSpec(spec)})
    runs = {dev: aotc.load(compiled.artifact_bytes, device=dev) for dev in devices}
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        for dev, run in runs.items():
            got = run(**{name: x})
            assert got.shape == want.shape, (dev, shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{dev} at {shape}")


class Fn(nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, input: Any) -> Any:  # named as torch's own modules name it
        return self.fn(input)


# -- transposed convolution ----------------------------------------------------------------------------------

TRANSPOSED = {
    "2d_groups_output_padding": (
        nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        (4, 5, 7),
    ),
    "2d_dilation_uneven": (
        nn.ConvTranspose2d(
            4, 6, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(0, 2), groups=2, dilation=(2, 1)
        ),
        (4, 5, 7),
    ),
    "2d_padding_beyond_the_span": (nn.ConvTranspose2d(3, 2, 2, stride=3, padding=2, bias=False), (3, 6, 6)),
    "1d_dilation_output_padding": (
        nn.ConvTranspose1d(3, 4, 3, stride=3, padding=2, output_padding=1, dilation=2),
        (3, 9),
    ),
    "1d_depthwise": (nn.ConvTranspose1d(4, 8, 4, stride=2, padding=1, groups=4), (4, 6)),
}


@pytest.mark.parametrize("case", list(TRANSPOSED))
def test_transposed_convolution_matches_torch_with_a_dynamic_batch(case: str) -> None:
    torch.manual_seed(0)
    module, tail = TRANSPOSED[case]
    check(module, (BATCH, *tail), [(2, *tail), (5, *tail)])


def test_transposed_convolution_over_a_dynamic_length() -> None:
    torch.manual_seed(0)
    length = Dim("length", min=2, max=64)
    module = nn.ConvTranspose1d(3, 2, 3, stride=2, padding=1, output_padding=1)
    check(module, (BATCH, 3, length), [(2, 3, 5), (3, 3, 11)])


def test_a_3d_transposed_convolution_is_refused_at_the_models_line() -> None:
    class Volume(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(2, 2, 3, 3, 3))

        def forward(self, input: Any) -> Any:
            return torch.nn.functional.conv_transpose3d(input, self.weight)

    with pytest.raises(aotc.TraceError, match=r"test_torch_conv_pool\.py:\d+: 3-D transposed convolution is not "
                                              r"supported \(1-D and 2-D are\) \(in aten\.convolution"):  # fmt: skip
        aotc.compile(Volume(), {"input": TensorSpec((BATCH, 2, 4, 4, 4))})


def test_the_functional_form_and_an_unbatched_input() -> None:
    torch.manual_seed(0)
    weight = torch.randn(3, 2, 3, 3)
    module = Fn(lambda x: torch.nn.functional.conv_transpose2d(x, weight, stride=2, padding=1, dilation=2))
    check(module, (3, 4, 5), [(3, 4, 5)])


# -- ceil-mode pooling ---------------------------------------------------------------------------------------

TF = torch.nn.functional
POOLS = {
    # 7 = 2 * 3 + 1: the last window holds one input element and the padding past it
    "max2d_last_partial_window": (lambda x: TF.max_pool2d(x, 3, 2, 0, ceil_mode=True), (3, 7, 8)),
    "max2d_padded": (lambda x: TF.max_pool2d(x, 3, 2, 1, ceil_mode=True), (3, 8, 6)),
    # stride 3 > kernel - padding: torch drops the window that would start in the right padding
    "max2d_window_in_the_padding_dropped": (lambda x: TF.max_pool2d(x, 3, 3, 1, ceil_mode=True), (2, 7, 7)),
    "avg2d_counts_pads_not_the_overhang": (lambda x: TF.avg_pool2d(x, 3, 2, 1, ceil_mode=True), (3, 8, 6)),
    "avg2d_excluding_pads": (
        lambda x: TF.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        (3, 8, 6),
    ),
    "avg2d_unpadded": (lambda x: TF.avg_pool2d(x, (2, 3), (2, 2), 0, ceil_mode=True), (2, 5, 8)),
    "max1d": (lambda x: TF.max_pool1d(x, 3, 2, 1, ceil_mode=True), (3, 10)),
    "avg1d": (lambda x: TF.avg_pool1d(x, 4, 3, 2, ceil_mode=True), (3, 10)),
    "avg1d_excluding_pads": (lambda x: TF.avg_pool1d(x, 4, 3, 2, ceil_mode=True, count_include_pad=False), (3, 11)),
}


@pytest.mark.parametrize("case", list(POOLS))
def test_ceil_mode_pooling_matches_torch_with_a_dynamic_batch(case: str) -> None:
    fn, tail = POOLS[case]
    check(Fn(fn), (BATCH, *tail), [(2, *tail), (3, *tail)])


@pytest.mark.parametrize("kind", ["max", "avg", "avg_excluding_pads", "avg_unpadded"])
def test_ceil_mode_pooling_over_dynamic_height_and_width(kind: str) -> None:
    """The window count is symbolic: at 7 the last window is partial, at 8 it is whole."""
    h, w = Dim("h", min=4, max=32), Dim("w", min=4, max=32)
    fn = {
        "max": lambda x: TF.max_pool2d(x, 3, 2, 1, ceil_mode=True),
        "avg": lambda x: TF.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
        "avg_excluding_pads": lambda x: TF.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        "avg_unpadded": lambda x: TF.avg_pool2d(x, 3, 2, 0, ceil_mode=True),
    }[kind]
    check(Fn(fn), (BATCH, 2, h, w), [(2, 2, 7, 8), (1, 2, 10, 7)])


@pytest.mark.parametrize("kind", ["max", "avg", "avg_excluding_pads"])
def test_ceil_mode_where_the_last_window_may_start_in_the_padding_over_a_dynamic_dim(kind: str) -> None:
    """Stride 3 > kernel 3 - padding 1: torch drops the ceil window at 8 (it would start in the right padding) and
    keeps it at 7 and 9. torch.export guards one of the two (its shape code branches on it), so this traces
    aotc.functional itself, whose one formula covers every size, and compares with torch eager."""
    import aotc.functional as AF

    fn = {
        "max": (
            lambda x: AF.max_pool2d(x, 3, 3, 1, ceil_mode=True),
            lambda x: TF.max_pool2d(x, 3, 3, 1, ceil_mode=True),
        ),
        "avg": (
            lambda x: AF.avg_pool2d(x, 3, 3, 1, ceil_mode=True),
            lambda x: TF.avg_pool2d(x, 3, 3, 1, ceil_mode=True),
        ),
        "avg_excluding_pads": (
            lambda x: AF.avg_pool2d(x, 3, 3, 1, ceil_mode=True, count_include_pad=False),
            lambda x: TF.avg_pool2d(x, 3, 3, 1, ceil_mode=True, count_include_pad=False),
        ),
    }[kind]
    h, w = Dim("h", min=4, max=32), Dim("w", min=4, max=32)
    compiled = aotc.compile(fn[0], {"x": TensorSpec((BATCH, 2, h, w))})
    rng = np.random.default_rng(0)
    for shape in ((2, 2, 7, 8), (1, 2, 8, 9), (1, 2, 10, 4)):
        x = rng.standard_normal(shape).astype(np.float32)
        want = fn[1](torch.from_numpy(x)).numpy()
        for dev in ("cpu", "reference"):
            got = aotc.load(compiled.artifact_bytes, device=dev)(x=x)
            assert got.shape == want.shape, (dev, shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_kernels_match_under_the_triton_interpreter() -> None:
    """The lowered forms (a dilated input convolved; padded strided window slices) as generated Triton kernels."""
    pytest.importorskip("triton")
    torch.manual_seed(0)
    module, tail = TRANSPOSED["2d_groups_output_padding"]
    check(module, (BATCH, *tail), [(2, *tail)], devices=("interpret",))
    h, w = Dim("h", min=4, max=32), Dim("w", min=4, max=32)
    pool = Fn(lambda x: TF.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False))
    check(pool, (BATCH, 2, h, w), [(2, 2, 7, 8), (1, 2, 10, 9)], devices=("interpret",))


@pytest.mark.parametrize(
    "hw, out",
    [((1, 1), (6, 6)), ((2, 2), (7, 7)), ((5, 7), (3, 2)), ((6, 4), (4, 3)), ((8, 8), (2, 4))],
    ids=["alexnet-1x1-to-6x6", "vgg-2x2-to-7x7", "overlapping", "mixed", "dividing"],
)
def test_adaptive_avg_pool_to_any_size_over_static_input_sizes(hw: tuple, out: tuple) -> None:
    check(nn.AdaptiveAvgPool2d(out), (BATCH, 3, *hw), [(1, 3, *hw), (3, 3, *hw)])


def test_adaptive_avg_pool_over_a_dynamic_size_that_does_not_divide_is_refused() -> None:
    height = Dim("height", min=2, max=64)
    with pytest.raises(aotc.errors.AotcError, match="adaptive_avg_pool2d to 3x3 needs static input sizes"):
        aotc.compile(nn.AdaptiveAvgPool2d(3).eval(), {"input": TensorSpec((BATCH, 3, height, 8))})


@pytest.mark.parametrize(
    "pool, hw",
    [
        (nn.AvgPool2d(2560, ceil_mode=True), (1, 1)),  # HF EfficientNet's pooler over a 32-pixel image
        (nn.AvgPool2d(16, ceil_mode=True), (7, 7)),
        (nn.MaxPool2d((10, 8), ceil_mode=True), (7, 8)),
    ],
    ids=["efficientnet-1x1", "avg-7x7", "max-7x8"],
)
def test_a_ceil_mode_kernel_past_the_input_is_one_window_over_all_of_it(pool: Any, hw: tuple) -> None:
    check(pool, (BATCH, 3, *hw), [(1, 3, *hw), (3, 3, *hw)])
