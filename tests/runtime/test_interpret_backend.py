"""The interpret backend runs a hand-built Schedule (arena intermediate, symbolic sizes, an output view, an
index check) and matches the cpu GraphRunner; a flagged id fails that call only."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
from graph_kit import const, make_graph

from aotc.errors import ExecError, UnsupportedError, VerifyError
from aotc.ir import DType, Graph, Op, Symbol, TensorType, sym
from aotc.ir.evaluate import GraphRunner
from aotc.ir.schedule import Arg, ArgKind, Buffer, IndexCheck, Schedule, View
from aotc.ir.symbolic import floordiv
from aotc.ir.templates import KernelKind
from aotc.ir.variant import Variant
from aotc.runtime.backends import InterpretBackend, get_backend
from aotc.runtime.guards import Binder
from tests.kernel_fixtures import HEADER, flag, hand_kernel, ptr, size

pytest.importorskip("triton")

F32, I64 = DType.float32, DType.int64
n = sym("n")
W = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
TABLE = np.arange(40, dtype=np.float32).reshape(10, 4)

ADD_BIAS = (
    HEADER
    + """
@triton.jit
def add_bias(x_ptr, w_ptr, t_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + offs, mask=mask)
    w = tl.load(w_ptr + offs % 8, mask=mask)
    tl.store(t_ptr + offs, x + w, mask=mask)
"""
)

ROW_SUM = (
    HEADER
    + """
@triton.jit
def row_sum(t_ptr, s_ptr, COLS: tl.constexpr):
    row = tl.program_id(0)
    t = tl.load(t_ptr + row * COLS + tl.arange(0, COLS))
    tl.store(s_ptr + row, tl.sum(t, axis=0))
"""
)

GATHER = (
    HEADER
    + """
@triton.jit
def gather_rows(table_ptr, ids_ptr, g_ptr, flags_ptr, rows, WIDTH: tl.constexpr):
    i = tl.program_id(0)
    idx = tl.load(ids_ptr + i)
    tl.store(flags_ptr + 0, 1, mask=(idx < 0) | (idx >= rows))
    cols = tl.arange(0, WIDTH)
    ids = idx + cols * 0
    ok = (ids >= 0) & (ids < rows)
    tl.store(g_ptr + i * WIDTH + cols, tl.load(table_ptr + ids * WIDTH + cols, mask=ok, other=0.0))
