"""Input checks that run before anything else: names, arrays, dtypes, ranks, static dims, symbols, guards.

Each failure raises GuardError naming the input, the dim, the value and the broken constraint, e.g.
``input 'x' dim 1 (seq) = 4096 is outside [1, 2048]``. Binders hold only what they precompute at load
time, so one binder serves many threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.errors import ArtifactError, GuardError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, Guard
from aotc.ir.shapes import fmt_shape
from aotc.ir.symbolic import SymExpr, sym, to_infix
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import Shape, ShapeDim, TensorType


@dataclass(frozen=True)
class InputSpec:
    """One model input as callers see it: name, dtype and symbolic shape."""

    name: str
    dtype: DType
    shape: Shape

    def __str__(self) -> str:
        return f"{self.name}: {TensorType(self.dtype, self.shape)}"


def input_specs(graph: Graph) -> tuple[InputSpec, ...]:
    """The inputs a caller feeds (a state's input is the session's, runtime/session.py)."""
    n = graph.num_feeds
    return tuple(
        InputSpec(name, v.type.dtype, v.type.shape) for name, v in zip(graph.input_names[:n], graph.inputs[:n])
    )


def gather_inputs(specs: Sequence[InputSpec], args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[np.ndarray]:
    """Arrays in input order from positional and keyword arguments, each of the exact dtype and rank.

    Anything ``np.asarray`` accepts is taken, but never cast: a float64 array for a float32 input is an error.
    """
    names = [s.name for s in specs]
    if len(args) > len(specs):
        raise GuardError(f"got {len(args)} positional inputs, but the model takes {len(specs)}: {', '.join(names)}")
    given = dict(zip(names, args))
    for key, value in kwargs.items():
        if key in given:
            raise GuardError(f"input {key!r} is given both by position and by name")
        given[key] = value
    unknown = [k for k in given if k not in names]
    if unknown:
        raise GuardError(f"unknown input(s) {', '.join(map(repr, unknown))}; the model takes {', '.join(names)}")
    missing = [n for n in names if n not in given]
    if missing:
        raise GuardError(f"missing input(s) {', '.join(map(repr, missing))}; the model takes {', '.join(names)}")
    return [_as_array(s, given[s.name]) for s in specs]


class InputGatherer:
    """``gather_inputs`` for one model's inputs, with what every call reads precomputed: the common call (every
    input a numpy array of its exact dtype and rank, all given by position or all by name in a dict) costs a
    lookup and a comparison per input; any other call goes through ``gather_inputs``, which accepts or refuses it
    with its own messages."""

    def __init__(self, specs: Sequence[InputSpec]) -> None:
        self.specs = tuple(specs)
        self._names = tuple(s.name for s in self.specs)
        self._wants = tuple((s.dtype.np, len(s.shape)) for s in self.specs)

    def __call__(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[np.ndarray]:
        values: list[Any] | None = None
        if not kwargs:
            if len(args) == len(self._names):
                values = list(args)
        elif not args and type(kwargs) is dict and len(kwargs) == len(self._names):
            values = [kwargs.get(name) for name in self._names]
        if values is not None:
            for value, (dtype, rank) in zip(values, self._wants):
                if type(value) is not np.ndarray or value.dtype != dtype or value.ndim != rank:
                    break
            else:
                return values
        return gather_inputs(self.specs, args, kwargs)


def _as_array(spec: InputSpec, value: Any) -> np.ndarray:
    if type(value) is np.ndarray and value.dtype == spec.dtype.np and value.ndim == len(spec.shape):
        return value  # the common case, checked without building the messages below (every call pays for it)
    want = f"expected a numpy array of {spec.dtype.value} with shape {fmt_shape(spec.shape)}"
    if value is None or isinstance(value, (str, bytes)):
        raise GuardError(f"input {spec.name!r} is {_describe(value)}, {want}")
    if isinstance(value, np.ma.MaskedArray):
        # Dropping the mask would compute with whatever the masked slots hold: make the caller choose.
        raise GuardError(
            f"input {spec.name!r} is a numpy masked array, {want}; pass x.filled(value) to fill the masked "
            "entries, or x.data to use them as they are"
        )
    try:
        # A subclass (np.matrix, a memmap) becomes a plain view: the references must see ndarray semantics.
        arr = np.asarray(value)
    except Exception as e:  # np.asarray raises many kinds for ragged or exotic objects
        raise GuardError(f"input {spec.name!r} is {_describe(value)}, which is not an array ({e}); {want}") from None
    if arr.dtype.kind in "OUS":  # objects and strings; not "V", which bfloat16 is
        what = f"a numpy array of dtype {arr.dtype}" if isinstance(value, np.ndarray) else _describe(value)
        raise GuardError(f"input {spec.name!r} is {what}, {want}")
    if arr.ndim != len(spec.shape):
        raise GuardError(
            f"input {spec.name!r} has shape {arr.shape} (rank {arr.ndim}), expected rank {len(spec.shape)}: "
            f"{fmt_shape(spec.shape)}"
        )
    if arr.dtype != spec.dtype.np:
        if arr.dtype.newbyteorder("=") == spec.dtype.np:
            # Refused, not converted, as torch.from_numpy does: inputs are read in place, never copied.
            raise GuardError(
                f"input {spec.name!r} has dtype {arr.dtype.str!r} ({arr.dtype.name} in non-native byte order), "
                f"expected {spec.dtype.value} in native byte order; convert it with x.astype(np.{spec.dtype.value})"
            )
        raise GuardError(f"input {spec.name!r} has dtype {arr.dtype.name}, expected {spec.dtype.value}")
    return arr


def _describe(value: Any) -> str:
    """``None``, ``a str ('hello')``, ``a list``: what a non-array input is, briefly."""
    if value is None:
        return "None"
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    if isinstance(value, (str, bytes)):
        text = repr(value)
        return f"{article} {kind} ({text if len(text) <= 40 else text[:37] + '...'})"
    return f"{article} {kind}"


# -- binding symbols -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Static:
    input: int
    dim: int
    value: int


@dataclass(frozen=True)
class _Bind:
    """Bind ``symbol`` from ``(value - offset) / scale`` of one input dim; a pure symbol has scale 1, offset 0."""

    input: int
    dim: int
    expr: ShapeDim
    symbol: str
    scale: int
    offset: int


@dataclass(frozen=True)
class _Check:
    """A dim whose expression is known once its symbols are bound."""

    input: int
    dim: int
    expr: SymExpr


class Binder:
    """Binds a variant's symbols from input shapes and checks every fact it records about them."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.names = graph.input_names
        self._symbols = {s.name: s for s in graph.symbols}
        self._steps: list[_Static | _Bind | _Check] = []
        self._plan()

    def _plan(self) -> None:
        # Static dims first, then pure symbols, then expressions that one unbound symbol solves, then
        # expressions over bound symbols: the cheapest and clearest message for each mistake comes first.
        exprs: list[tuple[int, int, SymExpr]] = []
        bound: set[str] = set()
        for i, v in enumerate(self.graph.inputs[: self.graph.num_feeds]):
            for d, e in enumerate(v.type.shape):
                if isinstance(e, int):
                    self._steps.append(_Static(i, d, e))
                else:
                    exprs.append((i, d, e))
        pending: list[tuple[int, int, SymExpr]] = []
        for i, d, e in exprs:
            if e.is_symbol():
                self._steps.append(_Bind(i, d, e, e.symbol_name, 1, 0))
                bound.add(e.symbol_name)
            else:
                pending.append((i, d, e))
        while pending:
            progress, rest = False, []
            for i, d, e in pending:
                free = e.free_symbols() - bound
                solved = _linear(e, next(iter(free))) if len(free) == 1 else None
                if not free:
                    self._steps.append(_Check(i, d, e))
                    progress = True
                elif solved:
                    self._steps.append(_Bind(i, d, e, *solved))
                    bound.add(solved[0])
                    progress = True
                else:
                    rest.append((i, d, e))
            if not progress:
                break
            pending = rest
        needed = _used_symbols(self.graph) - bound
        if needed:
            raise ArtifactError(
                f"variant {self.graph.name!r}: symbol(s) {', '.join(sorted(needed))} can't be bound from the input shapes"
            )

    def bind(self, arrays: Sequence[np.ndarray]) -> dict[str, int]:
        """The symbol values for these inputs; GuardError if any fact about them does not hold."""
        env: dict[str, int] = {}
        seen: dict[str, tuple[int, int]] = {}
        for step in self._steps:
            value = int(arrays[step.input].shape[step.dim])
            if isinstance(step, _Static):
                if value != step.value:
                    raise GuardError(f"{self._where(step.input, step.dim)} = {value}, expected {step.value}")
            elif isinstance(step, _Check):
                want = evaluate(step.expr, env)
                if value != want:
                    raise GuardError(
                        f"{self._where(step.input, step.dim)} = {value}, expected {to_infix(step.expr)} = {want}"
                    )
            else:
                self._bind(step, value, env, seen)
        for g in self.graph.guards:
            if not g.holds(env):
                raise GuardError(self._broken(g, env, seen))
        return env

    def _bind(self, step: _Bind, value: int, env: dict[str, int], seen: dict[str, tuple[int, int]]) -> None:
        name = step.symbol
        if name in env:
            want = evaluate(step.expr, env)
            if value != want:
                first = self._where(*seen[name], name)
                where = self._where(step.input, step.dim, to_infix(step.expr))
                raise GuardError(f"{where} = {value}, but {first} = {env[name]}")
            return
        x = (value - step.offset) // step.scale
        s = self._symbols.get(name)
        if not (value - step.offset) % step.scale and (
            s is None or (s.min <= x <= s.max and not x % s.multiple_of)
        ):  # the common case: no message to build
            env[name] = x
            seen[name] = (step.input, step.dim)
            return
        where = self._where(step.input, step.dim, to_infix(step.expr))
        if (value - step.offset) % step.scale:
            raise GuardError(f"{where} = {value}, which is {to_infix(step.expr)} for no integer {name}")
        got = f"{where} = {value}" + (f" gives {name} = {x}, which" if step.scale != 1 or step.offset else "")
        if s is not None and not s.min <= x <= s.max:
            raise GuardError(f"{got} is outside [{s.min}, {s.max}]")
        if s is not None and x % s.multiple_of:
            raise GuardError(f"{got} is not a multiple of {s.multiple_of}")
        env[name] = x
        seen[name] = (step.input, step.dim)

    def _where(self, input_index: int, dim: int, label: str = "") -> str:
        return f"input {self.names[input_index]!r} dim {dim}" + (f" ({label})" if label else "")

    def _broken(self, g: Guard, env: Mapping[str, int], seen: Mapping[str, tuple[int, int]]) -> str:
        parts = []
        for name in sorted(_free(g.lhs) | _free(g.rhs), key=lambda s: seen[s]):
            i, d = seen[name]
            dim = self.graph.inputs[i].type.shape[d]
            label = name if isinstance(dim, SymExpr) and dim.is_symbol() else f"{to_infix(dim)}, {name} = {env[name]}"
            parts.append(f"{self._where(i, d, label)} = {int(evaluate(dim, env))}")
        at = f" (recorded at {g.loc})" if g.loc else ""
        subject = ", ".join(parts) if parts else "the inputs"
        return f"{subject} breaks guard {to_infix(g.lhs)} {g.rel} {to_infix(g.rhs)}{at}"


