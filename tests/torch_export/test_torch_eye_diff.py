"""``torch.eye`` (both overloads), ``torch.diff`` (with prepend, append, n > 1 and bools) and the int
``repeat_interleave`` over a dynamic dim, which the Hugging Face sweep met in Qwen3.5's and Kimi-linear's
chunked attention. Each against torch eager at two sizes of the dynamic dim, on the cpu, reference and
interpret backends."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec

torch = torch_module()
nn = torch.nn
B = Dim("b", min=2, max=64)


class Ops(nn.Module):
    def forward(self, x: Any, m: Any) -> Any:
        spread = x.repeat_interleave(3, dim=1)
        flat = x.repeat_interleave(2)
        eye = torch.eye(x.shape[1], dtype=x.dtype) + torch.eye(4, x.shape[1]).sum()
        rows = torch.eye(x.shape[0])  # over the dynamic dim
        steps = torch.diff(x, n=2, dim=1, prepend=x[:, :1], append=x[:, -2:])
        flips = torch.diff(m, dim=1)
        return spread, flat, eye, rows, steps, flips


def test_eye_diff_and_repeat_interleave_match_eager() -> None:
    model = Ops()
    specs = {"x": TensorSpec((B, 5)), "m": TensorSpec((B, 6), "bool")}
    compiled = aotc.compile(model, specs)
    runs = {dev: aotc.load(compiled.artifact_bytes, device=dev) for dev in ("cpu", "reference", "interpret")}
    rng = np.random.default_rng(0)
    for b in (3, 7):
        x = rng.standard_normal((b, 5)).astype(np.float32)
        m = rng.random((b, 6)) > 0.5
        with torch.no_grad():
            want = [t.numpy() for t in model(torch.from_numpy(x), torch.from_numpy(m))]
        for dev, run in runs.items():
            got = run(x=x, m=m)
            assert len(got) == len(want)
            for i, (g, w) in enumerate(zip(got, want)):
                assert g.dtype == w.dtype and g.shape == w.shape, (dev, i)
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{dev} output {i}")
