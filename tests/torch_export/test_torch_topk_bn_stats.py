"""``aten.topk`` (MoE routers), ``scatter`` of a value, ``bucketize`` and batch norm over the batch's own statistics (``_native_batch_norm_legit.no_stats``,
BiT's weight standardization) through ``aotc.compile(torch_module, specs)``, against torch eager."""

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


def run(module: Any, spec: tuple, shapes: list[tuple]) -> list[tuple]:
    """(got, want) output lists of ``module`` compiled over ``{"x": spec}`` at each of ``shapes``."""
    compiled = aotc.compile(module.eval(), {"x": TensorSpec(spec)})
    rng = np.random.default_rng(0)
    out = []
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x))
        got = compiled(x=x)
        out.append((list(got), [w.numpy() for w in want]))
    return out


class TopK(nn.Module):
    def __init__(self, k: int, dim: int, largest: bool) -> None:
        super().__init__()
        self.k, self.dim, self.largest = k, dim, largest

    def forward(self, x: Any) -> Any:
        return torch.topk(x, self.k, dim=self.dim, largest=self.largest)


@pytest.mark.parametrize("k, dim, largest", [(2, -1, True), (3, 1, False), (8, -1, True), (1, 0, True)])
def test_topk_values_and_indices_match_torch(k: int, dim: int, largest: bool) -> None:
    for got, want in run(TopK(k, dim, largest), (BATCH, 5, 8), [(3, 5, 8), (6, 5, 8)]):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert got[1].dtype == np.int64


def test_topk_over_a_dynamic_dim_and_a_router() -> None:
    seq = Dim("seq", min=3, max=32)

    class Router(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Linear(8, 6, bias=False)

        def forward(self, x: Any) -> Any:
            weights, experts = torch.topk(self.gate(x).softmax(-1), 2, dim=-1)
            return weights / weights.sum(-1, keepdim=True), experts, torch.topk(x, 3, dim=1)[1]

    torch.manual_seed(0)
    for got, want in run(Router(), (BATCH, seq, 8), [(2, 3, 8), (3, 11, 8)]):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[2], want[2])


def test_a_value_taken_once_is_never_taken_again_where_the_rest_tie_at_minus_infinity() -> None:
    class Masked(nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.topk(x.masked_fill(x < 0.5, float("-inf")), 4, dim=-1)

    for got, want in run(Masked(), (BATCH, 6), [(4, 6)]):
        np.testing.assert_array_equal(got[0], want[0])
        for row in got[1]:
            assert len(set(row.tolist())) == 4, got[1]  # four distinct positions, whichever -inf ties torch picks


def test_batch_norm_over_the_batchs_own_statistics_standardizes_a_weight_as_bit_does() -> None:
    class StdConv(nn.Conv2d):
        def forward(self, x: Any) -> Any:
            w = nn.functional.batch_norm(
                self.weight.reshape(1, self.out_channels, -1), None, None, training=True, momentum=0.0, eps=1e-8
            ).reshape_as(self.weight)
            return (nn.functional.conv2d(x, w, self.bias, padding=1),)

    torch.manual_seed(0)
    for got, want in run(StdConv(3, 4, 3), (BATCH, 3, 6, 6), [(1, 3, 6, 6), (2, 3, 6, 6)]):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_scatter_of_a_value_marks_a_routers_chosen_groups() -> None:
    class Groups(nn.Module):
        def forward(self, x: Any) -> Any:
            chosen = torch.topk(x, 2, dim=-1, sorted=False)[1]
            mask = torch.zeros_like(x).scatter_(1, chosen, 1)
            again = torch.full_like(x, -1.0).scatter(1, torch.cat([chosen, chosen], 1), 7.5)  # repeated
            return mask, again

    for got, want in run(Groups(), (BATCH, 4), [(3, 4), (6, 4)]):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("right", [False, True])
def test_bucketize_counts_the_boundaries_below_each_element(right: bool) -> None:
    class Buckets(nn.Module):
        def forward(self, x: Any) -> Any:
            edges = torch.tensor([-1.0, 0.0, 0.0, 0.5, 2.0])  # a repeated edge, and elements equal to edges
            return torch.bucketize((x * 2).round() / 2, edges, right=right), torch.bucketize(x, edges, out_int32=True)

    for got, want in run(Buckets(), (BATCH, 7), [(3, 7), (8, 7)]):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert got[0].dtype == np.int64 and got[1].dtype == np.int32


def test_topk_of_the_whole_dynamic_dim_is_a_full_sort() -> None:
    seq = Dim("seq", min=2, max=32)

    class Indexer(nn.Module):  # DeepSeek-V3.2's: k = min(2048, seq), all of seq at these sizes
        def forward(self, x: Any) -> Any:
            top = torch.topk(x, min(2048, x.shape[-1]), dim=-1)
            low = torch.topk(x, x.shape[1], dim=1, largest=False)
            return top.values, top.indices, low.values, low.indices

    for got, want in run(Indexer(), (BATCH, seq, seq), [(2, 3, 3), (3, 11, 11)]):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
