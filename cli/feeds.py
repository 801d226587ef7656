"""Input arrays for ``aotc run``: read from .npy files or drawn at random to fit the artifact's specs.

Random inputs: floats are standard normal, bools fair coin flips, and integers
are drawn from [0, 2) (0 or 1) because an integer input may be a token id, an
index or a mask and only those values are valid for every such input. Dynamic
dims take their ``--dim`` value, else the size bound by a file given with
``--input``, else the value in range nearest to 8 that meets ``multiple_of``
and the artifact's guards.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, Symbol
from aotc.ir.symbolic import SymExpr, evaluate
from aotc_cli.errors import UserError

DEFAULT_DIM = 8
_MAX_CANDIDATES = 16  # per symbol, when searching for values that meet the guards


def output_names(tree: Any, prefix: str = "") -> list[tuple[int, str]]:
    """(output index, display name) per leaf: dict keys, tuple/list positions, or "output" alone."""
    if isinstance(tree, int):
        return [(tree, prefix or "output")]
    ((kind, items),) = tree.items()
    pairs = items if kind == "dict" else enumerate(items)
    out = []
    for key, sub in pairs:
        out += output_names(sub, f"{prefix}.{key}" if prefix else str(key))
    return out


def _candidates(s: Symbol) -> list[int]:
    """Values of ``s`` in range and a multiple of ``multiple_of``, nearest to DEFAULT_DIM first."""
    step = s.multiple_of
    lo, hi = -(-s.min // step) * step, s.max // step * step
    if lo > hi:
        return []
    start = min(max(-(-DEFAULT_DIM // step) * step, lo), hi)
    out: list[int] = []
    for k in range(_MAX_CANDIDATES):
        for v in (start + k * step, start - k * step):
            if lo <= v <= hi and v not in out:
                out.append(v)
    return out[:_MAX_CANDIDATES]


def choose_dims(graph: Graph, fixed: Mapping[str, int]) -> dict[str, int]:
    """A value per symbol: ``fixed`` ones as given, the others chosen to meet ranges and guards."""
    names = [s.name for s in graph.symbols]
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        have = ", ".join(names) or "none: every dim is static"
        raise UserError(f"unknown dim {', '.join(map(repr, unknown))}; the artifact's dims are: {have}")
    free = [s for s in graph.symbols if s.name not in fixed]
    choices = [_candidates(s) or [s.min] for s in free]
    first = None
    for combo in itertools.islice(itertools.product(*choices), 4096):
        env = dict(fixed) | {s.name: v for s, v in zip(free, combo)}
        first = first or env
        if all(g.holds(env) for g in graph.guards):
            break
    else:
        # nothing fits: run anyway and let the runtime's GuardError say which guard fails
        env = first if first is not None else dict(fixed)
    return {name: env[name] for name in names}


def random_array(rng: np.random.Generator, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    if dtype.is_float:
        return rng.standard_normal(shape).astype(dtype.np)
    if dtype is DType.bool:
        return rng.random(shape) < 0.5
    return rng.integers(0, 2, shape).astype(dtype.np)


def _load_npy(name: str, file: str) -> np.ndarray:
    if not Path(file).is_file():
        raise UserError(f"--input {name}: no such file: {file}")
    try:
        return np.load(file, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise UserError(f"--input {name}: cannot read {file} as a .npy array: {exc}") from exc


def _bind_from_array(graph_dims: tuple, array: np.ndarray, dims: dict[str, int], name: str) -> None:
    if len(graph_dims) != array.ndim:
        return  # the runtime reports the rank mismatch
    for i, d in enumerate(graph_dims):
        if isinstance(d, SymExpr) and d.is_symbol():
            have = dims.setdefault(d.symbol_name, array.shape[i])
            if have != array.shape[i]:
                raise UserError(
                    f"input {name!r} dim {i} ({d.symbol_name}) is {array.shape[i]} but {d.symbol_name} is {have} "
                    "(from --dim or another input)"
                )


def build_feeds(
    graph: Graph, files: Mapping[str, str], dims: Mapping[str, int], random: bool, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Arrays for every input of ``graph`` (by name) and the dim values used."""
    unknown = sorted(set(files) - set(graph.input_names))
    if unknown:
        raise UserError(f"unknown input {', '.join(map(repr, unknown))}; inputs are: {', '.join(graph.input_names)}")
    missing = [n for n in graph.input_names if n not in files]
    if missing and not random:
        raise UserError(f"no value for input {', '.join(map(repr, missing))}: give --input NAME=FILE.npy or --random")
    feeds: dict[str, np.ndarray] = {}
    bound = dict(dims)
    for value, name in zip(graph.inputs, graph.input_names):
        if name in files:
            feeds[name] = _load_npy(name, files[name])
            _bind_from_array(value.type.shape, feeds[name], bound, name)
    env = choose_dims(graph, bound)
    rng = np.random.default_rng(seed)
    for value, name in zip(graph.inputs, graph.input_names):
        if name not in feeds:
            shape = tuple(int(evaluate(d, env)) for d in value.type.shape)
            feeds[name] = random_array(rng, value.type.dtype, shape)
    return {n: feeds[n] for n in graph.input_names}, env
