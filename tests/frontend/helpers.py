"""Shared helpers for the frontend tests: trace a function or module, run the graph with the numpy references."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from aotc import Dim, TensorSpec
from aotc.frontend.trace import trace
from aotc.ir.evaluate import run_graph
from aotc.ir.graph import Graph, unflatten_tree


def bind(graph: Graph, feeds: list[np.ndarray]) -> dict[str, int]:
    """Symbol values from the input shapes; asserts static dims and every guard."""
    env: dict[str, int] = {}
    for v, x in zip(graph.inputs, feeds):
        assert len(v.type.shape) == x.ndim, (v.type, x.shape)
        for d, n in zip(v.type.shape, x.shape):
            if isinstance(d, int):
                assert d == n, (v.type, x.shape)
            else:
                assert env.setdefault(d.symbol_name, n) == n
    for g in graph.guards:
        assert g.holds(env), f"guard {g} fails for {env}"
    return env


def run(graph: Graph, *args: np.ndarray, **kwargs: np.ndarray) -> Any:
    """Run a traced graph on numpy inputs (by position or input name); returns the output structure."""
    feeds = list(args) + [kwargs[n] for n in graph.input_names[len(args) :]]
    env = bind(graph, feeds)
    return unflatten_tree(graph.output_tree, run_graph(graph, feeds, env))


def spec_of(x: np.ndarray, dims: Mapping[int, Dim] | None = None) -> TensorSpec:
    """A TensorSpec for x's shape with some axes replaced by Dims."""
    shape = [(dims or {}).get(i, n) for i, n in enumerate(x.shape)]
    return TensorSpec(shape, x.dtype.name if x.dtype != np.float64 else "float32")


def trace_run(fn: Callable[..., Any], *arrays: np.ndarray, dims: Mapping[int, Dim] | None = None) -> Any:
    """Trace fn over inputs shaped like arrays (axes in ``dims`` dynamic in every input) and run it on them."""
    names = list(inspect.signature(fn).parameters)[: len(arrays)]  # inputs bind to parameters by name
    specs = {n: spec_of(a, {i: d for i, d in (dims or {}).items() if i < a.ndim}) for n, a in zip(names, arrays)}
    graph = trace(fn, specs)
    return run(graph, *arrays)


def line_of(marker: str) -> int:
    """The line number of the caller's source line that contains ``marker`` (in a comment)."""
    path = inspect.stack()[1].filename
    with open(path) as f:
        hits = [i for i, line in enumerate(f, start=1) if marker in line and "line_of(" not in line]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)
