"""The Graph: inputs, topologically ordered nodes, outputs, symbols, guards and constants."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from aotc.ir.symbolic import SymExpr, to_infix
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import Node, Value

RELATIONS = ("==", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True, slots=True)
class Symbol:
    """A dynamic dimension: a name with an inclusive range and an optional divisor."""

    name: str
    min: int
    max: int
    multiple_of: int = 1

    def __str__(self) -> str:
        mult = f", multiple_of={self.multiple_of}" if self.multiple_of != 1 else ""
        return f"{self.name} in [{self.min}, {self.max}]{mult}"


@dataclass(frozen=True, slots=True)
class Guard:
    """``lhs rel rhs`` must hold for the symbols a call binds; ``loc`` is where tracing decided it."""

    lhs: int | SymExpr
    rel: str
    rhs: int | SymExpr
    loc: str = ""

    def holds(self, env: Mapping[str, int]) -> bool:
        a, b = evaluate(self.lhs, env), evaluate(self.rhs, env)
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[self.rel]

    def __str__(self) -> str:
        where = f" (from {self.loc})" if self.loc else ""
        return f"{to_infix(self.lhs)} {self.rel} {to_infix(self.rhs)}{where}"


@dataclass(frozen=True, slots=True)
class State:
    """A tensor that lives across calls (a KV cache), owned by a runtime Session: one copy per session.

    A graph with ``k`` states reads state ``i`` as its input ``len(inputs) - k + i`` (named ``name``) and leaves its
    value after the call as its output ``len(outputs) - k + i``; between them only in-place writes (SCATTER nodes
    chained from the one to the other, aotc/ir/state.py) change it, so every backend keeps one buffer per state.
    Keeping states at the ends of the graph's own inputs and outputs lets every pass treat them as plain values.
    ``init`` names the constant its value starts from (and returns to on reset), broadcast to its shape: a scalar
    zero for a zero-initialised cache, so the file stores a few bytes for it.
    """

    name: str
    init: str

    def __str__(self) -> str:
        return f"{self.name} (init {self.init})"


def _frozen(d: Mapping[str, np.ndarray] | None) -> Mapping[str, np.ndarray]:
    return MappingProxyType(dict(d or {}))


@dataclass(frozen=True, eq=False)  # identity equality: constants are arrays, which don't compare to one bool
class Graph:
    """A whole model. ``output_tree`` is a JSON-able structure whose int leaves index ``outputs``:
    an int, ``{"tuple": [...]}``, ``{"list": [...]}`` or ``{"dict": [[key, sub], ...]}``."""

    inputs: tuple[Value, ...]
    input_names: tuple[str, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Value, ...]
    output_tree: Any = 0
    symbols: tuple[Symbol, ...] = ()
    guards: tuple[Guard, ...] = ()
    constants: Mapping[str, np.ndarray] = field(default_factory=lambda: MappingProxyType({}))
    name: str = "model"
    states: tuple[State, ...] = ()  # trailing inputs and outputs that live across calls (see State)

    def __post_init__(self) -> None:
        object.__setattr__(self, "constants", _frozen(self.constants))

    def replace(self, **changes: Any) -> Graph:
        return dataclasses.replace(self, **changes)

    def symbol(self, name: str) -> Symbol:
        for s in self.symbols:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def num_feeds(self) -> int:
        """How many inputs a caller feeds: the inputs before the states'."""
        return len(self.inputs) - len(self.states)

    @property
    def num_results(self) -> int:
        """How many outputs a caller gets (``output_tree`` indexes them): the outputs before the states'."""
        return len(self.outputs) - len(self.states)

    @property
    def state_inputs(self) -> tuple[Value, ...]:
        """Each state's value as a call starts."""
        return self.inputs[self.num_feeds :]

    @property
    def state_outputs(self) -> tuple[Value, ...]:
        """Each state's value as a call ends."""
        return self.outputs[self.num_results :]

    @property
    def ranges(self) -> dict[str, tuple[int, int]]:
        return {s.name: (s.min, s.max) for s in self.symbols}

    @property
    def multiples(self) -> dict[str, int]:
        return {s.name: s.multiple_of for s in self.symbols}

    def max_value_id(self) -> int:
        ids = [v.id for v in self.inputs] + [o.id for n in self.nodes for o in n.outputs]
        return max(ids, default=-1)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op.value] = counts.get(n.op.value, 0) + 1
        return dict(sorted(counts.items()))

    def __str__(self) -> str:
        lines = [f"graph {self.name}("]
        lines += [f"  {name}: {v} {v.type}," for name, v in zip(self.input_names, self.inputs)]
        lines.append(")")
        lines += [f"  symbol {s}" for s in self.symbols]
        lines += [f"  guard {g}" for g in self.guards]
        lines += [f"  state {st}: {v} -> {o}" for st, v, o in zip(self.states, self.state_inputs, self.state_outputs)]
        lines += [f"  {n}" for n in self.nodes]
        lines.append("  return " + ", ".join(str(o) for o in self.outputs))
        return "\n".join(lines)


def flatten_tree(tree: Any) -> list[int]:
    """Output indices in the order the tree lists them."""
    if isinstance(tree, int):
        return [tree]
    if isinstance(tree, dict):
        ((kind, items),) = tree.items()
        if kind == "dict":
            return [i for _, sub in items for i in flatten_tree(sub)]
        return [i for sub in items for i in flatten_tree(sub)]
    raise TypeError(f"bad output tree {tree!r}")


def unflatten_tree(tree: Any, leaves: list[Any]) -> Any:
    """Rebuild the user's output structure around ``leaves``."""
    if isinstance(tree, int):
        return leaves[tree]
    ((kind, items),) = tree.items()
    if kind == "tuple":
        return tuple(unflatten_tree(t, leaves) for t in items)
    if kind == "list":
        return [unflatten_tree(t, leaves) for t in items]
    return {k: unflatten_tree(t, leaves) for k, t in items}
