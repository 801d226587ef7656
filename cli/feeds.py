"""Input arrays for ``aotc run``: read from .npy files or drawn at random to fit the artifact's specs.

Random inputs: floats are standard normal, bools fair coin flips, and integers
are drawn from [0, 2) (0 or 1) because an integer input may be a token id, an
index or a mask and only those values are valid for every such input. Each is
drawn in its own dtype, with no float64 copy. Dynamic dims take their ``--dim``
value, else the size bound by a file given with ``--input``, else the value in
range nearest to 8 that meets ``multiple_of`` and the artifact's guards.

Every ``--dim`` value is checked against its range, and the shapes against the
artifact's guards, before any random input is built: an absurd size is an error
naming the dim's range, never an attempt to allocate it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, Symbol
from aotc.ir.symbolic import SymExpr
from aotc.ir.symbolic_values import evaluate
from aotc.runtime.guards import Binder, gather_inputs, input_specs
from aotc_cli.paths import require_file
from aotc_cli.text import format_size
from aotc_cli.user_error import UserError

DEFAULT_DIM = 8
_MAX_CANDIDATES = 16  # per symbol, when searching for values that meet the guards
_CHUNK = 1 << 20  # elements drawn at a time for half-precision inputs, which numpy can't draw directly

# Raises GuardError unless inputs of these dtypes and shapes fit the model (e.g. Executable.check).
Check = Callable[[Mapping[str, np.ndarray]], None]


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
        # nothing fits: the guard check in build_feeds says which guard fails
        env = first if first is not None else dict(fixed)
    return {name: env[name] for name in names}


def check_dim_values(graph: Graph, dims: Mapping[str, int]) -> None:
    """Each ``--dim`` names a dim of the artifact and lies in its range, on its ``multiple_of``."""
    symbols = {s.name: s for s in graph.symbols}
    unknown = sorted(set(dims) - set(symbols))
    if unknown:
        have = ", ".join(symbols) or "none: every dim is static"
        raise UserError(f"unknown dim {', '.join(map(repr, unknown))}; the artifact's dims are: {have}")
    for name, value in dims.items():
        s = symbols[name]
        allowed = f"[{s.min}, {s.max}]" + (f", a multiple of {s.multiple_of}" if s.multiple_of > 1 else "")
        if not s.min <= value <= s.max:
            raise UserError(f"--dim {name}={value} is outside the range of {name}: {allowed}")
        if value % s.multiple_of:
            raise UserError(f"--dim {name}={value} is not a multiple of {s.multiple_of}; {name} takes {allowed}")


def random_array(rng: np.random.Generator, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Random values drawn in ``dtype`` itself (at most a chunk of float32 for the half types)."""
    if dtype is DType.bool:
        return rng.integers(0, 2, size=shape, dtype=np.bool_)
    if dtype.is_int:
        return rng.integers(0, 2, size=shape, dtype=dtype.np)
    if dtype is DType.float32:
        return rng.standard_normal(shape, dtype=np.float32)
    out = np.empty(shape, dtype.np)
    flat = out.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        stop = min(start + _CHUNK, flat.size)
        flat[start:stop] = rng.standard_normal(stop - start, dtype=np.float32)
    return out


def _stand_in(name: str, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """An input of this dtype and shape that occupies no memory, for checking shapes before building inputs."""
    try:
        return np.broadcast_to(np.zeros((), dtype.np), shape)
    except ValueError as exc:  # a negative dim, or more elements than an index can count
        raise UserError(f"input {name!r} can't be built with shape {shape}: {exc}") from None


def _random_input(rng: np.random.Generator, name: str, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    try:
        return random_array(rng, dtype, shape)
    except MemoryError:
        size = format_size(int(np.prod(shape, dtype=object)) * dtype.itemsize)
        raise UserError(
            f"random input {name!r} of shape {shape} ({dtype.value}) needs {size}, more memory than is free; "
            "choose smaller --dim values"
        ) from None


def graph_check(graph: Graph) -> Check:
    """The check one variant's guards make: what ``build_feeds`` uses when no Executable is at hand."""
    binder, specs = Binder(graph), input_specs(graph)

    def check(feeds: Mapping[str, np.ndarray]) -> None:
        binder.bind(gather_inputs(specs, (), feeds))

    return check


def _load_npy(name: str, file: str) -> np.ndarray:
    require_file(file, f"--input {name}")
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
    graph: Graph,
    files: Mapping[str, str],
    dims: Mapping[str, int],
    random: bool,
    seed: int,
    check: Check | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Arrays for every input of ``graph`` (by name) and the dim values used.

    ``dims`` and the resulting shapes are checked before any random input is built: by ``check`` (pass
    ``Executable.check`` to accept what any variant accepts), else by ``graph``'s own guards.
    """
    if graph.states:  # a state's value is its session's, never the caller's
        n = graph.num_feeds
        graph = graph.replace(inputs=graph.inputs[:n], input_names=graph.input_names[:n], states=())
    unknown = sorted(set(files) - set(graph.input_names))
    if unknown:
        raise UserError(f"unknown input {', '.join(map(repr, unknown))}; inputs are: {', '.join(graph.input_names)}")
    missing = [n for n in graph.input_names if n not in files]
    if missing and not random:
        raise UserError(f"no value for input {', '.join(map(repr, missing))}: give --input NAME=FILE.npy or --random")
    check_dim_values(graph, dims)
    feeds: dict[str, np.ndarray] = {}
    bound = dict(dims)
    for value, name in zip(graph.inputs, graph.input_names):
        if name in files:
            feeds[name] = _load_npy(name, files[name])
            _bind_from_array(value.type.shape, feeds[name], bound, name)
    env = choose_dims(graph, bound)
    shapes = {
        name: tuple(int(evaluate(d, env)) for d in value.type.shape)
        for value, name in zip(graph.inputs, graph.input_names)
        if name not in feeds
    }
    stand_ins = {
        n: _stand_in(n, v.type.dtype, shapes[n]) for v, n in zip(graph.inputs, graph.input_names) if n in shapes
    }
    (check or graph_check(graph))(feeds | stand_ins)
    rng = np.random.default_rng(seed)
    for value, name in zip(graph.inputs, graph.input_names):
        if name in shapes:
            feeds[name] = _random_input(rng, name, value.type.dtype, shapes[name])
    return {n: feeds[n] for n in graph.input_names}, env
