"""Every op's shape rule against garbage: bad attrs and odd input ranks give ShapeError, never a crash,
and whenever the rule accepts, the numpy reference runs and returns exactly the promised shape and dtype."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from aotc.errors import ExecError, ShapeError
from aotc.ir import Attrs, DType, Op, TensorType, sym
from aotc.ir.ops import OPS
from aotc.ir.shapes import ShapeCtx

from .util import BOOL, F32, I64, rand

T = TensorType

# A valid call of every op: (input types, attrs).
BASE: dict[Op, tuple[list[TensorType], dict[str, Any]]] = {
    **{op: ([T(F32, (2, 3))], {}) for op in (Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.RECIPROCAL)},
    **{op: ([T(F32, (2, 3))], {}) for op in (Op.SIN, Op.COS, Op.TANH, Op.ERF, Op.FLOOR, Op.CEIL, Op.ROUND, Op.SIGN)},
    **{op: ([T(F32, (2, 3))], {}) for op in (Op.ACOS, Op.ASIN, Op.ATAN)},
    Op.NOT: ([T(BOOL, (2, 3))], {}),
    Op.ISNAN: ([T(F32, (2, 3))], {}),
    Op.ISINF: ([T(F32, (2, 3))], {}),
    **{op: ([T(F32, (2, 3)), T(F32, (3,))], {}) for op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM)},
    **{op: ([T(F32, (2, 3)), T(F32, (3,))], {}) for op in (Op.MINIMUM, Op.MOD, Op.FMOD, Op.EQ, Op.NE, Op.LT)},
    **{op: ([T(F32, (2, 3)), T(F32, (3,))], {}) for op in (Op.LE, Op.GT, Op.GE)},
    **{op: ([T(BOOL, (2, 3)), T(BOOL, (3,))], {}) for op in (Op.AND, Op.OR, Op.XOR)},
    Op.WHERE: ([T(BOOL, (2, 3)), T(F32, (3,)), T(F32, (2, 1))], {}),
    Op.CAST: ([T(F32, (2, 3))], {"dtype": I64}),
    **{op: ([T(F32, (2, 3, 4))], {"axes": (1,), "keepdim": False}) for op in (Op.REDUCE_SUM, Op.REDUCE_MAX)},
    **{op: ([T(F32, (2, 3, 4))], {"axes": (0, 2), "keepdim": True}) for op in (Op.REDUCE_MIN, Op.REDUCE_PROD)},
    Op.ARGMAX: ([T(F32, (2, 3, 4))], {"axis": 1, "keepdim": False}),
    Op.ARGMIN: ([T(F32, (2, 3, 4))], {"axis": -1, "keepdim": True}),
    Op.RESHAPE: ([T(F32, (2, 3, 4))], {"shape": (6, 4)}),
    Op.PERMUTE: ([T(F32, (2, 3, 4))], {"perm": (2, 0, 1)}),
    Op.BROADCAST: ([T(F32, (3, 1))], {"shape": (2, 3, 4)}),
    Op.SLICE: ([T(F32, (4, 5))], {"starts": (1, 0), "stops": (3, 5), "steps": (1, 2)}),
    Op.PAD: ([T(F32, (2, 3))], {"pads": (1, 0, 0, 2), "value": 0.5}),
    Op.CONCAT: ([T(F32, (2, 3)), T(F32, (1, 3))], {"axis": 0}),
    Op.FLIP: ([T(F32, (2, 3))], {"axes": (1,)}),
    Op.GATHER: ([T(F32, (5, 3)), T(I64, (2,))], {"axis": 0}),
    Op.SCATTER: ([T(F32, (5, 3)), T(I64, (2, 1)), T(F32, (2, 3))], {"reduction": "add"}),
    Op.IOTA: ([], {"shape": (3, 4), "axis": 1, "dtype": I64}),
    Op.FULL: ([], {"shape": (3, 4), "value": 1.5, "dtype": F32}),
    Op.CONSTANT: ([], {"name": "w", "shape": (3,), "dtype": F32}),
    Op.MATMUL: ([T(F32, (2, 3, 4)), T(F32, (4, 5))], {}),
    Op.CONV: (
        [T(F32, (1, 2, 5, 5)), T(F32, (4, 2, 3, 3))],
        {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "groups": 1},
    ),
    Op.LINEAR: ([T(F32, (2, 3)), T(F32, (4, 3)), T(F32, (4,))], {}),
    Op.RELU: ([T(F32, (2, 3))], {}),
    Op.GELU: ([T(F32, (2, 3))], {"approximate": "tanh"}),
    Op.SILU: ([T(F32, (2, 3))], {}),
    Op.SIGMOID: ([T(F32, (2, 3))], {}),
    Op.SOFTMAX: ([T(F32, (2, 3))], {"axis": -1}),
    Op.LOG_SOFTMAX: ([T(F32, (2, 3))], {"axis": 0}),
    Op.LAYER_NORM: ([T(F32, (2, 3)), T(F32, (3,)), T(F32, (3,))], {"ndim": 1, "eps": 1e-5}),
    Op.RMS_NORM: ([T(F32, (2, 3)), T(F32, (3,))], {"ndim": 1, "eps": 1e-6}),
    Op.EMBEDDING: ([T(F32, (5, 3)), T(I64, (2, 2))], {}),
    Op.SDPA: ([T(F32, (2, 3, 4)), T(F32, (2, 5, 4)), T(F32, (2, 5, 2))], {"is_causal": False, "scale": 0.5}),
    Op.CONV2D: ([T(F32, (1, 2, 5, 5)), T(F32, (4, 2, 3, 3)), T(F32, (4,))], {"strides": (1, 1), "pads": (0, 0, 0, 0)}),
    Op.MAX_POOL2D: ([T(F32, (1, 2, 5, 5))], {"kernel": (2, 2), "strides": (1, 2), "pads": (1, 0, 1, 1)}),
    Op.AVG_POOL2D: (
        [T(F32, (1, 2, 5, 5))],
        {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "count_include_pad": False},
    ),
    Op.BATCH_NORM: ([T(F32, (2, 3, 4)), T(F32, (3,)), T(F32, (3,)), T(F32, (3,)), T(F32, (3,))], {"eps": 1e-5}),
    Op.REDUCE_MEAN: ([T(F32, (2, 3, 4))], {"axes": (1, 2), "keepdim": False}),
    Op.TRIL: ([T(F32, (3, 4))], {"k": 1}),
    Op.TRIU: ([T(F32, (3, 4))], {"k": -1}),
}

GARBAGE = [
    None,
    "x",
    -1,
    0,
    1.5,
    True,
    (),
    (None,),
    (-1,),
    (0, 0),
    (1, 2, 3, 4, 5, 6, 7, 8),
    sym("zz"),
    DType.bool,
    10**30,
]
CTX = ShapeCtx()


def _run_ref(op: Op, types: list[TensorType], attrs: Attrs) -> None:
    """Check an accepted call: the reference either runs and returns the promised type, or raises ExecError."""
    try:
        (out,) = OPS[op].infer(types, attrs, CTX)
    except ShapeError:
        return
    if (
        not out.is_static()
        or not all(t.is_static() for t in types)
        or any(isinstance(v, type(sym("a"))) for v in attrs.values())
    ):
        return
    if op is Op.CONSTANT or np.prod(out.shape, dtype=np.float64) > 10**6:
        return
    rng = np.random.default_rng(0)
    xs = [rand(t.shape, t.dtype, rng, 0, 1) for t in types]
    try:
        with np.errstate(all="ignore"):
            (y,) = OPS[op].ref(xs, attrs)
    except ExecError:
        return
    y = np.asarray(y)
    assert y.shape == out.shape, f"{op.value}{dict(attrs)}: ref shape {y.shape}, rule {out.shape}"
    assert y.dtype == out.dtype.np, f"{op.value}{dict(attrs)}: ref dtype {y.dtype}, rule {out.dtype}"


def test_base_table_covers_every_op() -> None:
    assert set(BASE) == set(OPS)


@pytest.mark.parametrize("op", list(BASE), ids=lambda o: o.value)
def test_garbage_attrs_raise_shape_error_or_run(op: Op) -> None:
    types, attrs = BASE[op]
    OPS[op].infer(types, Attrs(attrs), CTX)  # the base call is valid
    _run_ref(op, types, Attrs(attrs))
    for key in sorted(set(OPS[op].attrs) | set(attrs)):
        for bad in GARBAGE:
            a = Attrs({**attrs, key: bad})
            try:
                OPS[op].infer(types, a, CTX)
            except ShapeError:
                continue
            _run_ref(op, types, a)


@pytest.mark.parametrize("op", list(BASE), ids=lambda o: o.value)
def test_odd_input_ranks_raise_shape_error_or_run(op: Op) -> None:
    types, attrs = BASE[op]
    shapes = [(), (1,), (3,), (2, 3), (3, 3), (2, 0), (1, 2, 5, 5)]
    for combo in itertools.islice(itertools.product(shapes, repeat=len(types)), 400):
        ts = [T(t.dtype, s) for t, s in zip(types, combo)]
        try:
            OPS[op].infer(ts, Attrs(attrs), CTX)
        except ShapeError:
            continue
        _run_ref(op, ts, Attrs(attrs))
