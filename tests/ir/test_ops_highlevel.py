"""High-level ops: reference vs decomposition (both through the graph runner), and refs vs independent formulas."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from aotc.errors import ShapeError
from aotc.ir import DType, Op, Symbol, TensorType, sym
from aotc.ir.dtypes import dtype_of
from aotc.ir.evaluate import run_graph
from aotc.ir.ops import OPS, PRIMITIVES
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic_values import evaluate

from .formulas import INDEPENDENT, gelu, norm, sdpa
from .util import F16, F32, FLOATS, I32, I64, TOL, arr, decomposed, infer, ref_checked

Spec = tuple  # ("x", shape) float | ("pos", shape) positive float | ("idx", shape, n) | ("sidx", shape, n) | ("mask", shape) | ("fmask", shape) | ("val", values)


def _x(*shape: int) -> Spec:
    return ("x", shape)


# op -> list of (input specs, attrs, tolerance scale)
CASES: dict[Op, list[tuple[list[Spec], dict[str, Any], float]]] = {
    Op.LINEAR: [
        ([_x(2, 3, 4), _x(5, 4), _x(5)], {}, 2),
        ([_x(4), _x(3, 4)], {}, 2),
        ([_x(3, 4), _x(6, 4)], {}, 2),
        ([_x(0, 4), _x(3, 4), _x(3)], {}, 1),
    ],
    Op.RELU: [([_x(2, 3)], {}, 1), ([_x()], {}, 1), ([("val", [-1000.0, -0.0, 0.0, 3.0, np.inf, -np.inf])], {}, 1)],
    Op.GELU: [
        ([_x(3, 5)], {"approximate": "none"}, 2),
        ([_x(3, 5)], {"approximate": "tanh"}, 2),
        ([_x(7)], {}, 2),
        ([("val", [-1000.0, -10.0, -0.0, 1e-3, 10.0, 1000.0])], {"approximate": "tanh"}, 2),
        ([("val", [-1000.0, -10.0, -0.0, 1e-3, 10.0, 1000.0])], {"approximate": "none"}, 2),
    ],
    Op.SILU: [([_x(4, 3)], {}, 2), ([("val", [-1000.0, -50.0, 0.0, 50.0, 1000.0])], {}, 2)],
    Op.SIGMOID: [([_x(4, 3)], {}, 2), ([("val", [-1000.0, -50.0, 0.0, 50.0, 1000.0])], {}, 2)],
    Op.SOFTMAX: [
        ([_x(3, 5)], {"axis": -1}, 2),
        ([_x(3, 5)], {"axis": 0}, 2),
        ([_x(2, 3, 4)], {"axis": 1}, 2),
        ([("val", [[1000.0, 0.0, -1000.0], [500.0, 500.0, -np.inf]])], {"axis": -1}, 1),
        ([_x(2, 0)], {"axis": -1}, 1),
        ([_x()], {"axis": 0}, 1),
    ],
    Op.LOG_SOFTMAX: [
        ([_x(3, 5)], {"axis": -1}, 2),
        ([_x(2, 3, 4)], {"axis": 0}, 2),
        ([("val", [[1000.0, 0.0, -1000.0], [500.0, 500.0, -np.inf]])], {"axis": -1}, 2),
    ],
    Op.LAYER_NORM: [
        ([_x(2, 3, 8), _x(8), _x(8)], {"ndim": 1, "eps": 1e-5}, 4),
        ([_x(2, 3, 4), _x(3, 4)], {"ndim": 2}, 4),
        ([_x(4, 6)], {}, 4),
        ([("val", 1e4 + np.linspace(-1.0, 1.0, 16).reshape(2, 8))], {"eps": 1e-5}, 400),
    ],
    Op.RMS_NORM: [
        ([_x(2, 3, 8), _x(8)], {"ndim": 1, "eps": 1e-6}, 4),
        ([_x(2, 3, 4)], {"ndim": 2}, 4),
        ([("val", [[1e4, -1e4, 3e4, 5.0]])], {}, 4),
    ],
    Op.EMBEDDING: [
        ([_x(10, 4), ("idx", (2, 3), 10)], {}, 1),
        ([_x(5, 2), ("idx", (), 5)], {}, 1),
        ([_x(5, 2), ("idx32", (4,), 5)], {}, 1),
        ([_x(10, 4), ("sidx", (2, 3), 10)], {"negative_indices": True}, 1),
    ],
    Op.SDPA: [
        ([_x(2, 3, 4, 8), _x(2, 3, 5, 8), _x(2, 3, 5, 6)], {}, 4),
        ([_x(2, 4, 8), _x(2, 4, 8), _x(2, 4, 8)], {"is_causal": True}, 4),
        ([_x(1, 3, 4), _x(1, 5, 4), _x(1, 5, 4)], {"is_causal": True, "scale": 0.3}, 4),
        ([_x(2, 2, 4, 8), _x(2, 2, 6, 8), _x(2, 2, 6, 8), ("mask", (4, 6))], {}, 4),
        ([_x(2, 2, 4, 8), _x(2, 2, 6, 8), _x(2, 2, 6, 8), ("fmask", (2, 1, 4, 6))], {}, 4),
        ([_x(2, 4, 8), _x(2, 4, 8), _x(2, 4, 8), ("mask", (2, 4, 4))], {"is_causal": True}, 4),
        ([_x(2, 1, 4, 8), _x(2, 3, 4, 8), _x(2, 3, 4, 8)], {"scale": 2.0}, 4),
        ([("val", [[1000.0, 0.0], [-1000.0, 1000.0]]), _x(3, 2), _x(3, 2)], {"scale": 10.0}, 4),
    ],
    Op.CONV2D: [
        (
            [_x(2, 4, 7, 6), _x(6, 2, 3, 3), _x(6)],
            {"strides": (2, 1), "pads": (1, 1, 0, 2), "dilations": (1, 2), "groups": 2},
            4,
        ),
        ([_x(1, 3, 5, 5), _x(4, 3, 3, 3)], {}, 4),
        ([_x(1, 4, 6, 6), _x(4, 1, 3, 3), _x(4)], {"groups": 4, "pads": (1, 1, 1, 1)}, 4),
        ([_x(1, 2, 9), _x(3, 2, 2)], {"strides": (3,), "pads": (0, 1), "dilations": (2,)}, 4),
    ],
    Op.MAX_POOL2D: [
        ([_x(2, 3, 6, 6)], {"kernel": (2, 2)}, 1),
        ([_x(1, 2, 7, 5)], {"kernel": (3, 3), "strides": (2, 1), "pads": (1, 1, 1, 0)}, 1),
        ([_x(1, 1, 5, 4)], {"kernel": (2, 3), "strides": (1, 2), "pads": (1, 0, 0, 1)}, 1),
        ([("val", -np.ones((1, 1, 3, 3)))], {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1)}, 1),
        ([_x(1, 2, 7, 8)], {"kernel": (3, 3), "strides": (2, 2), "ceil_mode": True}, 1),  # a partial last window
        ([_x(1, 1, 7, 7)], {"kernel": (3, 3), "strides": (3, 3), "pads": (1, 1, 1, 1), "ceil_mode": True}, 1),
    ],
    Op.AVG_POOL2D: [
        ([_x(2, 3, 6, 6)], {"kernel": (2, 2)}, 2),
        ([_x(1, 2, 7, 5)], {"kernel": (3, 3), "strides": (2, 1), "pads": (1, 1, 1, 0), "count_include_pad": True}, 2),
        ([_x(1, 2, 7, 5)], {"kernel": (3, 3), "strides": (2, 1), "pads": (1, 1, 1, 0), "count_include_pad": False}, 2),
        ([_x(1, 1, 5, 4)], {"kernel": (2, 3), "strides": (1, 2), "pads": (1, 0, 0, 1), "count_include_pad": False}, 2),
        ([_x(1, 2, 7, 8)], {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": True}, 2),
        (
            [_x(1, 2, 7, 8)],
            {"kernel": (3, 2), "strides": (2, 3), "pads": (1, 0, 1, 1), "ceil_mode": True, "count_include_pad": False},
            2,
        ),
        ([_x(2, 1, 5, 5)], {"kernel": (2, 2), "strides": (2, 2), "ceil_mode": True}, 2),
    ],
    Op.BATCH_NORM: [
        ([_x(2, 3, 4, 4), _x(3), ("pos", (3,)), _x(3), _x(3)], {"eps": 1e-5}, 4),
        ([_x(2, 3, 4), _x(3), ("pos", (3,))], {}, 4),
        ([_x(4, 3), _x(3), ("pos", (3,)), _x(3)], {"eps": 1e-3}, 4),
    ],
    Op.REDUCE_MEAN: [
        ([_x(2, 3, 4)], {"axes": (1,), "keepdim": False}, 2),
        ([_x(2, 3, 4)], {"axes": (0, 2), "keepdim": True}, 2),
        ([_x(2, 3, 4)], {"axes": (), "keepdim": False}, 1),
        ([_x(5)], {"axes": (0,)}, 2),
    ],
    Op.TRIL: [([_x(4, 5)], {}, 1), ([_x(2, 3, 3)], {"k": 1}, 1), ([_x(3, 4)], {"k": -2}, 1)],
    Op.TRIU: [([_x(4, 5)], {}, 1), ([_x(2, 3, 3)], {"k": 1}, 1), ([_x(3, 4)], {"k": -2}, 1)],
}


def _inputs(specs: Sequence[Spec], dtype: DType, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for spec in specs:
        kind = spec[0]
        if kind == "x":
            out.append(arr(rng.uniform(-1.5, 1.5, size=spec[1]), dtype))
        elif kind == "pos":
            out.append(arr(rng.uniform(0.5, 2.0, size=spec[1]), dtype))
        elif kind in ("idx", "idx32", "sidx"):
            n = spec[2]  # ids in [0, n) as PyTorch takes them, or [-n, n) ("sidx") for negative_indices=True
            ids = rng.integers(-n if kind == "sidx" else 0, n, size=spec[1])
            out.append(ids.astype(np.int32 if kind == "idx32" else np.int64))
        elif kind == "mask":
            m = rng.random(spec[1]) < 0.6
            m[..., 0] = True  # every query sees at least one key, so no row is all -inf
            out.append(m)
        elif kind == "fmask":
            m = np.where(rng.random(spec[1]) < 0.6, 0.0, np.where(rng.random(spec[1]) < 0.5, -np.inf, -2.5))
            m[..., 0] = 0.0
            out.append(arr(m, dtype))
        else:
            out.append(arr(spec[1], dtype))
    return out


def _types(xs: Sequence[np.ndarray]) -> list[TensorType]:
    return [TensorType(dtype_of(x.dtype), tuple(x.shape)) for x in xs]


def _compare(got: np.ndarray, want: np.ndarray, dtype: DType, scale: float) -> None:
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(
        np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64), rtol=rtol * scale, atol=atol * scale
    )


def _all_cases() -> list[tuple[Op, int]]:
    return [(op, i) for op, cases in CASES.items() for i in range(len(cases))]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.value)
@pytest.mark.parametrize(("op", "case"), _all_cases(), ids=lambda v: v.value if isinstance(v, Op) else str(v))
def test_decomposition_matches_reference(op: Op, case: int, dtype: DType) -> None:
    specs, attrs, scale = CASES[op][case]
    rng = np.random.default_rng(100 + case)
    xs = _inputs(specs, dtype, rng)
    high, low = decomposed(op, _types(xs), attrs)
    assert all(n.op in PRIMITIVES for n in low.nodes)
    assert low.outputs[0].type == high.outputs[0].type
    (want,) = run_graph(high, xs, {})
    (got,) = run_graph(low, xs, {})
    assert got.dtype == want.dtype == dtype.np and got.shape == want.shape
    assert np.array_equal(np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64)))
    _compare(got, want, dtype, scale * (2 if dtype is not F32 else 1))


# -- references vs independent float64 / python formulas (formulas.py) -----------------------------------


@pytest.mark.parametrize(("op", "case"), _all_cases(), ids=lambda v: v.value if isinstance(v, Op) else str(v))
def test_reference_matches_independent_formula(op: Op, case: int) -> None:
    specs, attrs, scale = CASES[op][case]
    xs = _inputs(specs, F32, np.random.default_rng(200 + case))
    got = ref_checked(op, xs, **attrs)
    x64 = [x.astype(np.float64) if x.dtype.kind == "f" else x for x in xs]
    want = INDEPENDENT[op](x64, attrs)
    _compare(got, arr(want, F32), F32, scale)


def test_every_high_level_op_has_an_independent_formula() -> None:
    assert set(INDEPENDENT) == set(CASES) == {op for op, d in OPS.items() if d.decompose is not None}


# -- specific stability and semantics checks ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.value)
def test_sigmoid_and_silu_saturate_without_nan(dtype: DType) -> None:
    x = arr([-1000.0, 1000.0, -np.inf, np.inf], dtype)
    for op in (Op.SIGMOID, Op.SILU):
        high, low = decomposed(op, _types([x]), {})
        for g in (high, low):
            (y,) = run_graph(g, [x], {})
            assert not np.isnan(y.astype(np.float64)[:2]).any(), (op, y)
            np.testing.assert_array_equal(y[:2], [0.0, 1.0] if op is Op.SIGMOID else [-0.0, 1000.0])


@pytest.mark.parametrize("op", [Op.SOFTMAX, Op.LOG_SOFTMAX])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.value)
def test_softmax_family_of_huge_logits(op: Op, dtype: DType) -> None:
    x = arr([[1000.0, 0.0], [-1000.0, -1000.0], [60000.0, -60000.0]], dtype)
    high, low = decomposed(op, _types([x]), {"axis": -1})
    for g in (high, low):
        (y,) = run_graph(g, [x], {})
        y = y.astype(np.float64)
        assert not np.isnan(y).any()
        if op is Op.SOFTMAX:
            np.testing.assert_array_equal(y, [[1.0, 0.0], [0.5, 0.5], [1.0, 0.0]])
        else:
            np.testing.assert_allclose(y[:2], [[0.0, -1000.0], [-math.log(2), -math.log(2)]], rtol=TOL[dtype][0])


def test_gelu_matches_math_erf_and_tanh_formula_on_a_dense_grid() -> None:
    x = np.linspace(-8.0, 8.0, 4001, dtype=np.float32)
    for approx in ("none", "tanh"):
        got = ref_checked(Op.GELU, [x], approximate=approx).astype(np.float64)
        want = np.array([gelu(float(v), approx) for v in x])
        np.testing.assert_allclose(got, want, rtol=2e-7, atol=2e-7)
        _, low = decomposed(Op.GELU, _types([x]), {"approximate": approx})
        (dec,) = run_graph(low, [x], {})
        np.testing.assert_allclose(dec, want, rtol=2e-6, atol=2e-6)


def test_layer_norm_with_large_offset_stays_accurate() -> None:
    rng = np.random.default_rng(7)
    x = (1e3 + rng.standard_normal((4, 64))).astype(np.float32)
    high, low = decomposed(Op.LAYER_NORM, _types([x]), {"eps": 1e-5})
    want = norm(x.astype(np.float64), 1, 1e-5, rms=False)
    for g in (high, low):
        (y,) = run_graph(g, [x], {})
        np.testing.assert_allclose(y, want, atol=2e-3)
        np.testing.assert_allclose(y.std(axis=-1), 1.0, atol=1e-3)


def test_sdpa_with_symbolic_head_dim_needs_explicit_scale() -> None:
    s, d = sym("s"), sym("d")
    syms = [Symbol("s", 1, 8), Symbol("d", 1, 16)]
    ctx = ShapeCtx({"s": (1, 8), "d": (1, 16)})
    q = TensorType(F32, (2, s, d))
    with pytest.raises(ShapeError, match="explicit scale"):
        infer(Op.SDPA, [q, q, q], ctx)
    high, low = decomposed(Op.SDPA, [q, q, q], {"scale": 0.25, "is_causal": True}, syms)
    rng = np.random.default_rng(8)
    for ns, nd in [(1, 1), (3, 16), (8, 5)]:
        xs = [arr(rng.uniform(-1, 1, (2, ns, nd)), F32) for _ in range(3)]
        env = {"s": ns, "d": nd}
        (want,) = run_graph(high, xs, env)
        (got,) = run_graph(low, xs, env)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            want,
            sdpa(*[x.astype(np.float64) for x in xs], None, {"scale": 0.25, "is_causal": True}),
            rtol=1e-5,
            atol=1e-6,
        )


def test_symbolic_pool_output_sizes() -> None:
    b, h, w = sym("b"), sym("h"), sym("w")
    ctx = ShapeCtx({"b": (1, 4), "h": (3, 40), "w": (4, 33)})
    attrs = {"kernel": (3, 2), "strides": (2, 3), "pads": (1, 1, 0, 1)}
    for op in (Op.MAX_POOL2D, Op.AVG_POOL2D):
        out = infer(op, [TensorType(F32, (b, 3, h, w))], ctx, **attrs)
        assert out.shape[:2] == (b, 3)
        for hv in range(3, 41):
            for wv in (4, 5, 17, 33):
                env = {"b": 2, "h": hv, "w": wv}
                want = ((hv + 2 - 3) // 2 + 1, (wv + 1 - 2) // 3 + 1)
                assert (evaluate(out.shape[2], env), evaluate(out.shape[3], env)) == want
    with pytest.raises(ShapeError, match="smaller than the kernel"):
        infer(Op.MAX_POOL2D, [TensorType(F32, (b, 3, h, w))], ctx, kernel=(5, 5))


def test_sdpa_mask_rules() -> None:
    q = TensorType(F16, (2, 4, 8))
    with pytest.raises(ShapeError, match="mask"):
        infer(Op.SDPA, [q, q, q, TensorType(F32, (4, 4))])
    with pytest.raises(ShapeError, match="broadcast"):
        infer(Op.SDPA, [q, q, q, TensorType(DType.bool, (3, 4))])
    with pytest.raises(ShapeError, match="head dims"):
        infer(Op.SDPA, [q, TensorType(F16, (2, 4, 6)), q])
    assert infer(Op.SDPA, [q, q, TensorType(F16, (2, 4, 3)), TensorType(F16, (1, 4))]).shape == (2, 4, 3)


def test_symbolic_decompositions_run_for_many_bindings() -> None:
    b, s, h, w = sym("b"), sym("s"), sym("h"), sym("w")
    syms = [Symbol("b", 1, 3), Symbol("s", 1, 9), Symbol("h", 4, 12), Symbol("w", 4, 12)]
    cases = [
        (Op.LAYER_NORM, [("x", (b, s)), ("x", (s,)), ("x", (s,))], {}),
        (Op.RMS_NORM, [("x", (b, 2, s))], {"ndim": 2}),
        (Op.REDUCE_MEAN, [("x", (b, s, 3))], {"axes": (1,), "keepdim": False}),
        (Op.SOFTMAX, [("x", (b, s))], {"axis": 1}),
        (Op.TRIL, [("x", (b, s, s))], {"k": -1}),
        (Op.LINEAR, [("x", (b, s, 4)), ("x", (3, 4)), ("x", (3,))], {}),
        (Op.CONV2D, [("x", (b, 2, h, w)), ("x", (4, 2, 3, 3)), ("x", (4,))], {"strides": (2, 1), "pads": (1, 1, 0, 0)}),
        (Op.MAX_POOL2D, [("x", (b, 2, h, w))], {"kernel": (2, 2)}),
        (Op.MAX_POOL2D, [("x", (b, 2, h, w))], {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
        (
            Op.AVG_POOL2D,
            [("x", (b, 2, h, w))],
            {"kernel": (3, 2), "strides": (2, 2), "pads": (1, 1, 0, 1), "count_include_pad": False},
        ),
        (
            Op.MAX_POOL2D,
            [("x", (b, 2, h, w))],
            {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": True},
        ),
        (Op.AVG_POOL2D, [("x", (b, 2, h, w))], {"kernel": (3, 3), "strides": (2, 2), "ceil_mode": True}),
        (
            Op.MAX_POOL2D,
            [("x", (b, 2, h, w))],
            {"kernel": (3, 3), "strides": (3, 3), "pads": (1, 1, 1, 1), "ceil_mode": True},
        ),
        (
            Op.AVG_POOL2D,
            [("x", (b, 2, h, w))],
            {"kernel": (2, 3), "strides": (3, 3), "pads": (1, 0, 1, 1), "ceil_mode": True, "count_include_pad": True},
        ),
    ]
    rng = np.random.default_rng(9)
    for op, specs, attrs in cases:
        types = [TensorType(F32, shape) for _, shape in specs]
        high, low = decomposed(op, types, attrs, syms)
        for env in (
            {"b": 1, "s": 1, "h": 4, "w": 4},
            {"b": 3, "s": 9, "h": 12, "w": 7},
            {"b": 2, "s": 5, "h": 9, "w": 11},
        ):
            xs = [arr(rng.uniform(-1, 1, tuple(evaluate(d, env) for d in t.shape)), F32) for t in types]
            (want,) = run_graph(high, xs, env)
            (got,) = run_graph(low, xs, env)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{op.value} {env}")


@pytest.mark.parametrize(
    ("op", "types", "attrs", "match"),
    [
        (Op.RELU, [TensorType(I32, (2,))], {}, "floating"),
        (Op.GELU, [TensorType(F32, (2,))], {"approximate": "erf"}, "approximate"),
        (Op.SOFTMAX, [TensorType(I64, (2,))], {}, "floating"),
        (Op.SOFTMAX, [TensorType(F32, (2,))], {"axis": 1}, "out of range"),
        (Op.LAYER_NORM, [TensorType(F32, (2, 3)), TensorType(F32, (4,))], {}, "shape"),
        (Op.LAYER_NORM, [TensorType(F32, (2, 3))], {"ndim": 3}, "ndim"),
        (Op.LAYER_NORM, [TensorType(F32, (2, 3)), TensorType(F16, (3,))], {}, "one dtype"),
        (Op.EMBEDDING, [TensorType(F32, (4, 2)), TensorType(F32, (3,))], {}, "int"),
        (Op.LINEAR, [TensorType(F32, (2, 3)), TensorType(F32, (4, 5))], {}, "features"),
        (Op.LINEAR, [TensorType(F32, (2, 3)), TensorType(F32, (4, 3)), TensorType(F32, (5,))], {}, "bias"),
        (Op.BATCH_NORM, [TensorType(F32, (2, 3, 4)), TensorType(F32, (4,)), TensorType(F32, (4,))], {}, "channels"),
        (Op.MAX_POOL2D, [TensorType(F32, (1, 1, 4, 4))], {"kernel": (2, 2), "pads": (2, 0, 0, 0)}, "half the kernel"),
        (Op.MAX_POOL2D, [TensorType(F32, (1, 1, 4, 4))], {"kernel": (5, 5)}, "smaller than the kernel"),
        (Op.AVG_POOL2D, [TensorType(F32, (1, 1, 4, 4))], {"kernel": 2}, "kernel"),
        (Op.AVG_POOL2D, [TensorType(I32, (1, 1, 4, 4))], {"kernel": (2, 2)}, "floating"),
        (Op.CONV2D, [TensorType(F32, (1, 2, 4, 4)), TensorType(F32, (3, 2, 3, 3)), TensorType(F32, (4,))], {}, "bias"),
        (Op.REDUCE_MEAN, [TensorType(F32, (2, 3))], {"axes": (1, 0)}, "axes"),
        (Op.TRIL, [TensorType(F32, (3,))], {}, "rank"),
        (Op.TRIU, [TensorType(F32, (3, 3))], {"k": 1.5}, "diagonal"),
    ],
)
def test_bad_high_level_inputs_raise_shape_error(op: Op, types: list, attrs: dict, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        infer(op, types, **attrs)
