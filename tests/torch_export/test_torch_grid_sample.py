"""Grid sampling (``F.grid_sample`` -> ``aten.grid_sampler_2d``, the sampling of deformable attention in DETR-likes):
a numpy reference of torch's definition (its scalar CPU kernel's formulas, in float64) checked against torch eager,
then aotc against both, through ``aotc.compile(torch_module, specs)`` on the cpu, reference and interpret backends
at two batch sizes: every mode (bilinear, nearest, bicubic) x padding (zeros, border, reflection) x align_corners,
grid points outside [-1, 1] included; dynamic input and grid sizes; aotc's own ``F.grid_sample``; refusals."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
import aotc.functional as AF
from aotc import Dim, TensorSpec

torch = torch_module()
TF = torch.nn.functional
HERE = "test_torch_grid_sample.py"
BATCH = Dim("batch", min=1, max=4)
PADDINGS = ("zeros", "border", "reflection")
COMBOS = list(itertools.product(PADDINGS, (False, True)))
CUBIC_A = -0.75


# -- torch's definition in numpy --------------------------------------------------------------------------------


def _unnormalize(g: np.ndarray, size: int, align: bool) -> np.ndarray:
    return (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2


def _reflect(s: np.ndarray, twice_low: int, twice_high: int) -> np.ndarray:
    if twice_low == twice_high:
        return np.zeros_like(s)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    d = np.abs(s - low)
    extra, flips = np.fmod(d, span), np.floor(d / span)
    return np.where(flips % 2 == 0, extra + low, span - extra + low)


def _pad(s: np.ndarray, size: int, padding: str, align: bool) -> np.ndarray:
    if padding == "reflection":
        s = _reflect(s, 0, 2 * (size - 1)) if align else _reflect(s, -1, 2 * size - 1)
    return np.clip(s, 0, size - 1) if padding != "zeros" else s


def _read(x: np.ndarray, cx: np.ndarray, cy: np.ndarray) -> np.ndarray:
    """x[n, :, cy, cx] as (N, C, H_out, W_out), 0 outside."""
    n, _, h, w = x.shape
    ok = (cx >= 0) & (cx <= w - 1) & (cy >= 0) & (cy <= h - 1)
    ix, iy = np.where(ok, cx, 0).astype(np.int64), np.where(ok, cy, 0).astype(np.int64)
    rows = x[np.arange(n)[:, None, None], :, iy, ix]  # (N, H_out, W_out, C)
    return np.where(ok[..., None], rows, 0).transpose(0, 3, 1, 2)


def _cubic(t: np.ndarray) -> list[np.ndarray]:
    def near(d: np.ndarray) -> np.ndarray:
        return ((CUBIC_A + 2) * d - (CUBIC_A + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:
        return ((CUBIC_A * d - 5 * CUBIC_A) * d + 8 * CUBIC_A) * d - 4 * CUBIC_A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sample_ref(x: np.ndarray, grid: np.ndarray, mode: str, padding: str, align: bool) -> np.ndarray:
    x, grid = x.astype(np.float64), grid.astype(np.float64)
    h, w = x.shape[2:]
    sx, sy = _unnormalize(grid[..., 0], w, align), _unnormalize(grid[..., 1], h, align)
    if mode == "nearest":
        return _read(x, np.rint(_pad(sx, w, padding, align)), np.rint(_pad(sy, h, padding, align)))
    if mode == "bilinear":
        sx, sy = _pad(sx, w, padding, align), _pad(sy, h, padding, align)
        x0, y0 = np.floor(sx), np.floor(sy)
        out = 0
        for cx, cy in itertools.product((x0, x0 + 1), (y0, y0 + 1)):
            out = out + _read(x, cx, cy) * ((1 - np.abs(sx - cx)) * (1 - np.abs(sy - cy)))[:, None]
        return out
    x0, y0 = np.floor(sx), np.floor(sy)
    wx, wy = _cubic(sx - x0), _cubic(sy - y0)
    out = 0
    for j in range(4):
        cy = _pad(y0 + j - 1, h, padding, align)
        line = sum(_read(x, _pad(x0 + i - 1, w, padding, align), cy) * wx[i][:, None] for i in range(4))
        out = out + line * wy[j][:, None]
    return out


def sample_inputs(rng: np.random.Generator, n: int, c: int, hw: tuple, out: tuple) -> tuple[np.ndarray, np.ndarray]:
    """An input and a grid spanning [-1.6, 1.6] with the corners, the centre and points far outside (several
    reflections away) planted."""
    x = rng.standard_normal((n, c, *hw)).astype(np.float32)
    grid = rng.uniform(-1.6, 1.6, (n, *out, 2)).astype(np.float32)
    planted = np.array([[-1, -1], [1, 1], [0, 0], [-1, 1], [3.7, -2.9], [-5.3, 4.1]], np.float32)
    grid[0, 0, : len(planted)] = planted[: out[1]]
    return x, grid


# -- the reference is torch's definition ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_the_numpy_reference_matches_torch_eager(mode: str) -> None:
    x, grid = sample_inputs(np.random.default_rng(1), 2, 3, (5, 6), (4, 7))
    for padding, align in COMBOS + [("reflection", True), ("zeros", False)]:
        want = TF.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), mode, padding, align).numpy()
        got = grid_sample_ref(x, grid, mode, padding, align)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{mode} {padding} {align}")
    # a single row or column: the reflection span of align_corners is 0
    x1, grid1 = x[:, :, :1, :], grid
    want = TF.grid_sample(torch.from_numpy(x1), torch.from_numpy(grid1), mode, "reflection", True).numpy()
    np.testing.assert_allclose(grid_sample_ref(x1, grid1, mode, "reflection", True), want, rtol=1e-5, atol=1e-5)


# -- aotc against torch --------------------------------------------------------------------------------------------


class AllPaddings(torch.nn.Module):
    """One mode under every padding x align_corners, one output each."""

    def __init__(self, mode: str, combos: list[tuple[str, bool]]) -> None:
        super().__init__()
        self.mode, self.combos = mode, combos

    def forward(self, x: Any, grid: Any) -> Any:
        return tuple(TF.grid_sample(x, grid, self.mode, p, a) for p, a in self.combos)


def check(module: Any, specs: dict, shapes: list[tuple], devices: tuple = ("cpu", "reference"), c: int = 3) -> None:
    compiled = aotc.compile(module.eval(), specs)
    runs = {dev: aotc.load(compiled.artifact_bytes, device=dev) for dev in devices}
    rng = np.random.default_rng(0)
    for n, hw, out in shapes:
        x, grid = sample_inputs(rng, n, c, hw, out)
        with torch.no_grad():
            want = [t.numpy() for t in module(torch.from_numpy(x), torch.from_numpy(grid))]
        refs = [grid_sample_ref(x, grid, module.mode, p, a) for p, a in module.combos]
        for dev, run in runs.items():
            got = run(x=x, grid=grid)
            assert len(got) == len(want)
            for g, w, r, (p, a) in zip(got, want, refs, module.combos):
                what = f"{dev} {module.mode} {p} align_corners={a} at n={n} {hw} -> {out}"
                assert g.shape == w.shape and g.dtype == np.float32, what
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{what} vs torch")
                np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5, err_msg=f"{what} vs numpy")


STATIC_SPECS = {"x": TensorSpec((BATCH, 3, 5, 6)), "grid": TensorSpec((BATCH, 4, 7, 2))}
TWO_BATCHES = [(2, (5, 6), (4, 7)), (3, (5, 6), (4, 7))]


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_every_padding_and_align_corners_matches_torch_at_two_batch_sizes(mode: str) -> None:
    check(AllPaddings(mode, COMBOS), STATIC_SPECS, TWO_BATCHES)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_the_kernels_match_under_the_triton_interpreter(mode: str) -> None:
    pytest.importorskip("triton")
    check(AllPaddings(mode, COMBOS), STATIC_SPECS, TWO_BATCHES, devices=("interpret",))


def test_the_bicubic_kernel_matches_under_the_triton_interpreter() -> None:
    """Sixteen taps make a long kernel for the interpreter: one padding, with reflection's folding, at two batches."""
    pytest.importorskip("triton")
    check(AllPaddings("bicubic", [("reflection", False)]), STATIC_SPECS, TWO_BATCHES, devices=("interpret",))


