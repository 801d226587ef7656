"""Builds small test graphs with the IR Builder; shared by the artifact and runtime tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from aotc.ir import Builder, DType, Graph, Guard, Op, Symbol, TensorType, Value
from aotc.ir.verify import graph_ctx


def make_graph(
    inputs: Mapping[str, TensorType],
    body: Callable[..., Sequence[Value]],
    *,
    symbols: Sequence[Symbol] = (),
    guards: Sequence[Guard] = (),
    constants: Mapping[str, np.ndarray] | None = None,
    tree: Any = None,
    name: str = "model",
) -> Graph:
    """``body(builder, *input_values)`` emits nodes and returns the outputs."""
    stub = Graph((), (), (), (), {"tuple": []}, tuple(symbols), tuple(guards))
    b = Builder(graph_ctx(stub))
    ins = tuple(b.new_value(t) for t in inputs.values())
    outs = tuple(body(b, *ins))
    tree = {"tuple": list(range(len(outs)))} if tree is None else tree
    return Graph(ins, tuple(inputs), tuple(b.nodes), outs, tree, tuple(symbols), tuple(guards), constants or {}, name)


def const(b: Builder, name: str, arr: np.ndarray) -> Value:
    return b.op(Op.CONSTANT, name=name, shape=tuple(arr.shape), dtype=DType(arr.dtype.name))
