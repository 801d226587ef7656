"""Vector and matrix norms (``torch.linalg.vector_norm``, ``torch.norm``, ``Tensor.norm``,
``torch.linalg.matrix_norm``) through ``aotc.compile(torch_module, specs)`` against torch eager at two batch sizes,
and the matrix norms that need singular values refused naming the op and the line."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec

torch = torch_module()
LA = torch.linalg
BATCH = Dim("batch", min=1, max=8)
INF = math.inf


class Fn(torch.nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(x)


def check(fn: Any, tail: tuple, dtype: str = "float32", rtol: float = 1e-5, batches: tuple = (2, 5)) -> None:
    module = Fn(fn).eval()
    batch = BATCH if len(batches) > 1 else batches[0]
    compiled = aotc.compile(module, {"x": TensorSpec((batch, *tail), dtype)})
    rng = np.random.default_rng(0)
    for n in batches:
        x = rng.standard_normal((n, *tail)).astype(dtype)
        x[0, 0] = 0.0  # zeros for ord 0 and negative orders
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        for dev in ("cpu", "reference"):
            got = aotc.load(compiled.artifact_bytes, device=dev)(x=x)
            assert got.shape == want.shape and got.dtype == want.dtype, (dev, n)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6, err_msg=f"{dev} at batch {n}")


VECTOR = {
    "ord2_last_dim": lambda x: LA.vector_norm(x, dim=-1),
    "ord1": lambda x: LA.vector_norm(x, 1, dim=1),
    "inf_keepdim": lambda x: LA.vector_norm(x, INF, dim=(1, 2), keepdim=True),
    "minus_inf": lambda x: LA.vector_norm(x, -INF, dim=-1),
    "ord0_counts_nonzeros": lambda x: LA.vector_norm(x, 0, dim=-1),
    "p3": lambda x: LA.vector_norm(x, 3, dim=2),
    "p_half": lambda x: LA.vector_norm(x, 0.5, dim=-1),
    "p_minus_1": lambda x: LA.vector_norm(x[:, 1:], -1, dim=-1),  # rows without the zero
    "every_dim": lambda x: LA.vector_norm(x),
    "every_dim_keepdim": lambda x: LA.vector_norm(x, 2, keepdim=True),
    "torch_norm": lambda x: torch.norm(x, dim=-1),
    "torch_norm_p_fro_dims": lambda x: torch.norm(x, p="fro", dim=(1, 2)),
    "tensor_norm_keepdim": lambda x: x / x.norm(dim=-1, keepdim=True).clamp(min=1e-6),
    "linalg_norm": lambda x: LA.norm(x, dim=-1),
}


@pytest.mark.parametrize("case", list(VECTOR))
def test_vector_norms_match_torch(case: str) -> None:
    check(VECTOR[case], (3, 6))


def test_a_half_precision_norm_accumulates_in_float32() -> None:
    check(lambda x: LA.vector_norm(x * 64, dim=-1), (3, 200), "float16", rtol=2e-3)


MATRIX = {
    "fro": lambda x: LA.matrix_norm(x),
    "fro_keepdim": lambda x: LA.matrix_norm(x, keepdim=True),
    "linalg_norm_of_a_matrix": lambda x: LA.norm(x, dim=(1, 2)),
}
# torch.export itself specializes every dim of a matrix norm with a numeric ord (its decomposition checks sizes),
# so these run at one static batch
MATRIX_STATIC = {
    "ord1_max_column_sum": lambda x: LA.matrix_norm(x, 1),
    "ord_minus_1": lambda x: LA.matrix_norm(x, -1, dim=(1, 3)),
    "inf_max_row_sum": lambda x: LA.matrix_norm(x, INF, keepdim=True),
    "minus_inf_dims_reversed": lambda x: LA.matrix_norm(x, -INF, dim=(-1, -2)),
}


@pytest.mark.parametrize("case", list(MATRIX))
def test_matrix_norms_match_torch(case: str) -> None:
    check(MATRIX[case], (3, 4, 5))


@pytest.mark.parametrize("case", list(MATRIX_STATIC))
def test_matrix_norms_of_a_numeric_order_match_torch(case: str) -> None:
    check(MATRIX_STATIC[case], (3, 4, 5), batches=(2,))


@pytest.mark.parametrize("ord", ["nuc", 2, -2])
def test_matrix_norms_needing_singular_values_are_refused_at_their_line(ord: Any) -> None:
    with pytest.raises(aotc.TraceError, match=rf"test_torch_norms\.py:\d+: matrix_norm ord={ord!r} needs singular "
                                              r"values .*linalg_matrix_norm"):  # fmt: skip
        aotc.compile(Fn(lambda x: LA.matrix_norm(x, ord)), {"x": TensorSpec((2, 4, 4))})
