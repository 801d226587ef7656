"""The source-and-plan sweep: one semantic edit of one kernel's source or one launch's grid (source_mutation.py),
every digest recomputed, the file written by the project's writer (its own checks off) and then read and
called on every backend it runs on (cpu, interpret, cuda on the fake driver; sweep_run.py).

What must hold for every file: no access outside the extents the reader proved for its pointer (the interpreter's
fence narrowed to each pointer's extents, and the fake driver's), no crash, hang or untyped error; a shrunk grid
is refused (at load, or before any launch at the call's shape); and a file that runs and answers differently from
the original is one only a signature can catch: an edit of kernel arithmetic whose every access stayed inside
its proven extents (the fence saw them all), which the report counts by kind. The default run draws 12 edits
per subject; ``-m slow`` / AOTC_RUN_SLOW=1 draws 5,000 in all (``FULL``).
"""

from __future__ import annotations

from collections import Counter
from functools import cache

import numpy as np
import pytest
from plan_kit import write
from source_mutation import KINDS, Edit, draw
from sweep_run import TIMEOUT, Violation, call_once, deadline, feeds_for, leaves, run, tally

from aotc.artifact import read_artifact
from aotc.errors import AotcError
from aotc.ir.graph import Graph
from aotc.ir.schedule import Schedule
from aotc.ir.symbolic_values import evaluate
from aotc.runtime import Executable

SUBJECTS = ("plan_kit", "mlp/plain", "cnn/plain", "gpt2/fused", "bert/plain", "golden")


@cache
def subject(label: str) -> tuple[Graph, Schedule, dict[str, np.ndarray], list[np.ndarray]]:
    """(graph, plan, feeds, the unedited file's cpu answers)."""
    from aotc.kernels.scheduler import schedule_graph

    if label == "plan_kit":
        from plan_kit import model

        graph, plan = model()
    elif label == "golden":
        from kernel_kit import golden_model

        _, graph, plan = golden_model()
    else:
        from tests.kernel_layer.model_kit import lowered

        name, fused = label.split("/")
        graph = lowered(name, fuse_attention=fused == "fused")
        plan = schedule_graph(graph)
    feeds = feeds_for(graph)
    ref = leaves(call_once(Executable(read_artifact(write(plan, graph=graph)), "cpu"), feeds))
    return graph, plan, feeds, ref


def outcome(label: str, edit: Edit) -> str:
    """What the file did; raises Violation for anything the sweep must never see."""
    graph, _, feeds, ref = subject(label)
    try:
        with deadline(TIMEOUT):
            art = read_artifact(write(edit.schedule, binaries=True, graph=graph))
    except AotcError:
        return "refused at load"
    except Violation:
        raise
    except Exception as e:
        raise Violation(f"untyped error at load: {type(e).__name__}: {e}") from e
    try:
        result, _ = run(art, feeds, ref)
    except Violation as e:
        if "the backends disagree" not in str(e):
            raise
        result = "ran, outputs differ"  # cpu runs the graph, interpret and cuda the edited source
    if result.startswith("refused at the call"):
        return "refused at the call"
    return f"silent: {edit.kind}" if "outputs differ" in result else "ran, same answers"


def sweep(label: str, n: int, seed: int) -> tuple[Counter[str], list[str]]:
    graph, plan, _, _ = subject(label)
    rng = np.random.default_rng([seed, SUBJECTS.index(label)])
    seen: Counter[str] = Counter()
    violations = []
    for _ in range(n):
        edit = draw(graph, plan, rng)
        try:
            got = outcome(label, edit)
        except Violation as e:
            violations.append(f"{label}: {edit.what}: {e}")
            continue
        if edit.kind == "grid" and not got.startswith("refused"):
            if _same_grids(graph, plan, edit.schedule):
                got = "no shrink: the same grid at every binding"  # (batch + 63) // 64 -> 1 over batch <= 64
            else:
                violations.append(f"{label}: {edit.what}: a shrunk grid was not refused ({got})")
        seen[f"{edit.kind}: {got}"] += 1
    return seen, violations


def _same_grids(graph: Graph, a: Schedule, b: Schedule) -> bool:
    """Whether every launch's grid is the same at the symbols' least and greatest binding (grids are monotone)."""
    for pick in (min, max):
        env = {s.name: pick(s.min, s.max) for s in graph.symbols}
        for x, y in zip(a.kernels, b.kernels):
            if [evaluate(g, env) for g in x.grid] != [evaluate(g, env) for g in y.grid]:
                return False
    return True


@pytest.mark.parametrize("label", SUBJECTS)
def test_source_and_grid_edits(label: str) -> None:
    seen, violations = sweep(label, 12, seed=1)
    print(f"{label}: {tally(seen)}")
    assert not violations, violations[:5]
    assert sum(seen.values()) == 12


# the slow sweep's edits per subject: 5,000 in all, more where a call is quick
FULL = {"plan_kit": 1400, "mlp/plain": 1400, "golden": 1000, "cnn/plain": 400, "gpt2/fused": 500, "bert/plain": 300}


@pytest.mark.slow
@pytest.mark.parametrize("label", SUBJECTS)
def test_source_and_grid_edits_full(label: str) -> None:
    seen, violations = sweep(label, FULL[label], seed=2)
    by_kind = Counter(k.split(":")[0] for k in seen.elements())
    print(f"{label}: {tally(seen)}; edits by kind: {tally(by_kind)}", flush=True)
    assert not violations, violations[:10]
    assert sum(seen.values()) == FULL[label] and set(by_kind) >= {"offset", "bound", "grid"}


def test_the_slow_sweep_makes_5000_edits_over_every_subject() -> None:
    assert sum(FULL.values()) >= 5000 and set(FULL) == set(SUBJECTS) and len(KINDS) == 7
