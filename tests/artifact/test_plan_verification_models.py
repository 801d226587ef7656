"""The compiler's own plans verify: every example model (models/*.py, with and without fused attention) and the
ONNX graphs the tests use, scheduled, written and read back, with no fact left to check per shape; and what
the checks proved holds at every binding drawn from the dims' ranges (buffers hold their values inside the
arena, no two live buffers overlap, grids are non-negative and within CUDA's limits).

The ONNX light_* models shipped with the onnx package take minutes to lower and schedule: slow."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aotc.artifact import read_artifact, write_artifact
from aotc.artifact.memory_checks import check_disjoint
from aotc.artifact.plan_checks import check_schedule, plan_facts
from aotc.ir.graph import Graph
from aotc.ir.schedule import GRID_LIMITS, Schedule
from aotc.ir.symbolic_values import evaluate
from aotc.ir.variant import Variant
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from tests.kernel_layer.model_kit import CONFIGS, lowered
from tests.onnx.onnx_graphs import CASES

MODELS = [f"{name}/{fused}" for name in CONFIGS for fused in ("plain", "fused")] + [f"onnx/{n}" for n in CASES]


@cache
def scheduled(label: str) -> tuple[Graph, Schedule]:
    from aotc.kernels.scheduler import schedule_graph

    kind, name = label.split("/")
    if kind == "onnx":
        graph = lower(CASES[name]().graph, CompileOptions(fuse_attention=True))
    else:
        graph = lowered(kind, fuse_attention=name == "fused")
    return graph, schedule_graph(graph)


@cache
def read_back(label: str) -> tuple[Graph, Schedule]:
    graph, schedule = scheduled(label)
    art = read_artifact(write_artifact([Variant(graph, schedule)]))
    assert tuple(v.plan for v in art.variants) == (schedule,)
    return art.variants[0].graph, art.variants[0].plan


@pytest.mark.parametrize("label", MODELS)
def test_the_compilers_plan_verifies_with_nothing_left_per_shape(label: str) -> None:
    graph, schedule = read_back(label)
    facts = plan_facts(graph, schedule)
    assert facts.facts == () and facts.live == (), facts


def _binding(graph: Graph, data: st.DataObject) -> dict[str, int]:
    env = {}
    for s in graph.symbols:
        lo, hi = -(-s.min // s.multiple_of), s.max // s.multiple_of
        env[s.name] = data.draw(st.integers(lo, hi), label=s.name) * s.multiple_of
    return env


@pytest.mark.parametrize("label", MODELS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_what_was_proved_holds_at_every_drawn_binding(label: str, data: st.DataObject) -> None:
    graph, schedule = read_back(label)
    env = _binding(graph, data)
    check_disjoint(schedule.buffers, env, evaluate(schedule.arena_bytes, env), label)
    values = {o.id: o for n in graph.nodes for o in n.outputs}
    for b in schedule.buffers:
        t = values[b.value].type
        assert evaluate(b.nbytes, env) >= t.dtype.itemsize * int(np.prod([evaluate(d, env) for d in t.shape]))
    for k in schedule.codes():
        for g, top in zip(k.grid, GRID_LIMITS):
            assert 0 <= evaluate(g, env) <= top, (k.name, k.grid, env)


LIGHT = Path(__import__("onnx").__file__).parent / "backend" / "test" / "data" / "light"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in LIGHT.glob("*.onnx")))
def test_the_onnx_light_models_plans_verify(name: str) -> None:
    import onnx

    from aotc.kernels.scheduler import schedule_graph
    from aotc.onnx import import_onnx

    graph = lower(import_onnx(onnx.load(str(LIGHT / f"{name}.onnx"))), CompileOptions())
    facts = check_schedule(graph, schedule_graph(graph), name)
    assert facts.facts == () and facts.live == (), facts
