"""A three-layer MLP with a dynamic batch: the smallest model worth compiling.

Compile it with ``aotc compile models/mlp.py``; the CLI calls ``build()`` (see README, "Model files").
"""

from __future__ import annotations

import zlib

import numpy as np

import aotc.functional as F
from aotc import Dim, TensorSpec, nn


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, d_hidden: int = 64, d_out: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        h = F.gelu(self.fc2(h))
        return self.fc3(h)


def random_weights(model: nn.Module, seed: int) -> dict[str, np.ndarray]:
    """He-normal weights (activations keep unit scale through the ReLU) and small random biases;
    seeded per key so it does not depend on key order."""
    out = {}
    for name, value in model.state_dict().items():
        shape = tuple(value.shape)
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        std = np.sqrt(2.0 / shape[1]) if len(shape) == 2 else 0.1
        out[name] = rng.normal(0.0, std, shape).astype(np.float32)
    return out


def build(d_in: int = 32, d_hidden: int = 64, d_out: int = 10, seed: int = 0) -> tuple[MLP, dict[str, TensorSpec]]:
    model = MLP(d_in, d_hidden, d_out)
    model.load_state_dict(random_weights(model, seed))
    batch = Dim("batch", min=1, max=1024)
    return model, {"x": TensorSpec((batch, d_in), "float32")}
