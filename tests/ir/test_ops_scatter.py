"""The scatter primitive against a loop over the updates (one slice at a time), its shape rule, and bad indices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from aotc.errors import ExecError, ShapeError
from aotc.ir import Op, Symbol, TensorType, sym
from aotc.ir.evaluate import run_graph
from aotc.ir.shapes import ShapeCtx

from .util import ALL_DTYPES, BOOL, F32, I32, I64, NUMERIC, assert_close, graph_of, infer, rand, ref_checked

COMBINE = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "max": np.maximum, "min": np.minimum}


def _loop(xs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Each update slice written (or combined) in turn at its normalized coordinates."""
    data, idx, upd = xs
    out = data.copy()
    k = idx.shape[-1]
    for j in np.ndindex(*idx.shape[:-1]):
        coord = tuple(int(c) + (data.shape[a] if c < 0 else 0) for a, c in enumerate(idx[j]))
        reduction = attrs.get("reduction", "none")
        out[coord] = upd[j] if reduction == "none" else COMBINE[reduction](out[coord], upd[j])
    assert k <= data.ndim
    return out


# (data shape, indices shape, unique coordinates?) -> run with every reduction; "none" only with unique ones,
# since ONNX leaves repeated coordinates without a reduction unspecified.
CASES: dict[Op, tuple[Any, list[tuple[tuple[int, ...], tuple[int, ...], bool]]]] = {
    Op.SCATTER: (
        _loop,
        [
            ((5, 3), (2, 1), True),  # whole rows
            ((4, 3, 2), (3, 2), True),  # (i, j) pairs: slices of length 2
            ((2, 3), (2, 3, 2), False),  # every coordinate: ScatterElements' form
            ((6,), (8, 1), False),  # repeated coordinates
            ((3, 4), (0, 2), True),  # nothing to write
            ((2, 2), (1, 1, 1), True),  # extra leading index dims
        ],
    )
}


def _inputs(data: tuple, idx: tuple, unique: bool, dtype: Any, rng: np.random.Generator) -> list[np.ndarray]:
    k = idx[-1]
    lead = int(np.prod(idx[:-1]))
    if unique:
        flat = rng.permutation(int(np.prod(data[:k])))[:lead]
        coords = np.stack(np.unravel_index(flat, data[:k]), axis=-1) if lead else np.zeros((0, k), np.int64)
    else:
        coords = np.stack([rng.integers(0, data[a], size=lead) for a in range(k)], axis=-1)
    # half the coordinates written from the end (negative), as ONNX allows
    neg = rng.random(coords.shape) < 0.5
    coords = np.where(neg, coords - np.asarray(data[:k]), coords).astype(np.int64).reshape(idx)
    updates = rand(idx[:-1] + data[k:], dtype, rng)
    return [rand(data, dtype, rng), coords, updates]


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.value)
def test_scatter_matches_the_loop(dtype: Any, reduction: str) -> None:
    oracle, cases = CASES[Op.SCATTER]
    rng = np.random.default_rng(3)
    for data, idx, unique in cases:
        if reduction == "none" and not unique:
            continue
        xs = _inputs(data, idx, unique, dtype, rng)
        if dtype is BOOL and reduction != "none":
            with pytest.raises(ShapeError, match="needs a numeric dtype"):
                ref_checked(Op.SCATTER, xs, reduction=reduction)
            continue
        got = ref_checked(Op.SCATTER, xs, reduction=reduction)
        assert_close(got, oracle(xs, {"reduction": reduction}), dtype)


def test_scatter_leaves_its_input_unchanged() -> None:
    data = np.zeros((3,), np.float32)
    out = ref_checked(Op.SCATTER, [data, np.array([[1]]), np.array([5.0], np.float32)])
    np.testing.assert_array_equal(out, [0, 5, 0])
    np.testing.assert_array_equal(data, [0, 0, 0])


@pytest.mark.parametrize(
    ("types", "attrs", "match"),
    [
        ([(F32, (4, 3)), (F32, (2, 1)), (F32, (2, 3))], {}, "int32 or int64"),
        ([(F32, (4, 3)), (I64, (2, 3)), (F32, (2,))], {}, r"static last dim in \[1, 2\]"),
        ([(F32, (4, 3)), (I64, ()), (F32, ())], {}, "static last dim"),
        ([(F32, (4, 3)), (I64, (2, 1)), (F32, (2, 4))], {}, "must have shape"),
        ([(F32, (4, 3)), (I64, (2, 1)), (F32, (2,))], {}, "must have shape"),
        ([(F32, (4, 3)), (I64, (2, 1)), (I32, (2, 3))], {}, "one dtype"),
        ([(F32, (4, 3)), (I64, (2, 1)), (F32, (2, 3))], {"reduction": "sum"}, "reduction must be one of"),
        ([(F32, (4, 3)), (I64, (2, 1)), (F32, (2, 3))], {"reduction": 1}, "reduction must be one of"),
    ],
)
def test_shape_rule_refuses(types: list, attrs: dict, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        infer(Op.SCATTER, [TensorType(dt, s) for dt, s in types], **attrs)


def test_symbolic_shapes() -> None:
    s, n = sym("s"), sym("n")
    ctx = ShapeCtx({"s": (1, 64), "n": (0, 8)})
    t = infer(Op.SCATTER, [TensorType(F32, (s, 4)), TensorType(I64, (n, 1)), TensorType(F32, (n, 4))], ctx)
    assert t == TensorType(F32, (s, 4))
    with pytest.raises(ShapeError):
        infer(Op.SCATTER, [TensorType(F32, (s, 4)), TensorType(I64, (n, 1)), TensorType(F32, (s, 4))], ctx)
    with pytest.raises(ShapeError, match="static last dim"):
        infer(Op.SCATTER, [TensorType(F32, (s, 4)), TensorType(I64, (2, n)), TensorType(F32, (2,))], ctx)


@pytest.mark.parametrize("bad", [[[3], [0]], [[-4], [0]], [[0], [1], [2], [-9]]])
def test_out_of_range_coordinate_is_an_error_naming_the_input(bad: list) -> None:
    idx = np.array(bad, np.int64)
    g = graph_of(
        [TensorType(F32, (3, 2)), TensorType(I64, idx.shape), TensorType(F32, (len(bad), 2))],
        lambda b, ins: [b.op(Op.SCATTER, *ins)],
    )
    with pytest.raises(ExecError, match=r"scatter: index -?\d+ in input 'x1' .* outside the valid range \[-3, 3\)"):
        run_graph(g, [np.zeros((3, 2), np.float32), idx, np.ones((len(bad), 2), np.float32)], {})


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.value)
def test_runs_in_a_graph_with_a_dynamic_dim(dtype: Any) -> None:
    s = sym("s")
    g = graph_of(
        [TensorType(dtype, (s, 3)), TensorType(I64, (2, 1)), TensorType(dtype, (2, 3))],
        lambda b, ins: [b.op(Op.SCATTER, *ins, reduction="add")],
        [Symbol("s", 2, 16)],
    )
    rng = np.random.default_rng(0)
    for n in (2, 9):
        data, upd = rand((n, 3), dtype, rng), rand((2, 3), dtype, rng)
        idx = np.array([[0], [-1]], np.int64)
        (y,) = run_graph(g, [data, idx, upd], {"s": n})
        assert_close(y, _loop([data, idx, upd], {"reduction": "add"}), dtype)
