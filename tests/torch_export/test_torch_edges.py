"""The torch importer at its edges: a -1 in a reshape over a multiple_of dim, and what an unsupported op's refusal
lists (the supported ops of the same name stem, or none)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec
from aotc.torch_export.table import nearby

torch = torch_module()
nn = torch.nn
F32 = np.float32
HERE = "test_torch_edges.py"


def _eager(module: Any, **feeds: np.ndarray) -> Any:
    with torch.no_grad():
        return module(**{k: torch.from_numpy(v) for k, v in feeds.items()})


class QuarterRows(nn.Module):
    def forward(self, x: Any) -> Any:
        return x.reshape(x.shape[0] // 4, 4, -1).sum(1)


def test_a_minus_one_reshape_over_a_multiple_of_dim_is_inferred() -> None:
    """The -1 is 6*batch elements / (4*(batch//4)): exactly 6, since batch is a multiple of 4."""
    batch = Dim("batch", min=8, max=64, multiple_of=4)
    compiled = aotc.compile(QuarterRows(), {"x": TensorSpec((batch, 6))})
    rng = np.random.default_rng(0)
    for n in (8, 20):
        x = rng.standard_normal((n, 6)).astype(F32)
        np.testing.assert_allclose(compiled(x=x), _eager(QuarterRows(), x=x).numpy(), rtol=1e-6)


def test_a_refusal_lists_only_supported_ops_of_the_same_name_stem() -> None:
    class Pool(nn.Module):
        def forward(self, x: Any) -> Any:
            return nn.functional.adaptive_max_pool2d(x, 2)

    with pytest.raises(aotc.UnsupportedError) as info:
        aotc.compile(Pool(), {"x": TensorSpec((Dim("batch", min=1, max=4), 2, 4, 4))})
    msg = str(info.value)
    assert re.search(rf"{HERE}:\d+: aten\.adaptive_max_pool2d\.default is not supported by aotc", msg), msg
    assert msg.endswith(
        "(supported ops of the same name: aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default, "
        "aten.adaptive_avg_pool2d.default, aten.adaptive_avg_pool3d.default)"
    ), msg
    assert nearby("aten.add.out") == ["aten.add.Scalar", "aten.add.Tensor"]  # other overloads, same namespace only
    assert nearby("aten.native_group_norm.default") == ["aten.group_norm.default"]
    assert nearby("aten.conv_transpose3d.input") == ["aten.conv_transpose1d.default", "aten.conv_transpose2d.input"]
    assert nearby("aten.linalg_svd.default")[0].startswith("aten.linalg_")  # the first word: linalg_*
    assert nearby("aten.sort.default") == [] and nearby("aten._fft_r2c.default") == []


def test_a_model_torch_export_cannot_capture_is_refused_at_the_models_line() -> None:
    class MissingMask(nn.Module):  # LongT5 and Switch Transformers fail inside torch.export so
        def forward(self, x: Any) -> Any:
            mask = None
            return x * mask.shape[0]

    with pytest.raises(aotc.TraceError) as info:
        aotc.compile(MissingMask(), {"x": TensorSpec((Dim("batch", min=1, max=4), 8))})
    msg = str(info.value)
    line = MissingMask.forward.__code__.co_firstlineno + 2
    assert re.match(rf".*{HERE}:{line}: torch\.export could not capture the model: AttributeError: ", msg), msg


class PaddedChunks(nn.Module):
    """Qwen3-Next's linear attention and Mamba-2's mixers: pad the sequence up to a multiple of the chunk, then
    split it into chunks with a -1 (the padded length traces as seq + (63*(seq % 64)) % 64)."""

    def forward(self, x: Any) -> Any:
        pad = (64 - x.shape[1] % 64) % 64
        x = nn.functional.pad(x, (0, 0, 0, pad))
        return x.reshape(x.shape[0], -1, 64, x.shape[-1]).sum(2)


def test_a_minus_one_over_a_padded_length_is_inferred_by_congruence() -> None:
    compiled = aotc.compile(
        PaddedChunks(), {"x": TensorSpec((Dim("batch", min=1, max=4), Dim("seq", min=65, max=300), 8))}
    )
    rng = np.random.default_rng(0)
    for b, s in ((1, 65), (2, 128), (3, 129), (2, 300)):
        x = rng.standard_normal((b, s, 8)).astype(F32)
        want = _eager(PaddedChunks(), x=x).numpy()
        assert want.shape == (b, -(-s // 64), 8)
        np.testing.assert_allclose(compiled(x=x), want, rtol=1e-5, atol=1e-5)


class BoolArithmetic(nn.Module):
    """PP-DocLayout-V4 multiplies two masks: bool * bool is their and, bool + bool their or, as in torch."""

    def forward(self, x: Any) -> Any:
        a, b = x > 0, x < 0.5
        return a * b, a + b, (a * b).sum(-1)


def test_bool_times_bool_is_and_and_bool_plus_bool_is_or() -> None:
    compiled = aotc.compile(BoolArithmetic(), {"x": TensorSpec((Dim("batch", min=1, max=8), 6))})
    x = np.random.default_rng(1).standard_normal((5, 6)).astype(F32)
    got, want = compiled(x=x), [t.numpy() for t in _eager(BoolArithmetic(), x=x)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    assert want[0].dtype == np.bool_ and want[0].any() and not want[0].all()