"""
)


def _graph() -> Graph:
    def body(b, x, ids):
        t = b.op(Op.ADD, x, b.op(Op.BROADCAST, const(b, "w", W), shape=(n, 8)))
        s = b.op(Op.REDUCE_SUM, t, axes=(1,), keepdim=False)
        r = b.op(Op.RESHAPE, s, shape=(n, 1))
        b.loc = "test.py:7"
        g = b.op(Op.GATHER, const(b, "table", TABLE), ids, axis=0)
        return [s, r, g]

    return make_graph(
        {"x": TensorType(F32, (n, 8)), "ids": TensorType(I64, (3,))},
        body,
        symbols=(Symbol("n", 1, 64),),
        constants={"w": W, "table": TABLE},
    )


def _schedule(g: Graph) -> Schedule:
    by_op = {node.op: node for node in g.nodes}
    w, table = (node.outputs[0].id for node in g.nodes if node.op is Op.CONSTANT)
    x, ids = (v.id for v in g.inputs)
    t = by_op[Op.ADD].outputs[0].id
    s, r, out_g = (o.id for o in g.outputs)
    add = hand_kernel(
        "add_bias",
        ADD_BIAS,
        [ptr("x_ptr", x), ptr("w_ptr", w), ptr("t_ptr", t), size("numel", n * 8)],
        (floordiv(n * 8 + 127, 128), 1, 1),
        [("BLOCK", 128)],
        nodes=(1, 2),
        inputs=(x, w),
        outputs=(t,),
    )
    reduce = hand_kernel(
        "row_sum",
        ROW_SUM,
        [ptr("t_ptr", t), ptr("s_ptr", s)],
        (n, 1, 1),
        [("COLS", 8)],
        kind=KernelKind.REDUCTION,
        nodes=(3,),
        inputs=(t,),
        outputs=(s,),
    )
    gather = hand_kernel(
        "gather_rows",
        GATHER,
        [ptr("table_ptr", table), ptr("ids_ptr", ids, "*i64"), ptr("g_ptr", out_g), flag(), size("rows", 10, "i64")],
        (3, 1, 1),
        [("WIDTH", 4)],
        nodes=(5, 6),
        inputs=(table, ids),
        outputs=(out_g,),
        checks=[IndexCheck(0, "ids", "gather at test.py:7", 0, 10)],
    )
    # The intermediate sits past a first 256-byte slot, so a wrong offset would show.
    return Schedule(
        kernels=(add, reduce, gather),
        buffers=(Buffer(t, n * 32, 256, 0, 1),),
        arena_bytes=256 + n * 32,
        views=(View(r, s),),
        flags=1,
    )


GRAPH = _graph()
SCHEDULE = _schedule(GRAPH)


def _feeds(rows: int, ids: list[int], seed: int = 0) -> list[np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((rows, 8)).astype(np.float32)
    return [x, np.array(ids, np.int64)]


def _run_both(program, feeds: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    env = Binder(GRAPH).bind(feeds)
    return program.run(feeds, env), GraphRunner(GRAPH).run(feeds, env)


@pytest.mark.parametrize("rows", [1, 5, 37])
def test_matches_the_cpu_runner(rows: int) -> None:
    program = get_backend("interpret").prepare(Variant(GRAPH, SCHEDULE), {})
    feeds = _feeds(rows, [9, 0, 3], seed=rows)
    got, want = _run_both(program, feeds)
    assert [a.shape for a in got] == [(rows,), (rows, 1), (3, 4)]
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_outputs_are_owned_by_the_caller() -> None:
    program = InterpretBackend().prepare(Variant(GRAPH, SCHEDULE), {})
    feeds = _feeds(4, [1, 2, 3])
    s, r, g = program.run(feeds, Binder(GRAPH).bind(feeds))
    assert all(a.flags.writeable for a in (s, r, g))
    assert not np.may_share_memory(s, r)  # the view output is copied out of its base
    r[:] = 0.0
    assert s.any()


def test_an_out_of_range_id_fails_that_call_only() -> None:
    program = InterpretBackend().prepare(Variant(GRAPH, SCHEDULE), {})
    feeds = _feeds(2, [1, 10, 0])
    with pytest.raises(ExecError) as err:
        program.run(feeds, Binder(GRAPH).bind(feeds))
    assert str(err.value) == "gather at test.py:7: an index in input 'ids' is outside the valid range [0, 10)"
    with pytest.raises(ExecError, match="outside the valid range"):
        program.run(_feeds(2, [-1, 0, 0]), {"n": 2})
    got, want = _run_both(program, _feeds(2, [1, 9, 0]))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_an_output_view_of_an_intermediate_is_written_in_place() -> None:
    g = make_graph(
        {"x": TensorType(F32, (n, 8))},
        lambda b, x: [
            b.op(Op.RESHAPE, b.op(Op.ADD, x, b.op(Op.BROADCAST, const(b, "w", W), shape=(n, 8))), shape=(n * 8,))
        ],
        symbols=(Symbol("n", 1, 64),),
        constants={"w": W},
    )
    add_node = next(node for node in g.nodes if node.op is Op.ADD)
    w = next(node for node in g.nodes if node.op is Op.CONSTANT).outputs[0].id
    t = add_node.outputs[0].id
    add = SCHEDULE.kernels[0].replace(
        inputs=(g.inputs[0].id, w),
        outputs=(t,),
        args=(
            Arg("x_ptr", "*fp32", ArgKind.BUFFER, g.inputs[0].id),
            Arg("w_ptr", "*fp32", ArgKind.BUFFER, w),
            Arg("t_ptr", "*fp32", ArgKind.BUFFER, t),
            Arg("numel", "i32", ArgKind.SIZE, size=n * 8),
        ),
    )
    schedule = Schedule(kernels=(add,), buffers=(), arena_bytes=0, views=(View(g.outputs[0].id, t),))
    x = np.random.default_rng(3).standard_normal((6, 8)).astype(np.float32)
    (out,) = InterpretBackend().prepare(Variant(g, schedule), {}).run([x], {"n": 6})
    np.testing.assert_array_equal(out, (x + W).reshape(-1))


def test_concurrent_calls() -> None:
    program = InterpretBackend().prepare(Variant(GRAPH, SCHEDULE), {})
    ok: list[bool] = []

    def work(rows: int) -> None:
        got, want = _run_both(program, _feeds(rows, [rows % 10, 0, 9], seed=rows))
        ok.append(all(np.allclose(a, b, rtol=1e-6, atol=1e-6) for a, b in zip(got, want)))

    threads = [threading.Thread(target=work, args=(r,)) for r in (3, 8, 17)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert ok == [True, True, True]


def test_without_a_schedule_the_backend_asks_for_a_recompile() -> None:
    with pytest.raises(UnsupportedError, match=r"device 'interpret' is not available.*has no kernels; recompile"):
        InterpretBackend().prepare(Variant(GRAPH), {})


def test_a_schedule_that_does_not_fit_the_graph_is_refused() -> None:
    add, reduce, gather = SCHEDULE.kernels
    bad_arg = add.replace(args=(*add.args[:2], Arg("t_ptr", "*fp32", ArgKind.BUFFER, 999), add.args[3]))
    with pytest.raises(VerifyError, match=r"kernel add_bias argument t_ptr names value %999"):
        InterpretBackend().prepare(Variant(GRAPH, dataclasses.replace(SCHEDULE, kernels=(bad_arg, reduce))), {})
    with pytest.raises(VerifyError, match=r"no kernel writes value %\d+, which lives in an output"):
        InterpretBackend().prepare(Variant(GRAPH, dataclasses.replace(SCHEDULE, kernels=(add, reduce))), {})
    writes_input = add.replace(outputs=(GRAPH.inputs[0].id, *add.outputs))
    with pytest.raises(VerifyError, match="kernel add_bias writes value %0, which lives in a graph input"):
        InterpretBackend().prepare(
            Variant(GRAPH, dataclasses.replace(SCHEDULE, kernels=(writes_input, reduce, gather))), {}
        )
    unchecked = gather.replace(checks=())
    with pytest.raises(VerifyError, match="takes the error flags but declares no index check"):
        InterpretBackend().prepare(Variant(GRAPH, dataclasses.replace(SCHEDULE, kernels=(add, reduce, unchecked))), {})
