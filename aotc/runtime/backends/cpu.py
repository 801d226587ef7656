"""The cpu backend: the op table's numpy references run over the primitive graph."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from aotc.ir.evaluate import GraphRunner
from aotc.ir.graph import Graph
from aotc.ir.launch import KernelBinary
from aotc.ir.variant import Variant
from aotc.runtime.state import StateMemory


class CpuBackend:
    """``name`` is "cpu" where it stands in for onnxruntime (see backends/__init__.py), "reference" when asked for."""

    def __init__(self, name: str = "cpu") -> None:
        self.name = name

    def prepare(self, variant: Variant, binaries: Mapping[str, KernelBinary]) -> CpuProgram:
        """The references over the variant's graph; its plan and the binaries are not read."""
        return CpuProgram(variant.graph)


class CpuProgram:
    def __init__(self, graph: Graph) -> None:
        self._runner = GraphRunner(graph)
        self._results = graph.num_results

    def run(self, feeds: Sequence[np.ndarray], env: Mapping[str, int]) -> list[np.ndarray]:
        return owned(self._runner.run(feeds, env), feeds)

    def run_session(self, feeds: Sequence[np.ndarray], env: Mapping[str, int], memory: StateMemory) -> list[np.ndarray]:
        """A call of a session: the state writes run in place on the session's arrays (GraphRunner)."""
        everything = [*feeds, *memory.arrays]
        return owned(self._runner.run(everything, env)[: self._results], everything)


def owned(outs: Sequence[np.ndarray], feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Outputs the caller may keep and write to.

    The references may hand back a constant (a read-only view of the mapped file), a view of it, a
    caller's input, or one array for two outputs; each of those is copied.
    """
    result: list[np.ndarray] = []
    for x in outs:
        if not x.flags.writeable or any(np.may_share_memory(x, y) for y in (*feeds, *result)):
            x = x.copy()
        result.append(x)
    return result
