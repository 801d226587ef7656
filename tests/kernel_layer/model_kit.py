"""The example models (models/*.py via their build()) traced and lowered to primitive graphs, with inputs."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from aotc.frontend.trace import trace
from aotc.ir.graph import Graph
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from aotc_cli.loader import import_file

MODELS = Path(__file__).resolve().parents[2] / "models"

# Small configs (as tests/models uses) and two values of every dynamic dim.
CONFIGS: dict[str, dict[str, Any]] = {
    "mlp": {},
    "gpt2": {},
    "bert": {},
    "cnn": {"width": 4},
    "lstm_ensemble": {"members": 2, "steps": 4, "hidden_size": 8},
}
DIMS: dict[str, list[dict[str, int]]] = {
    "mlp": [{"batch": 1}, {"batch": 5}],
    "gpt2": [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 9}],
    "bert": [{"batch": 1, "seq": 5}, {"batch": 3, "seq": 12}],
    "cnn": [{"batch": 1}, {"batch": 2}],
    "lstm_ensemble": [{"batch": 1}, {"batch": 3}],
}


@cache
def lowered(name: str, fuse_attention: bool = False) -> Graph:
    """The primitive graph (with SDPA nodes kept whole when ``fuse_attention``)."""
    model, inputs = import_file(MODELS / f"{name}.py").build(**CONFIGS[name])
    return lower(trace(model, inputs, name), CompileOptions(fuse_attention=fuse_attention))


def feeds(name: str, graph: Graph, dims: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """Random inputs: token ids below 100, attention masks with padding, normal floats elsewhere."""
    rng = np.random.default_rng(seed)
    out = []
    for v, input_name in zip(graph.inputs, graph.input_names):
        shape = tuple(d if isinstance(d, int) else dims[d.symbol_name] for d in v.type.shape)
        if input_name == "attention_mask":
            mask = np.ones(shape, np.int64)
            mask[1:, -1] = 0
            out.append(mask)
        elif v.type.dtype.is_int:
            out.append(rng.integers(0, 100, shape).astype(v.type.dtype.np))
        else:
            out.append(rng.standard_normal(shape).astype(v.type.dtype.np))
    return out
