from __future__ import annotations

import numpy as np
import pytest

from aotc.ir import Builder, DType, Graph, Op, Symbol, TensorType, sym
from aotc.ir.shapes import ShapeCtx

F32 = DType.float32


class GraphKit:
    """Small helper to build test graphs over one dynamic symbol ``seq`` in [1, 64]."""

    def __init__(self) -> None:
        self.seq = sym("seq")
        self.symbols = (Symbol("seq", 1, 64),)
        self.b = Builder(ShapeCtx({"seq": (1, 64)}))
        self.constants: dict[str, np.ndarray] = {}
        self.inputs = []
        self.rng = np.random.default_rng(0)

    def input(self, shape, dtype=F32):
        v = self.b.new_value(TensorType(dtype, tuple(shape)))
        self.inputs.append(v)
        return v

    def const(self, name, arr):
        self.constants[name] = arr
        return self.b.op(Op.CONSTANT, name=name, shape=arr.shape, dtype=DType(arr.dtype.name))

    def graph(self, *outputs) -> Graph:
        names = tuple(f"in{i}" for i in range(len(self.inputs)))
        tree = 0 if len(outputs) == 1 else {"tuple": list(range(len(outputs)))}
        return Graph(tuple(self.inputs), names, tuple(self.b.nodes), outputs, tree, self.symbols, (), self.constants)


@pytest.fixture
def kit() -> GraphKit:
    return GraphKit()
