"""Runs a graph's schedule under the Triton interpreter and the same graph on the cpu backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from aotc.ir.evaluate import GraphRunner
from aotc.ir.graph import Graph
from aotc.ir.schedule import Schedule
from aotc.ir.variant import Variant
from aotc.kernels.scheduler import schedule_graph
from aotc.runtime.backends.interpret import InterpretBackend

# Tolerances per dtype: float32 kernels differ from numpy by reassociation (block sums, fused
# multiply-add); half precision by one rounding of the output.
TOL = {
    "float32": (1e-5, 1e-5),
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
}


def run_schedule(graph: Graph, feeds: Sequence[np.ndarray], env: Mapping[str, int], schedule: Schedule | None = None):
    schedule = schedule or schedule_graph(graph)
    # Masked-off lanes compute on filler values (log(0), exp overflow), as on a GPU; numpy would warn.
    with np.errstate(all="ignore"):
        return InterpretBackend().prepare(Variant(graph, schedule), {}).run(list(feeds), env)


def check(
    graph: Graph,
    feeds: Sequence[np.ndarray],
    env: Mapping[str, int] | None = None,
    tol: tuple[float, float] | None = None,
    schedule: Schedule | None = None,
) -> Schedule:
    """Asserts the kernels' outputs equal the cpu backend's (exactly for ints and bools)."""
    env = env or {}
    schedule = schedule or schedule_graph(graph)
    got = run_schedule(graph, feeds, env, schedule)
    want = GraphRunner(graph).run(list(feeds), env)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            rtol, atol = tol or TOL[w.dtype.name]
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
    return schedule


def compile_renamed_for_sm80(graphs: Sequence[tuple[str, Graph]]) -> None:
    """Compiles every kernel of each (suffix, graph)'s schedule for sm_80, renamed ``<kernel>_<suffix>`` so
    equal names from different graphs stay apart; raises if one does not compile. Run it in a fresh process
    (``in_fresh_process``): the interpreter other tests run here patches triton.language."""
    from aotc.kernels.aot import AotOptions, compile_kernels

    kernels = {}
    for suffix, g in graphs:
        for k in schedule_graph(g).kernels:
            name = f"{k.name}_{suffix}"
            kernels[name] = k.replace(name=name, source=k.source.replace(f"def {k.name}(", f"def {name}(", 1))
    binaries = compile_kernels(list(kernels.values()), targets=("sm_80",), options=AotOptions(cache=False, jobs=1))
    assert set(binaries) == set(kernels) and all(b.ptx for b in binaries.values())


def in_fresh_process(code: str) -> None:
    """Runs ``code`` in a new interpreter from the repository root; asserts it exits 0."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
