"""split by a dynamic size that divides the dim (ProphetNet: torch.export writes chunk(3) of a 3*seq dim as a
split by the SymInt seq), against numpy; a size that does not divide it stays a trace error."""

from __future__ import annotations

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec, TraceError
from aotc.frontend.trace import trace

from .helpers import run

SPEC = {"x": TensorSpec((2, Dim("seq", 1, 16), 3))}


def test_a_split_by_a_dim_that_divides_the_dim() -> None:
    def f(x):
        streams = aotc.cat([x, x * 2, x * 3], dim=1)
        main, first, second = streams.split(x.shape[1], dim=1)
        return main + first * 10 + second * 100

    g = trace(f, SPEC)
    for s in (1, 5):
        x = np.arange(2 * s * 3, dtype=np.float32).reshape(2, s, 3)
        y = run(g, x)
        np.testing.assert_array_equal(y, x * 321)


def test_a_split_by_a_dim_that_does_not_divide_the_dim_is_refused() -> None:
    def f(x):
        return aotc.cat([x, x[:, :1]], dim=1).split(x.shape[1], dim=1)

    with pytest.raises(TraceError, match="split size must be a positive int or a dim that divides"):
        trace(f, SPEC)
