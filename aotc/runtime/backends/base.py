"""The small interface every backend implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from aotc.ir.launch import KernelBinary
from aotc.ir.variant import Variant


class Program(Protocol):
    """One variant prepared for a device. Holds no per-call state: many threads may call ``run`` at once."""

    def run(self, feeds: Sequence[np.ndarray], env: Mapping[str, int]) -> list[np.ndarray]:
        """Outputs for inputs that already passed every guard; ``env`` binds the symbols."""
        ...


class Backend(Protocol):
    name: str

    def prepare(self, variant: Variant, binaries: Mapping[str, KernelBinary]) -> Program:
        """``variant`` (its graph and launch plan) ready to run. ``binaries``: the artifact's compiled kernels by
        name, empty when it has none. A backend that runs no kernels reads the graph only."""
        ...
