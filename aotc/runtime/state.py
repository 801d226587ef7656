"""A session's state: the buffers that hold each state tensor across calls, and the checks of a write's positions.

A stateful variant (aotc/ir/state.py) reads each state as a trailing input and leaves it as a trailing output; a
``StateMemory`` holds one buffer per state for one session, allocated at its first call (when the call's dims fix
any dynamic size), filled from the state's initial value, refilled by ``reset``. Backends that write state in place
(reference, interpret; cuda on the device) update ``arrays``; onnxruntime computes each new state into a second
buffer (``spare``) and the two swap (aotc/runtime/backends/onnxrt.py).

``position_checks`` finds each write whose positions come straight from an input (``cache_position``): the session
checks those inputs before any backend runs, so a bad position is refused with nothing written and the session
stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.errors import ExecError, GuardError
from aotc.ir.gather_ids import coordinate_sources, index_error_message, index_range, op_where
from aotc.ir.graph import Graph
from aotc.ir.ops.scatter import scatter_allows_negative
from aotc.ir.state import state_chains
from aotc.ir.symbolic import SymExpr, to_infix
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import ShapeDim, TensorType


@dataclass(frozen=True)
class StateSpec:
    """One state as a session holds it: its name, type (a shape over the graph's symbols) and initial value."""

    name: str
    type: TensorType
    init: np.ndarray

    def shape(self, env: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(evaluate(d, env) for d in self.type.shape)

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"


def state_specs(graph: Graph) -> tuple[StateSpec, ...]:
    return tuple(
        StateSpec(st.name, v.type, graph.constants[st.init]) for st, v in zip(graph.states, graph.state_inputs)
    )


def state_symbols(specs: Sequence[StateSpec]) -> tuple[str, ...]:
    """The symbols the states' shapes use, sorted: a session's first call binds them for its lifetime."""
    names: set[str] = set()
    for s in specs:
        for d in s.type.shape:
            if isinstance(d, SymExpr):
                names |= d.free_symbols()
    return tuple(sorted(names))


class StateMemory:
    """One session's state buffers (numpy arrays), for the dims ``dims`` (the values of ``state_symbols``).

    ``spare`` and ``binding`` belong to a backend that computes state out of place (onnxruntime): a second buffer per
    state and whatever it keeps per session to bind them. Not thread-safe: its session serializes its calls.
    """

    def __init__(
        self, specs: Sequence[StateSpec], env: Mapping[str, int], dims: tuple[int, ...], widen: bool = False
    ) -> None:
        self.specs = tuple(specs)
        self.dims = dims
        # widen: half-precision states held as float32 (for onnxruntime, whose model computes in float32)
        self.arrays = [np.empty(s.shape(env), _held_dtype(s, widen)) for s in self.specs]
        self.spare: list[np.ndarray | None] | None = None
        self.binding: Any = None
        self.reset()

    def reset(self) -> None:
        """Every state back to its initial value, in place."""
        for a, s in zip(self.arrays, self.specs):
            np.copyto(a, s.init)

    @property
    def nbytes(self) -> int:
        """The bytes this session holds for its states (a spare set included)."""
        return sum(a.nbytes for a in self.arrays) + sum(a.nbytes for a in self.spare or () if a is not None)

    def close(self) -> None:
        self.arrays, self.spare, self.binding = [], None, None


def _held_dtype(s: StateSpec, widen: bool) -> np.dtype:
    return np.dtype(np.float32) if widen and s.type.dtype.value in ("float16", "bfloat16") else s.type.dtype.np


@dataclass(frozen=True)
class PositionCheck:
    """A write whose coordinate ``column`` comes straight from input ``position`` (``name``): its ids must lie in
    ``[low, high)`` (expressions over the symbols), checked before the call runs."""

    position: int
    name: str
    where: str
    low: ShapeDim
    high: ShapeDim


def position_checks(graph: Graph) -> tuple[PositionCheck, ...]:
    """The checks of every state write's coordinates that come unchanged from a graph input."""
    index = {name: i for i, name in enumerate(graph.input_names[: graph.num_feeds])}
    out = []
    for chain in state_chains(graph):
        for w in chain.writers:
            node = graph.nodes[w]
            data = node.inputs[0].type.shape
            negative = scatter_allows_negative(node.attrs)
            for j, name in enumerate(coordinate_sources(graph, node)):
                if name in index:
                    low, high = index_range(data[j], negative)
                    out.append(PositionCheck(index[name], name, op_where(node), low, high))
    return tuple(out)


def check_positions(checks: Sequence[PositionCheck], arrays: Sequence[np.ndarray], env: Mapping[str, int]) -> None:
    """ExecError (aotc's one message for a bad id) for the first id outside its write's range."""
    for c in checks:
        ids = arrays[c.position]
        if type(ids) is not np.ndarray:
            # a GPU tensor (cuda): the write's kernel checks its ids, refusing the call after it ran (ExecError)
            continue
        if not ids.size:
            continue
        low = c.low if type(c.low) is int else evaluate(c.low, env)
        high = c.high if type(c.high) is int else evaluate(c.high, env)
        if int(ids.min()) < low or int(ids.max()) >= high:
            bad = np.argwhere((ids < low) | (ids >= high))[0]
            pos = tuple(int(p) for p in bad)
            raise ExecError(index_error_message(c.where, low, high, c.name, int(ids[pos]), pos))


def dims_mismatch(
    specs: Sequence[StateSpec], symbols: Sequence[str], have: tuple[int, ...], env: Mapping[str, int]
) -> GuardError:
    """The refusal of a call whose dims would resize a session's states."""
    now = ", ".join(f"{n}={env[n]}" for n in symbols)
    was = ", ".join(f"{n}={v}" for n, v in zip(symbols, have))
    sized = ", ".join(f"{s.name} {[to_infix(d) for d in s.type.shape]}" for s in specs)
    return GuardError(
        f"this call binds {now}, but the session's states ({sized}) were allocated for {was} at its first call; "
        "reset() the session (or open another) to change them"
    )
