"""Runs a graph with the op table's numpy references: the cpu backend and the tests' oracle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aotc.errors import ExecError
from aotc.ir.analysis import analyze
from aotc.ir.gather_ids import IndexRangeError, coordinate_sources, index_error_message, index_source, op_where
from aotc.ir.graph import Graph
from aotc.ir.ops import OPS, Op
from aotc.ir.ops.scatter import scatter_in_place
from aotc.ir.state import state_writers
from aotc.ir.symbolic import SymExpr
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import Attrs


def concrete_attrs(attrs: Attrs, env: Mapping[str, int]) -> Attrs:
    """Attrs with every symbolic dim evaluated; unchanged (no copy) when there are none."""
    if not any(_has_sym(v) for v in attrs.values()):
        return attrs
    return Attrs({k: _resolve(v, env) for k, v in attrs.items()})


def _has_sym(v: Any) -> bool:
    return isinstance(v, SymExpr) or (isinstance(v, tuple) and any(isinstance(x, SymExpr) for x in v))


def _resolve(v: Any, env: Mapping[str, int]) -> Any:
    if isinstance(v, SymExpr):
        return evaluate(v, env)
    if isinstance(v, tuple):
        return tuple(evaluate(x, env) if isinstance(x, SymExpr) else x for x in v)
    return v


class GraphRunner:
    """Precomputes liveness once so each call frees intermediates after their last use.

    Holds no per-call state, so one runner serves many threads at once. A graph's state writes (aotc/ir/state.py)
    run in place: each writes into the array fed for its state, which holds the state's new value after the call.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._free_after = analyze(graph).free_after
        writes = state_writers(graph)
        # Per node, what every call would otherwise look up again: its reference, whether its attrs
        # need the call's dims, and its outputs' numpy dtypes.
        self._steps = [
            (
                node,
                scatter_in_place if i in writes else OPS[node.op].ref,
                any(_has_sym(v) for v in node.attrs.values()),
                tuple(o.type.dtype.np for o in node.outputs),
            )
            for i, node in enumerate(graph.nodes)
        ]

    def run(self, feeds: Sequence[np.ndarray], env: Mapping[str, int]) -> list[np.ndarray]:
        g = self.graph
        if len(feeds) != len(g.inputs):
            raise ExecError(f"graph {g.name} takes {len(g.inputs)} inputs, got {len(feeds)}")
        vals: dict[int, np.ndarray] = {v.id: x for v, x in zip(g.inputs, feeds)}
        with np.errstate(all="ignore"):
            for i, step in enumerate(self._steps):
                node = step[0]
                outs = self._run_node(step, vals, env)
                for o, x in zip(node.outputs, outs):
                    vals[o.id] = x
                for vid in self._free_after[i]:
                    vals.pop(vid, None)
        return [vals[o.id] for o in g.outputs]

    def _run_node(self, step: tuple, vals: dict[int, np.ndarray], env: Mapping[str, int]) -> Sequence[np.ndarray]:
        node, ref, symbolic, dtypes = step
        if node.op is Op.CONSTANT:
            return (self.graph.constants[node.attrs["name"]],)
        attrs = concrete_attrs(node.attrs, env) if symbolic else node.attrs
        try:
            outs = ref([vals[v.id] for v in node.inputs], attrs)
        except IndexRangeError as e:
            # a scatter's position ends with the coordinate column: its input when built column by column (a state
            # write), else the indices' own
            column = coordinate_sources(self.graph, node)[e.position[-1]] if node.op is Op.SCATTER else None
            if column is not None:
                name, pos = column, None
            else:
                name, same_place = index_source(self.graph, node)
                pos = e.position if same_place else None
            raise ExecError(index_error_message(op_where(node), e.low, e.high, name, e.value, pos)) from e
        except ExecError as e:
            raise ExecError(f"{op_where(node)}: {e}") from e
        except (ValueError, IndexError, TypeError, OverflowError, MemoryError) as e:
            raise ExecError(f"{op_where(node)} failed: {e}") from e
        return [np.asarray(x, dtype=dt) for x, dt in zip(outs, dtypes)]


def run_graph(graph: Graph, feeds: Sequence[np.ndarray], env: Mapping[str, int]) -> list[np.ndarray]:
    return GraphRunner(graph).run(feeds, env)
