"""An ensemble of stacked bidirectional LSTMs, with the cell written out from matmuls and
elementwise ops (no fused LSTM op), dynamic batch and a static number of time steps.

Input ``x``: (batch, steps, input_size) float32. Each member runs ``num_layers``
bidirectional layers: the forward direction reads t = 0..steps-1, the backward
direction runs the same cell code over the time-flipped sequence and flips its
outputs back; the two are concatenated on the feature axis. The output is the
sum of the members' top-layer outputs, shape (batch, steps, 2 * hidden_size).

Gate order and weight layout follow ``torch.nn.LSTM`` (i, f, g, o stacked in
``ih.weight`` (4H, in) and ``hh.weight`` (4H, H)).
"""

from __future__ import annotations

import zlib

import numpy as np

import aotc
from aotc import Dim, TensorSpec, nn


class LSTMCell(nn.Module):
    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size)

    def forward(self, x_t, h, c):
        gates = self.ih(x_t) + self.hh(h)
        i, f, g, o = gates.chunk(4, dim=1)
        c = aotc.sigmoid(f) * c + aotc.sigmoid(i) * aotc.tanh(g)
        h = aotc.sigmoid(o) * aotc.tanh(c)
        return h, c


class Direction(nn.Module):
    """One cell unrolled over the (static) time axis of a (batch, steps, features) tensor."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.cell = LSTMCell(input_size, hidden_size)

    def forward(self, x):
        batch, steps = x.shape[0], x.shape[1]
        h = aotc.zeros(batch, self.cell.hidden_size)
        c = aotc.zeros(batch, self.cell.hidden_size)
        outputs = []
        for t in range(steps):
            h, c = self.cell(x[:, t], h, c)
            outputs.append(h)
        return aotc.stack(outputs, dim=1)


class BiLayer(nn.Module):
    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.fwd = Direction(input_size, hidden_size)
        self.bwd = Direction(input_size, hidden_size)

    def forward(self, x):
        backward = aotc.flip(self.bwd(aotc.flip(x, dims=[1])), dims=[1])
        return aotc.cat([self.fwd(x), backward], dim=2)


class BiLSTM(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int) -> None:
        super().__init__()
        sizes = [input_size] + [2 * hidden_size] * (num_layers - 1)
        self.layers = nn.ModuleList([BiLayer(n, hidden_size) for n in sizes])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class LSTMEnsemble(nn.Module):
    def __init__(self, input_size: int = 16, hidden_size: int = 32, num_layers: int = 2, members: int = 3) -> None:
        super().__init__()
        self.members = nn.ModuleList([BiLSTM(input_size, hidden_size, num_layers) for _ in range(members)])

    def forward(self, x):
        total = None
        for member in self.members:
            y = member(x)
            total = y if total is None else total + y
        return total


def random_weights(model: nn.Module, seed: int) -> dict[str, np.ndarray]:
    """torch.nn.LSTM's init: uniform(+-1/sqrt(hidden)) for every weight and bias; seeded per key."""
    out = {}
    for name, value in model.state_dict().items():
        shape = tuple(value.shape)
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        bound = 1.0 / np.sqrt(shape[0] // 4)
        out[name] = rng.uniform(-bound, bound, shape).astype(np.float32)
    return out


def build(
    input_size: int = 16,
    hidden_size: int = 32,
    num_layers: int = 2,
    members: int = 3,
    steps: int = 10,
    seed: int = 0,
) -> tuple[LSTMEnsemble, dict[str, TensorSpec]]:
    model = LSTMEnsemble(input_size, hidden_size, num_layers, members)
    model.load_state_dict(random_weights(model, seed))
    batch = Dim("batch", min=1, max=256)
    return model, {"x": TensorSpec((batch, steps, input_size), "float32")}
