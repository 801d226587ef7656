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


def check(module: Any, spec: tuple, shapes: list[tuple], name: str = "input") -> None:
    """``module`` compiled over ``{name: spec}`` matches eager at each of ``shapes`` on cpu and reference."""
    module.eval()
    compiled = aotc.compile(module, {name: TensorSpec(spec)})
    runs = {dev: aotc.load(compiled.artifact_bytes, device=dev) for dev in ("cpu", "reference")}
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


def test_the_functional_form_and_an_unbatched_input() -> None:
    torch.manual_seed(0)
    weight = torch.randn(3, 2, 3, 3)
    module = Fn(lambda x: torch.nn.functional.conv_transpose2d(x, weight, stride=2, padding=1, dilation=2))
    check(module, (3, 4, 5), [(3, 4, 5)])
