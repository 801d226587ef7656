"""The arena plan: 256-aligned symbolic offsets, no two live buffers overlapping, reuse of dead ones."""

from __future__ import annotations

import itertools

import pytest

from aotc.ir.schedule import ALIGN
from aotc.ir.symbolic_values import evaluate
from aotc.kernels.memplan import arena_bytes_at_max
from aotc.kernels.scheduler import schedule_graph
from tests.kernel_layer.model_kit import DIMS, lowered


def _bindings(graph) -> list[dict[str, int]]:
    names = [s.name for s in graph.symbols]
    values = [sorted({s.min, (s.min + s.max) // 2 + 1, s.max}) for s in graph.symbols]
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]


@pytest.mark.parametrize("name", sorted(DIMS))
def test_live_buffers_never_overlap(name: str) -> None:
    g = lowered(name)
    s = schedule_graph(g)
    outputs = {v.id for v in g.outputs}
    assert all(b.value not in outputs for b in s.buffers)
    for env in _bindings(g):
        arena = evaluate(s.arena_bytes, env)
        spans = [(evaluate(b.offset, env), evaluate(b.nbytes, env), b.first, b.last) for b in s.buffers]
        for off, size, _, _ in spans:
            assert off % ALIGN == 0 and 0 <= off and off + size <= arena
        for (o1, n1, f1, l1), (o2, n2, f2, l2) in itertools.combinations(spans, 2):
            live_together = f1 <= l2 and f2 <= l1
            if live_together:
                assert o1 + n1 <= o2 or o2 + n2 <= o1


def test_dead_buffers_are_reused() -> None:
    g = lowered("gpt2")
    s = schedule_graph(g)
    offsets = {str(b.offset) for b in s.buffers}
    assert len(offsets) < len(s.buffers)
    assert arena_bytes_at_max(g, s.arena_bytes) < sum(
        evaluate(b.nbytes, {x.name: x.max for x in g.symbols}) for b in s.buffers
    )


def test_buffer_lifetimes_follow_the_kernels() -> None:
    g = lowered("bert")
    s = schedule_graph(g)
    for b in s.buffers:
        assert b.value in s.kernels[b.first].outputs
        assert b.first <= b.last
        readers = [i for i, k in enumerate(s.kernels) if b.value in k.inputs]
        assert readers and max(readers) == b.last
