"""A torch model's weights go into the artifact without a second copy while it compiles (a 632M-parameter ViT-H/14
compiled in 5.2 GiB, not 7.5): the constants are read-only views of the parameters. What the artifact holds is what
the weights were at compile time, and a slip that writes a constant cannot write the user's model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec
from aotc.torch_export._torch import to_numpy

torch = torch_module()
nn = torch.nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.low = nn.Linear(4, 4).to(torch.bfloat16)

    def forward(self, x: Any) -> Any:
        return self.low(self.fc(x).to(torch.bfloat16)).float()


def test_a_shared_weight_is_a_read_only_view_and_a_copy_is_its_own() -> None:
    net = Net()
    for p in (net.fc.weight, net.low.weight):
        shared = to_numpy(p, "weight", share=True)
        assert np.shares_memory(shared, (p if p.dtype != torch.bfloat16 else p.view(torch.int16)).detach().numpy())
        with pytest.raises(ValueError, match="read-only"):
            shared[0, 0] = 1
        own = to_numpy(p, "weight")
        assert own.flags.writeable and not np.shares_memory(own, shared)
        np.testing.assert_array_equal(own.view(np.uint8), shared.view(np.uint8))
    widened = to_numpy(torch.ones(3, dtype=torch.float64), "a float64 constant", share=True)
    assert widened.dtype == np.float32  # a conversion is always a copy of its own


def test_the_artifact_keeps_the_weights_as_they_were_at_compile_time() -> None:
    net = Net().eval()
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    with torch.no_grad():
        before = net(torch.from_numpy(x)).numpy()
    compiled = aotc.compile(net, {"x": TensorSpec((Dim("batch", min=1, max=16), 8))})
    with torch.no_grad():
        net.fc.weight.add_(1.0)  # the user trains on after compiling
        net.low.weight.mul_(2.0)
    np.testing.assert_allclose(compiled(x=x), before, rtol=1e-2, atol=1e-2)
    assert not np.allclose(net(torch.from_numpy(x)).detach().numpy(), before, rtol=1e-2, atol=1e-2)
    for device in ("cpu", "reference"):
        np.testing.assert_allclose(aotc.load(compiled.artifact_bytes, device=device)(x=x), before, rtol=1e-2, atol=1e-2)
