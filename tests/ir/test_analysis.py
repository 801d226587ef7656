"""ir.analysis: producers, users, use counts and live intervals, checked by hand and against brute force."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aotc.ir import Builder, DType, Graph, Op, TensorType, Value
from aotc.ir.analysis import INPUT_DEF, analyze
from aotc.ir.evaluate import GraphRunner
from aotc.lowering.cse import dce

F32 = TensorType(DType.float32, (3,))


def _graph(b: Builder, inputs: list[Value], outputs: tuple[Value, ...], constants: dict | None = None) -> Graph:
    names = tuple(f"x{i}" for i in range(len(inputs)))
    return Graph(tuple(inputs), names, tuple(b.nodes), outputs, {"tuple": list(range(len(outputs)))}, (), (), constants)


def test_facts_of_a_small_graph() -> None:
    b = Builder()
    x = b.new_value(F32)
    a = b.op(Op.NEG, x)  # node 0
    s = b.op(Op.ADD, a, a)  # node 1: reads a twice
    dead = b.op(Op.EXP, x)  # node 2: read by no one
    d = b.op(Op.MUL, s, x)  # node 3
    g = _graph(b, [x], (d, a))
    an = analyze(g)
    assert an.producer == {a.id: 0, s.id: 1, dead.id: 2, d.id: 3}
    assert an.users[x.id] == (0, 2, 3) and an.users[a.id] == (1,) and an.users[d.id] == ()
    assert an.use_count[a.id] == 2 and an.use_count[x.id] == 3 and an.use_count[d.id] == 0
    assert an.outputs == {d.id, a.id}
    assert an.live_range(x.id) == (INPUT_DEF, 3)
    assert an.live_range(a.id) == (0, 4)  # an output: live to the end
    assert an.live_range(s.id) == (1, 3)
    assert an.live_range(dead.id) == (2, 2) and an.is_dead(dead.id) and not an.is_dead(d.id)
    assert an.free_after == ((), (), (), (x.id, s.id))
    assert an.live_at(2) == {x.id, a.id, s.id, dead.id}
    assert analyze(g) is an  # computed once per graph
    with pytest.raises(TypeError):
        an.users[x.id] = ()  # type: ignore[index]
    with pytest.raises(AttributeError):
        an.outputs = frozenset()  # type: ignore[misc]


def test_the_cache_dies_with_its_graph() -> None:
    from aotc.ir import analysis

    b = Builder()
    x = b.new_value(F32)
    g = _graph(b, [x], (b.op(Op.NEG, x),))
    gc.collect()  # graphs earlier tests dropped leave the cache now, not during the count below
    analyze(g)
    before = len(analysis._CACHE)
    gone = weakref.ref(g)
    del g
    gc.collect()
    assert gone() is None and len(analysis._CACHE) == before - 1


@st.composite
def dags(draw: st.DrawFn) -> tuple[Graph, list[np.ndarray]]:
    b = Builder()
    n_in = draw(st.integers(1, 3))
    inputs = [b.new_value(F32) for _ in range(n_in)]
    values = list(inputs)
    for _ in range(draw(st.integers(0, 12))):
        op = draw(st.sampled_from([Op.NEG, Op.EXP, Op.ADD, Op.MUL, Op.WHERE]))
        pick = st.sampled_from(values)
        if op in (Op.NEG, Op.EXP):
            values.append(b.op(op, draw(pick)))
        elif op is Op.WHERE:
            cond = b.op(Op.GT, draw(pick), draw(pick))
            values.append(b.op(Op.WHERE, cond, draw(pick), draw(pick)))  # bool cond: no float op reads it
        else:
            values.append(b.op(op, draw(pick), draw(pick)))
    outs = tuple(draw(st.lists(st.sampled_from(values), min_size=1, max_size=3)))
    feeds = [np.linspace(-1, 1, 3, dtype=np.float32) * (i + 1) for i in range(n_in)]
    return _graph(b, inputs, outs), feeds


@settings(max_examples=100, deadline=None)
@given(dags())
def test_facts_match_brute_force(case: tuple[Graph, list[np.ndarray]]) -> None:
    g, _ = case
    an = analyze(g)
    n = len(g.nodes)
    outs = {o.id for o in g.outputs}
    for i, node in enumerate(g.nodes):
        for o in node.outputs:
            assert an.producer[o.id] == i and an.first_def[o.id] == i
    every = [v.id for v in g.inputs] + [o.id for node in g.nodes for o in node.outputs]
    for vid in every:
        readers = [i for i, node in enumerate(g.nodes) if any(v.id == vid for v in node.inputs)]
        slots = sum(1 for node in g.nodes for v in node.inputs if v.id == vid)
        assert an.users[vid] == tuple(readers) and an.use_count[vid] == slots
        want_last = n if vid in outs else (readers[-1] if readers else an.first_def[vid])
        assert an.last_use[vid] == want_last
        freed_at = [i for i, ids in enumerate(an.free_after) if vid in ids]
        assert freed_at == ([] if vid in outs or not readers else [readers[-1]])


@settings(max_examples=60, deadline=None)
@given(dags())
def test_runner_freeing_by_liveness_gives_the_unfreed_answer(case: tuple[Graph, list[np.ndarray]]) -> None:
    from aotc.ir.ops import OPS

    g, feeds = case
    vals = {v.id: x for v, x in zip(g.inputs, feeds)}
    with np.errstate(all="ignore"):
        for node in g.nodes:
            for o, r in zip(node.outputs, OPS[node.op].ref([vals[v.id] for v in node.inputs], node.attrs)):
                vals[o.id] = np.asarray(r, dtype=o.type.dtype.np)
    got = GraphRunner(g).run(feeds, {})
    for o, x in zip(g.outputs, got):
        np.testing.assert_array_equal(x, vals[o.id])


@settings(max_examples=60, deadline=None)
@given(dags())
def test_dce_keeps_exactly_what_the_outputs_need(case: tuple[Graph, list[np.ndarray]]) -> None:
    g, feeds = case
    pruned = dce(g)
    needed = {o.id for o in g.outputs}
    for node in reversed(g.nodes):
        if any(o.id in needed for o in node.outputs):
            needed |= {v.id for v in node.inputs}
    assert [n for n in g.nodes if any(o.id in needed for o in n.outputs)] == list(pruned.nodes)
    for x, y in zip(GraphRunner(pruned).run(feeds, {}), GraphRunner(g).run(feeds, {})):
        np.testing.assert_array_equal(x, y)


def test_dce_drops_constants_only_dead_nodes_used() -> None:
    b = Builder()
    x = b.new_value(F32)
    w = b.op(Op.CONSTANT, name="w", shape=(3,), dtype=DType.float32)
    b.op(Op.MUL, x, w)  # dead
    y = b.op(Op.NEG, x)
    g = _graph(b, [x], (y,), {"w": np.ones(3, np.float32)})
    pruned = dce(g)
    assert [n.op for n in pruned.nodes] == [Op.NEG] and dict(pruned.constants) == {}