def test_dynamic_input_and_grid_sizes_match_torch() -> None:
    h, w = Dim("h", min=1, max=32), Dim("w", min=2, max=32)
    ho, wo = Dim("ho", min=1, max=16), Dim("wo", min=6, max=16)
    specs = {"x": TensorSpec((BATCH, 2, h, w)), "grid": TensorSpec((BATCH, ho, wo, 2))}
    shapes = [(2, (5, 6), (3, 7)), (1, (1, 9), (2, 6))]  # a single input row: align_corners's span of 0
    for mode in ("bilinear", "nearest", "bicubic"):
        check(AllPaddings(mode, [("reflection", True), ("zeros", False), ("border", True)]), specs, shapes, c=2)


# -- aotc's own F.grid_sample and the refusals -----------------------------------------------------------------------


def test_aotc_functional_grid_sample_matches_the_reference_over_dynamic_sizes() -> None:
    h, w = Dim("h", min=2, max=32), Dim("w", min=2, max=32)

    def model(x: Any, grid: Any) -> Any:
        return AF.grid_sample(x, grid, mode="bilinear", padding_mode="border"), AF.grid_sample(x, grid, "nearest")

    compiled = aotc.compile(model, {"x": TensorSpec((BATCH, 3, h, w)), "grid": TensorSpec((BATCH, 4, 6, 2))})
    rng = np.random.default_rng(2)
    for n, hw in ((2, (5, 7)), (1, (8, 3))):
        x, grid = sample_inputs(rng, n, 3, hw, (4, 6))
        bilinear, nearest = compiled(x=x, grid=grid)
        np.testing.assert_allclose(bilinear, grid_sample_ref(x, grid, "bilinear", "border", False), atol=1e-5)
        np.testing.assert_allclose(nearest, grid_sample_ref(x, grid, "nearest", "zeros", False), atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "area"}, r"grid_sample mode must be one of bilinear, nearest, bicubic, got 'area'"),
        ({"padding_mode": "wrap"}, r"padding_mode must be one of zeros, border, reflection, got 'wrap'"),
    ],
)
def test_an_unknown_mode_is_refused_at_its_line(kwargs: dict, message: str) -> None:
    def model(x: Any, grid: Any) -> Any:
        return AF.grid_sample(x, grid, **kwargs)

    with pytest.raises(aotc.TraceError, match=rf"{HERE}:\d+: .*{message}"):
        aotc.compile(model, STATIC_SPECS)


def test_a_grid_of_another_batch_or_width_is_refused() -> None:
    def model(x: Any, grid: Any) -> Any:
        return AF.grid_sample(x, grid)

    specs = {"x": TensorSpec((2, 3, 5, 6)), "grid": TensorSpec((3, 4, 7, 2))}
    with pytest.raises(aotc.TraceError, match=rf"{HERE}:\d+: .*grid must be \(N, H_out, W_out, 2\) with the input's N"):
        aotc.compile(model, specs)
    specs = {"x": TensorSpec((2, 3, 5, 6, 4)), "grid": TensorSpec((2, 4, 7, 3, 3))}
    with pytest.raises(aotc.TraceError, match=rf"{HERE}:\d+: .*5-D volumes are not supported"):
        aotc.compile(model, specs)