def _linear(e: SymExpr, name: str) -> tuple[str, int, int] | None:
    """(name, scale, offset) when e == scale*name + offset with scale != 0."""
    offset = evaluate(e, {name: 0})
    scale = evaluate(e, {name: 1}) - offset
    if scale == 0 or e != scale * sym(name) + offset:
        return None
    return name, scale, offset


def _free(e: ShapeDim) -> frozenset[str]:
    return e.free_symbols() if isinstance(e, SymExpr) else frozenset()


def _used_symbols(g: Graph) -> set[str]:
    """Symbols the graph needs a value for: in guards, value shapes and attrs."""
    used: set[str] = set()
    for gd in g.guards:
        used |= _free(gd.lhs) | _free(gd.rhs)
    # Thousands of nodes share a few dozen distinct types and attr sets: visit each of those once.
    types = {v.type for v in g.inputs} | {o.type for n in g.nodes for o in n.outputs}
    for t in types:
        used |= _leaf_symbols(t.shape)
    for attrs in {n.attrs for n in g.nodes}:
        used |= _leaf_symbols(tuple(attrs.values()))
    return used


def _leaf_symbols(x: Any) -> frozenset[str]:
    if isinstance(x, SymExpr):
        return x.free_symbols()
    if isinstance(x, tuple):
        return frozenset().union(*(_leaf_symbols(v) for v in x))
    return frozenset()
