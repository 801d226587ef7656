"""A small image classifier: two conv / batch-norm / ReLU / pool stages and a linear head.

Input ``images``: (batch, 3, 32, 32) float32, dynamic batch. Output: (batch, 10) logits.
Batch norm uses its running statistics (inference mode), as every compiled model does.
"""

from __future__ import annotations

import zlib

import numpy as np

import aotc.functional as F
from aotc import Dim, TensorSpec, nn


class SmallCNN(nn.Module):
    def __init__(self, channels: int = 3, width: int = 16, classes: int = 10, image_size: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(width, 2 * width, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.pool2 = nn.AvgPool2d(2)
        self.fc = nn.Linear(2 * width * (image_size // 4) ** 2, classes)

    def forward(self, images):
        x = self.pool1(F.relu(self.bn1(self.conv1(images))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        return self.fc(x.flatten(1))


def random_weights(model: nn.Module, seed: int) -> dict[str, np.ndarray]:
    """He-normal conv/linear weights, non-trivial batch-norm statistics (so folding them is
    visible in tests); seeded per key so it does not depend on key order."""
    out = {}
    for name, value in model.state_dict().items():
        shape = tuple(value.shape)
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        if name.endswith("running_var"):
            arr = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("num_batches_tracked"):
            out[name] = np.zeros(shape, np.asarray(value).dtype)
            continue
        elif len(shape) >= 2:
            arr = rng.normal(0.0, np.sqrt(2.0 / np.prod(shape[1:])), shape)
        elif name.startswith("bn") and name.endswith("weight"):
            arr = 1.0 + 0.1 * rng.normal(size=shape)
        else:
            arr = 0.1 * rng.normal(size=shape)
        out[name] = arr.astype(np.float32)
    return out


def build(width: int = 16, classes: int = 10, seed: int = 0) -> tuple[SmallCNN, dict[str, TensorSpec]]:
    model = SmallCNN(width=width, classes=classes)
    model.load_state_dict(random_weights(model, seed))
    batch = Dim("batch", min=1, max=256)
    return model, {"images": TensorSpec((batch, 3, 32, 32), "float32")}
