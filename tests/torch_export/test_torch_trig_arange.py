"""Two ops the Hugging Face sweep met: acos / asin / atan (YOSO's LSH collision probability) on the cpu, reference
and interpret backends, NaN outside [-1, 1] as torch; and ``torch.arange`` over dynamic dims with a float step
of integral value (XLNet's relative positions ``torch.arange(klen, -qlen, -1.0)``), which is the int arange in
torch's default float dtype. Each against torch eager at two sizes of each dynamic dim."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec

torch = torch_module()
nn = torch.nn
HERE = "test_torch_trig_arange.py"
N = Dim("n", min=1, max=64)
DEVICES = ("cpu", "reference", "interpret")


class InverseTrig(nn.Module):
    def forward(self, x: Any) -> Any:
        # YOSO: 1 - acos(q . k) / pi, raised to the tau-th power
        probability = (1 - torch.acos(x.clamp(-1, 1)) / torch.pi) ** 8
        return probability, torch.acos(x), torch.asin(x), torch.atan(x * 10), x.acos() + x.asin()


def test_inverse_trig_matches_eager_and_is_nan_outside_the_domain() -> None:
    compiled = aotc.compile(InverseTrig(), {"x": TensorSpec((3, N))})
    runs = {dev: aotc.load(compiled.artifact_bytes, device=dev) for dev in DEVICES}
    for n in (5, 40):
        x = np.linspace(-1.25, 1.25, 3 * n, dtype=np.float32).reshape(3, n)
        x[0, :3] = [1.0, -1.0, np.nan]
        with torch.no_grad():
            want = [t.numpy() for t in InverseTrig()(torch.from_numpy(x))]
        assert np.isnan(want[1]).any() and not np.isnan(want[1]).all()
        for dev, run in runs.items():
            for got, w in zip(run(x=x), want):
                assert got.dtype == w.dtype == np.float32
                np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-6, equal_nan=True, err_msg=f"{dev} at n={n}")


class RelativePositions(nn.Module):
    """XLNet's relative_positional_encoding: klen down to -qlen (exclusive) by -1.0, then a sinusoid of it."""

    def forward(self, q: Any, k: Any) -> Any:
        qlen, klen = q.shape[0], k.shape[0]
        fwd = torch.arange(klen, -qlen, -1.0)
        inv_freq = 1 / torch.pow(10000, torch.arange(0, 8, 2.0, dtype=torch.int64).float() / 8)
        sinusoid = torch.einsum("i,d->id", fwd, inv_freq)
        # a float start and a float end over a dim, in an int dtype and in float16
        evens = torch.arange(0.0, 2 * klen, 2.0, dtype=torch.int32)
        halves = torch.arange(1.0, qlen + 1, dtype=torch.float16)
        return fwd, torch.cat([sinusoid.sin(), sinusoid.cos()], -1), evens, halves


def test_a_float_step_of_integral_value_over_dynamic_dims_is_the_int_arange() -> None:
    specs = {"q": TensorSpec((Dim("qlen", min=1, max=32), 4)), "k": TensorSpec((Dim("klen", min=1, max=48), 4))}
    compiled = aotc.compile(RelativePositions(), specs)
    runs = {dev: aotc.load(compiled.artifact_bytes, device=dev) for dev in DEVICES}
    for qlen, klen in ((3, 5), (17, 40)):
        q, k = np.zeros((qlen, 4), np.float32), np.zeros((klen, 4), np.float32)
        with torch.no_grad():
            want = [t.numpy() for t in RelativePositions()(torch.from_numpy(q), torch.from_numpy(k))]
        assert [w.dtype for w in want] == [np.float32, np.float32, np.int32, np.float16]
        assert want[0].shape == (klen + qlen,)
        for dev, run in runs.items():
            for got, w in zip(run(q=q, k=k), want):
                assert got.dtype == w.dtype and got.shape == w.shape, (dev, got.dtype, got.shape)
                np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-5, err_msg=f"{dev} at {qlen}, {klen}")


class HalfSteps(nn.Module):
    def forward(self, x: Any) -> Any:
        return torch.arange(0, x.shape[0], 0.5)


def test_a_fractional_step_over_a_dynamic_dim_is_refused_at_the_models_line() -> None:
    with pytest.raises(aotc.AotcError) as info:
        aotc.compile(HalfSteps(), {"x": TensorSpec((N, 2))})
    msg = str(info.value)
    assert re.search(rf"{HERE}:\d+: .*arange with a dynamic dim needs int start, end and step", msg), msg
    assert "step=0.5" in msg and "aten.arange.start_step" in msg, msg
