"""Layout and source primitives against element-by-element index formulas, plus symbolic shape rules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from aotc.errors import ExecError, ShapeError
from aotc.ir import Graph, Op, Symbol, TensorType, Value, sym
from aotc.ir.evaluate import run_graph
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic import smax
from aotc.ir.symbolic_values import evaluate

from .util import ALL_DTYPES, BOOL, F32, I32, I64, NUMERIC, assert_close, graph_of, infer, rand, ref_checked

Index = tuple[int, ...]


def _flat(o: Index, shape: Sequence[int]) -> int:
    n = 0
    for k, d in zip(o, shape):
        n = n * d + k
    return n


def _unflat(n: int, shape: Sequence[int]) -> Index:
    out = []
    for d in reversed(shape):
        out.append(n % d)
        n //= d
    return tuple(reversed(out))


def _reshape_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    x = xs[0]
    return x[_unflat(_flat(o, a["shape"]), x.shape)] if x.ndim else x[()]


def _permute_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    i = [0] * len(o)
    for k, p in enumerate(a["perm"]):
        i[p] = o[k]
    return xs[0][tuple(i)]


def _broadcast_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    x = xs[0]
    off = len(o) - x.ndim
    return x[tuple(0 if x.shape[k] == 1 else o[off + k] for k in range(x.ndim))]


def _slice_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    return xs[0][tuple(s + k * st for k, s, st in zip(o, a["starts"], a["steps"]))]


def _pad_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    x, p = xs[0], a["pads"]
    i = tuple(ok - p[2 * k] for k, ok in enumerate(o))
    if all(0 <= ik < n for ik, n in zip(i, x.shape)):
        return x[i]
    return a.get("value", 0.0)


def _concat_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    axis = a.get("axis", 0) % xs[0].ndim
    k = o[axis]
    for x in xs:
        if k < x.shape[axis]:
            return x[o[:axis] + (k,) + o[axis + 1 :]]
        k -= x.shape[axis]
    raise AssertionError("index past the concatenation")


def _flip_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    x = xs[0]
    axes = {ax % x.ndim for ax in a.get("axes", ())}
    return x[tuple(x.shape[k] - 1 - ok if k in axes else ok for k, ok in enumerate(o))]


def _gather_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    data, idx = xs
    axis = a.get("axis", 0) % data.ndim
    j = int(idx[o[axis : axis + idx.ndim]])
    j = j + data.shape[axis] if j < 0 else j
    return data[o[:axis] + (j,) + o[axis + idx.ndim :]]


def _iota_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    return o[a.get("axis", 0) % len(o)]


def _full_at(xs: list[np.ndarray], a: dict, o: Index) -> Any:
    return a["value"]


# op -> (expected element at an output index, cases of (input shapes, attrs))
CASES: dict[Op, tuple[Callable, list[tuple[list[tuple], dict]]]] = {
    Op.RESHAPE: (
        _reshape_at,
        [
            ([(2, 3, 4)], {"shape": (6, 4)}),
            ([(4, 6)], {"shape": (24,)}),
            ([()], {"shape": (1, 1)}),
            ([(1,)], {"shape": ()}),
            ([(0, 3)], {"shape": (3, 0)}),
            ([(2, 3)], {"shape": (3, 1, 2)}),
        ],
    ),
    Op.PERMUTE: (
        _permute_at,
        [([(2, 3, 4)], {"perm": p}) for p in [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]]
        + [([(5,)], {"perm": (0,)}), ([()], {"perm": ()}), ([(0, 3)], {"perm": (1, 0)})],
    ),
    Op.BROADCAST: (
        _broadcast_at,
        [
            ([(3, 1)], {"shape": (2, 3, 4)}),
            ([()], {"shape": (2, 2)}),
            ([(1,)], {"shape": (0,)}),
            ([(2, 3)], {"shape": (2, 3)}),
            ([(1, 1, 1)], {"shape": (1, 5, 1)}),
        ],
    ),
    Op.SLICE: (
        _slice_at,
        [
            ([(10,)], {"starts": (1,), "stops": (9,), "steps": (3,)}),
            ([(4, 5)], {"starts": (1, 0), "stops": (3, 5), "steps": (1, 2)}),
            ([(5,)], {"starts": (3,), "stops": (2,), "steps": (1,)}),
            ([(5,)], {"starts": (7,), "stops": (5,), "steps": (2,)}),
            ([(0, 2)], {"starts": (0, 1), "stops": (0, 2), "steps": (1, 1)}),
            ([()], {"starts": (), "stops": (), "steps": ()}),
            ([(2, 3, 4)], {"starts": (0, 2, 3), "stops": (2, 3, 4), "steps": (5, 1, 1)}),
        ],
    ),
    Op.PAD: (
        _pad_at,
        [
            ([(2, 3)], {"pads": (1, 0, 2, 1), "value": 0.0}),
            ([(2, 3)], {"pads": (0, 2, 0, 0), "value": 3.0}),
            ([(3,)], {"pads": (0, 0), "value": 0.0}),
            ([()], {"pads": (), "value": 1.0}),
            ([(0, 2)], {"pads": (1, 1, 0, 0), "value": 1.0}),
        ],
    ),
    Op.CONCAT: (
        _concat_at,
        [
            ([(2, 3), (4, 3)], {"axis": 0}),
            ([(2, 3), (2, 1), (2, 0)], {"axis": -1}),
            ([(3,)], {"axis": 0}),
            ([(1, 2, 2), (1, 2, 2)], {"axis": 1}),
            ([(0, 2), (0, 2)], {"axis": 0}),
        ],
    ),
    Op.FLIP: (
        _flip_at,
        [
            ([(2, 3, 4)], {"axes": (0, 2)}),
            ([(3,)], {"axes": ()}),
            ([(3, 2)], {"axes": (-1,)}),
            ([(0, 2)], {"axes": (0, 1)}),
        ],
    ),
    Op.GATHER: (
        _gather_at,
        [
            ([(5, 3), (2, 2)], {"axis": 0}),
            ([(5, 3), (4,)], {"axis": 1}),
            ([(5, 3), (2, 3)], {"axis": 1, "negative_indices": True}),
            ([(5, 3), ()], {"axis": -2, "negative_indices": True}),
            ([(2, 4, 3), (3, 1)], {"axis": 1}),
            ([(5,), (0,)], {"axis": 0}),
        ],
    ),
    Op.IOTA: (
        _iota_at,
        [([], {"shape": (3, 4), "axis": a}) for a in (0, 1, -1)]
        + [([], {"shape": (5,), "axis": 0}), ([], {"shape": (0, 2), "axis": 1})],
    ),
    Op.FULL: (
        _full_at,
        [([], {"shape": (2, 3), "value": 2}), ([], {"shape": (), "value": 1}), ([], {"shape": (0, 4), "value": 0})],
    ),
    # CONSTANT is bound by the executor; test_constant_runs_through_the_graph covers it.
    Op.CONSTANT: (_full_at, []),
}


def _inputs(op: Op, shapes: list[tuple], attrs: dict, dtype: Any, rng: np.random.Generator) -> list[np.ndarray]:
    if op is Op.GATHER:
        data, idx = shapes
        n = data[attrs["axis"] % len(data)]
        low = -n if attrs.get("negative_indices") else 0
        return [rand(data, dtype, rng), rng.integers(low, n, size=idx).astype(np.int64)]
    return [rand(s, dtype, rng) for s in shapes]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("op", [op for op in CASES if op not in (Op.IOTA, Op.FULL, Op.CONSTANT)], ids=lambda o: o.value)
def test_layout_op(op: Op, dtype: Any) -> None:
    at, cases = CASES[op]
    rng = np.random.default_rng(10)
    for shapes, attrs in cases:
        xs = _inputs(op, shapes, attrs, dtype, rng)
        if op is Op.PAD and dtype is BOOL:
            attrs = {**attrs, "value": bool(attrs["value"])}
        elif op is Op.PAD and dtype.is_int:
            attrs = {**attrs, "value": int(attrs["value"])}
        got = ref_checked(op, xs, **attrs)
        want = np.empty(got.shape, dtype=dtype.np)
        for o in np.ndindex(*got.shape):
            want[o] = at(xs, attrs, o)
        assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", NUMERIC + (BOOL,), ids=lambda d: d.value)
@pytest.mark.parametrize("op", [Op.IOTA, Op.FULL], ids=lambda o: o.value)
def test_source_op(op: Op, dtype: Any) -> None:
    at, cases = CASES[op]
    for _, attrs in cases:
        if op is Op.IOTA and dtype is BOOL:
            with pytest.raises(ShapeError):
                infer(op, [], dtype=dtype, **attrs)
            continue
        got = ref_checked(op, [], dtype=dtype, **attrs)
        want = np.empty(got.shape, dtype=dtype.np)
        for o in np.ndindex(*got.shape):
            want[o] = at([], attrs, o)
        assert_close(got, want, dtype)


def test_constant_runs_through_the_graph() -> None:
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = graph_of(
        [TensorType(F32, (3,))],
        lambda b, ins: [b.op(Op.ADD, b.op(Op.CONSTANT, name="w", shape=(2, 3), dtype=F32), ins[0])],
        constants={"w": c},
    )
    (y,) = run_graph(g, [np.ones(3, np.float32)], {})
    np.testing.assert_array_equal(y, c + 1)


def test_full_value_may_be_symbolic() -> None:
    s = sym("s")
    g = graph_of(
        [TensorType(F32, (s,))],
        lambda b, ins: [b.op(Op.ADD, ins[0], b.full(2 * s + 1, F32, (s,)))],
        [Symbol("s", 1, 9)],
    )
    for n in (1, 4, 9):
        (y,) = run_graph(g, [np.zeros(n, np.float32)], {"s": n})
        np.testing.assert_array_equal(y, np.full(n, 2 * n + 1, np.float32))


def test_gather_wraps_negative_indices_and_rejects_out_of_range() -> None:
    data = np.arange(10, dtype=np.float32).reshape(5, 2)
    got = ref_checked(Op.GATHER, [data, np.array([-1, -5, 0, 4], np.int32)], axis=0, negative_indices=True)
    np.testing.assert_array_equal(got, data[[4, 0, 0, 4]])
    for bad in ([5], [-6], [0, 99]):
        with pytest.raises(ExecError, match="outside the valid range"):
            ref_checked(Op.GATHER, [data, np.array(bad, np.int64)], axis=0, negative_indices=True)
    with pytest.raises(ExecError):
        ref_checked(Op.GATHER, [np.zeros((0, 2), np.float32), np.array([0], np.int64)], axis=0)


T = TensorType


@pytest.mark.parametrize(
    ("op", "types", "attrs", "match"),
    [
        (Op.RESHAPE, [T(F32, (2, 3))], {"shape": (5,)}, "element count"),
        (Op.RESHAPE, [T(F32, (2, 3))], {"shape": (-1, 6)}, "negative"),
        (Op.RESHAPE, [T(F32, (2, 3))], {"shape": "6"}, "tuple"),
        (Op.PERMUTE, [T(F32, (2, 3))], {"perm": (0, 0)}, "permutation"),
        (Op.PERMUTE, [T(F32, (2, 3))], {"perm": (1,)}, "permutation"),
        (Op.PERMUTE, [T(F32, (2, 3))], {"perm": (-1, 0)}, "permutation"),
        (Op.PERMUTE, [T(F32, (2, 3))], {}, "permutation"),
        (Op.BROADCAST, [T(F32, (3,))], {"shape": (4,)}, "broadcast"),
        (Op.BROADCAST, [T(F32, (2, 3))], {"shape": (3,)}, "lower rank"),
        (Op.BROADCAST, [T(F32, (1,))], {"shape": (-2,)}, "negative"),
        (Op.SLICE, [T(F32, (4,))], {"starts": (0,), "stops": (4,), "steps": (0,)}, "step"),
        (Op.SLICE, [T(F32, (4,))], {"starts": (0,), "stops": (5,), "steps": (1,)}, "stop"),
        (Op.SLICE, [T(F32, (4,))], {"starts": (-1,), "stops": (4,), "steps": (1,)}, "start"),
        (Op.SLICE, [T(F32, (4, 2))], {"starts": (0,), "stops": (4,), "steps": (1,)}, "one entry per axis"),
        (Op.PAD, [T(F32, (4,))], {"pads": (-1, 0)}, "pad"),
        (Op.PAD, [T(F32, (4,))], {"pads": (1,)}, "per axis"),
        (Op.CONCAT, [T(F32, (2, 3)), T(F32, (2,))], {"axis": 0}, "one rank"),
        (Op.CONCAT, [T(F32, (2, 3)), T(F32, (2, 4))], {"axis": 0}, "differs"),
        (Op.CONCAT, [T(F32, (2, 3)), T(I32, (2, 3))], {"axis": 0}, "one dtype"),
        (Op.CONCAT, [T(F32, (2, 3))], {"axis": 2}, "out of range"),
        (Op.CONCAT, [T(F32, ()), T(F32, ())], {"axis": 0}, "scalar"),
        (Op.FLIP, [T(F32, (2, 3))], {"axes": (2,)}, "out of range"),
        (Op.FLIP, [T(F32, (2, 3))], {"axes": 1}, "axes"),
        (Op.GATHER, [T(F32, (2, 3)), T(F32, (2,))], {"axis": 0}, "int"),
        (Op.GATHER, [T(F32, ()), T(I64, (2,))], {"axis": 0}, "scalar"),
        (Op.GATHER, [T(F32, (2, 3)), T(I64, (2,))], {"axis": 2}, "out of range"),
        (Op.IOTA, [], {"shape": (), "axis": 0, "dtype": I64}, "rank"),
        (Op.IOTA, [], {"shape": (3,), "axis": 1, "dtype": I64}, "out of range"),
        (Op.IOTA, [], {"shape": (-3,), "axis": 0, "dtype": I64}, "negative"),
        (Op.IOTA, [], {"shape": (3,), "axis": 0, "dtype": "int64"}, "dtype"),
        (Op.FULL, [], {"shape": (3,), "dtype": F32}, "value"),
        (Op.FULL, [], {"shape": (3,), "value": "x", "dtype": F32}, "value"),
        (Op.CONSTANT, [], {"name": "w", "shape": (sym("s"),), "dtype": F32}, "static"),
        (Op.CONSTANT, [], {"shape": (3,), "dtype": F32}, "name"),
    ],
)
def test_bad_layout_inputs_raise_shape_error(op: Op, types: list, attrs: dict, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        infer(op, types, ShapeCtx({"s": (1, 8)}), **attrs)


# -- symbolic shapes ---------------------------------------------------------------------------------------

CTX = ShapeCtx({"b": (1, 8), "s": (1, 16), "t": (0, 4)})


def test_symbolic_reshape_round_trip() -> None:
    b, s = sym("b"), sym("s")
    flat = infer(Op.RESHAPE, [T(F32, (b, s, 64))], CTX, shape=(b * s, 64))
    assert flat.shape == (b * s, 64)
    back = infer(Op.RESHAPE, [flat], CTX, shape=(b, s, 64))
    assert back.shape == (b, s, 64)
    assert infer(Op.RESHAPE, [back], CTX, shape=(b * s * 64,)).shape == (64 * b * s,)
    assert infer(Op.RESHAPE, [T(F32, (b, s * 4))], CTX, shape=(b, s, 2, 2)).shape == (b, s, 2, 2)
    with pytest.raises(ShapeError, match="element count"):
        infer(Op.RESHAPE, [T(F32, (b, s))], CTX, shape=(b * s + 1,))
    with pytest.raises(ShapeError, match="element count"):
        infer(Op.RESHAPE, [T(F32, (b, s))], CTX, shape=(s, s))


def test_symbolic_slice_lengths() -> None:
    s, t = sym("s"), sym("t")
    every_other = infer(Op.SLICE, [T(F32, (s,))], CTX, starts=(1,), stops=(s,), steps=(2,)).shape[0]
    assert every_other == s // 2
    tail = infer(Op.SLICE, [T(F32, (s, 3))], CTX, starts=(t, 0), stops=(s, 3), steps=(1, 1)).shape
    assert tail == (smax(s - t, 0), 3)  # t may exceed s, so the length is clamped at zero
    for n in range(1, 17):
        assert evaluate(every_other, {"s": n}) == len(range(1, n, 2))
        for k in range(5):
            assert evaluate(tail[0], {"s": n, "t": k}) == len(range(k, n))
    with pytest.raises(ShapeError, match="stop"):
        infer(Op.SLICE, [T(F32, (s,))], CTX, starts=(0,), stops=(s + 1,), steps=(1,))
    with pytest.raises(ShapeError, match="start"):
        infer(Op.SLICE, [T(F32, (s,))], CTX, starts=(t - 1,), stops=(s,), steps=(1,))


def test_symbolic_concat_pad_broadcast_gather_iota() -> None:
    b, s, t = sym("b"), sym("s"), sym("t")
    cat = infer(Op.CONCAT, [T(F32, (s, 3)), T(F32, (t, 3)), T(F32, (2, 3))], CTX, axis=0)
    assert cat.shape == (s + t + 2, 3)
    with pytest.raises(ShapeError, match="differs"):
        infer(Op.CONCAT, [T(F32, (s, 3)), T(F32, (s, b))], CTX, axis=0)
    assert infer(Op.PAD, [T(F32, (s, 2))], CTX, pads=(1, t, 0, 0)).shape == (s + t + 1, 2)
    assert infer(Op.BROADCAST, [T(F32, (1, 4))], CTX, shape=(b, s, 4)).shape == (b, s, 4)
    with pytest.raises(ShapeError):
        infer(Op.BROADCAST, [T(F32, (s,))], CTX, shape=(b,))
    assert infer(Op.GATHER, [T(F32, (10, 4)), T(I64, (b, s))], CTX, axis=0).shape == (b, s, 4)
    assert infer(Op.IOTA, [], CTX, shape=(s, b), axis=1, dtype=I64).shape == (s, b)


def test_symbolic_layout_graph_matches_numpy_for_many_bindings() -> None:
    b, s = sym("b"), sym("s")
    syms = [Symbol("b", 1, 4), Symbol("s", 2, 9)]

    def body(bld, ins):
        (x,) = ins  # (b, s, 4)
        flat = bld.reshape(x, (b * s, 4))
        back = bld.permute(bld.reshape(flat, (b, s, 4)), (0, 2, 1))  # (b, 4, s)
        sl = bld.op(Op.SLICE, back, starts=(0, 1, 1), stops=(b, 4, s), steps=(1, 2, 1))  # (b, 2, s-1)
        cat = bld.op(Op.CONCAT, sl, sl, axis=2)  # (b, 2, 2s-2)
        padded = bld.op(Op.PAD, cat, pads=(0, 0, 1, 0, 0, 2), value=-1.0)
        row = bld.op(Op.IOTA, shape=(s,), axis=0, dtype=F32)
        return [padded, bld.op(Op.FLIP, row, axes=(0,))]

    g = graph_of([T(F32, (b, s, 4))], body, syms)
    assert g.outputs[0].type.shape == (b, 3, 2 * s)
    rng = np.random.default_rng(11)
    for nb, ns in [(1, 2), (3, 5), (4, 9)]:
        x = rand((nb, ns, 4), F32, rng)
        y, r = run_graph(g, [x], {"b": nb, "s": ns})
        sl = x.transpose(0, 2, 1)[:, 1:4:2, 1:]
        want = np.pad(np.concatenate([sl, sl], axis=2), [(0, 0), (1, 0), (0, 2)], constant_values=-1.0)
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(r, np.arange(ns, dtype=np.float32)[::-1])


def test_graph_runner_checks_feed_count() -> None:
    g = Graph((Value(0, T(F32, (2,))),), ("x",), (), (Value(0, T(F32, (2,))),))
    with pytest.raises(ExecError, match="input"):
        run_graph(g, [], {})
