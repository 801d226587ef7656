"""Tensor operators and methods against numpy: values, shapes, broadcasting and torch's type promotion."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec, TraceError
from aotc.frontend.trace import trace

from .helpers import rng, run, trace_run

F32, F16, I32, I64, BOOL = aotc.float32, aotc.float16, aotc.int32, aotc.int64, aotc.bool


def arr(shape, dtype, seed=0, lo=-5, hi=5):
    r = rng(seed)
    if dtype == "bool":
        return r.random(shape) < 0.5
    if dtype.startswith("int"):
        v = r.integers(lo, hi, shape)
        return np.where(v == 0, 1, v).astype(dtype)  # no zero divisors
    return r.uniform(lo, hi, shape).astype(dtype)


BINARY = [
    (operator.add, np.add),
    (operator.sub, np.subtract),
    (operator.mul, np.multiply),
    (operator.mod, np.mod),
    (operator.floordiv, np.floor_divide),
    (lambda a, b: aotc.maximum(a, b), np.maximum),
    (lambda a, b: aotc.minimum(a, b), np.minimum),
]


@pytest.mark.parametrize(("fn", "ref"), BINARY)
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize(("sa", "sb"), [((2, 3), (2, 3)), ((4, 1, 3), (5, 1)), ((3,), ())])
def test_binary_matches_numpy(fn, ref, dtype, sa, sb):
    a, b = arr(sa, dtype, 1), arr(sb, dtype, 2)
    out = trace_run(fn, a, b)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out, ref(a, b), rtol=1e-6)


def test_operators_with_scalars_and_reflected():
    a = arr((2, 3), "float32")
    out = trace_run(lambda x: (2 - x, 3 / x, 2**x, x**2, -x, abs(x), 1 + x * 0.5, 7 // x, 5 % x), a)
    ref = (2 - a, 3 / a, 2.0**a, a**2, -a, abs(a), 1 + a * 0.5, np.floor_divide(7, a), np.mod(5, a))
    for o, r in zip(out, ref):
        assert o.dtype == np.float32
        np.testing.assert_allclose(o, r, rtol=1e-5)


def test_integer_division_follows_torch():
    a = np.array([7, -7, 7, -7, 6], np.int64)
    b = np.array([2, 2, -2, -2, 3], np.int64)
    div, floor, rem = trace_run(lambda x, y: (x / y, x // y, x % y), a, b)
    assert div.dtype == np.float32 and floor.dtype == np.int64 and rem.dtype == np.int64
    np.testing.assert_allclose(div, a / b)
    np.testing.assert_array_equal(floor, [3, -4, -4, 3, 2])
    np.testing.assert_array_equal(rem, [1, 1, -1, -1, 0])


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (("int32", (3,)), 2.5, F32),  # int tensor * float scalar -> default float
        (("float16", (3,)), 1.0, F16),  # a scalar never widens a float tensor
        (("int32", (3,)), 2, I32),
        (("bool", (3,)), 1, I64),
        (("bool", (3,)), True, BOOL),
        (("int32", (3,)), ("int64", (3,)), I64),
        (("int32", (3,)), ("int64", ()), I32),  # a 0-d tensor of the same category does not widen
        (("float16", (3,)), ("float32", ()), F16),
        (("int64", (3,)), ("float16", ()), F16),  # ... but a higher category wins
        (("float16", (3,)), ("bfloat16", (3,)), F32),
        (("float16", (3,)), ("float32", (3,)), F32),
        (("bool", (3,)), ("int32", (3,)), I32),
    ],
)
def test_type_promotion(a, b, expected):
    specs = {"a": TensorSpec(a[1], a[0])}
    if isinstance(b, tuple):
        specs["b"] = TensorSpec(b[1], b[0])
        g = trace(lambda a, b: a * b if a.dtype is not BOOL or b.dtype is not BOOL else a & b, specs)
    else:
        g = trace(lambda a: a * b if a.dtype is not BOOL or b is not True else a & b, specs)
    assert g.outputs[0].type.dtype is expected


@pytest.mark.parametrize("op", [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge])
def test_comparisons_give_bool(op):
    a, b = arr((3, 4), "int32", 1), arr((4,), "float32", 2)
    out = trace_run(lambda x, y: (op(x, y), op(x, 0.5)), a, b)
    np.testing.assert_array_equal(out[0], op(a, b))
    np.testing.assert_array_equal(out[1], op(a, 0.5))
    assert out[0].dtype == np.bool_


def test_logical_operators_on_bool():
    a, b = arr((5,), "bool", 1), arr((5,), "bool", 2)
    out = trace_run(lambda x, y: (x & y, x | y, x ^ y, ~x, x.logical_and(y), aotc.logical_not(y)), a, b)
    for o, r in zip(out, (a & b, a | b, a ^ b, ~a, a & b, ~b)):
        np.testing.assert_array_equal(o, r)


def test_bool_arithmetic_is_a_trace_error():
    with pytest.raises(TraceError, match="bool tensors"):
        trace_run(lambda x: x - x, arr((3,), "bool"))  # torch refuses bool subtraction too
    b = np.array([True, False, True])
    np.testing.assert_array_equal(trace_run(lambda x, y: (x + y, x * y), b, ~b), [b | ~b, b & ~b])  # as torch


def test_float_math_on_ints_computes_in_float32():
    a = np.array([1, 4, 9], np.int32)
    out = trace_run(lambda x: (x.sqrt(), aotc.exp(x), x.sigmoid(), x.floor(), x.abs()), a)
    assert [o.dtype for o in out] == [np.float32, np.float32, np.float32, np.int32, np.int32]
    np.testing.assert_allclose(out[0], [1, 2, 3])
    np.testing.assert_allclose(out[1], np.exp(a.astype(np.float64)), rtol=1e-6)


def test_unary_methods():
    a = arr((2, 5), "float32", lo=0.1, hi=3)
    fns = {
        "exp": np.exp,
        "log": np.log,
        "sqrt": np.sqrt,
        "rsqrt": lambda v: 1 / np.sqrt(v),
        "sin": np.sin,
        "cos": np.cos,
        "tanh": np.tanh,
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "relu": lambda v: np.maximum(v, 0),
        "neg": np.negative,
        "floor": np.floor,
        "ceil": np.ceil,
        "round": np.round,
        "sign": np.sign,
        "reciprocal": lambda v: 1 / v,
        "square": np.square,
    }
    out = trace_run(lambda x: tuple(getattr(x - 1.5, n)() for n in fns), a)
    with np.errstate(invalid="ignore"):  # log and sqrt of the negative entries are nan on both sides
        for o, r in zip(out, fns.values()):
            np.testing.assert_allclose(o, r(a - 1.5), rtol=2e-6, atol=1e-6)


def test_clamp_and_masked_fill():
    a = arr((3, 4), "float32")
    m = a > 1
    out = trace_run(lambda x, k: (x.clamp(-1, 1), x.clamp(min=0), x.clip(max=2.0), x.masked_fill(k, -9.0)), a, m)
    np.testing.assert_allclose(out[0], np.clip(a, -1, 1))
    np.testing.assert_allclose(out[1], np.maximum(a, 0))
    np.testing.assert_allclose(out[2], np.minimum(a, 2))
    np.testing.assert_allclose(out[3], np.where(m, -9.0, a))


def test_casts():
    a = arr((4,), "float32")
    out = trace_run(
        lambda x: (
            x.half(),
            x.int(),
            x.long(),
            x.bool(),
            x.to(aotc.bfloat16).float(),
            x.to("int32"),
            x.type_as(x.long()),
        ),
        a,
    )
    assert [o.dtype.name for o in out] == ["float16", "int32", "int64", "bool", "float32", "int32", "int64"]
    np.testing.assert_array_equal(out[1], np.trunc(a).astype(np.int32))
    with pytest.raises(TraceError, match="float64"):
        trace_run(lambda x: x.double(), a)


@pytest.mark.parametrize(
    ("sa", "sb"),
    [((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5))],
)
def test_matmul_like_torch(sa, sb):
    a, b = arr(sa, "float32", 1), arr(sb, "float32", 2)
    out = trace_run(lambda x, y: x @ y, a, b)
    ref = np.matmul(a, b)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_numpy_arrays_become_constants():
    table = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = trace(lambda x: x + table + table, {"x": TensorSpec((2, 3))})
    assert list(g.constants) == ["_const0"]
    np.testing.assert_allclose(run(g, np.ones((2, 3), np.float32)), 1 + 2 * table)
    out = trace_run(lambda x: np.float64(2.0) * x + np.array([1.0, 2.0]), np.ones((2,), np.float32))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [3, 4])


# -- reductions -----------------------------------------------------------------------------------


def test_reductions():
    a = arr((3, 4, 5), "float32")
    out = trace_run(
        lambda x: (
            x.sum(),
            x.sum(1),
            x.sum((0, 2), keepdim=True),
            x.mean(-1),
            aotc.mean(x, dim=(0, 1)),
            x.prod(2),
            x.amax(1),
            x.amin((0, 1)),
            x.max(),
            x.argmax(),
            x.argmin(1, keepdim=True),
            x.var(1),
            x.std(2, unbiased=False),
            x.logsumexp(2),
        ),
        a,
    )
    ref = (
        a.sum(),
        a.sum(1),
        a.sum((0, 2), keepdims=True),
        a.mean(-1),
        a.mean((0, 1)),
        a.prod(2),
        a.max(1),
        a.min((0, 1)),
        a.max(),
        a.argmax(),
        a.argmin(1, keepdims=True),
        a.var(1, ddof=1),
        a.std(2),
        np.log(np.exp(a).sum(2)),
    )
    for o, r in zip(out, ref):
        assert o.shape == np.shape(r)
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)


def test_max_with_dim_returns_values_and_indices():
    a = arr((3, 4), "float32")
    values, indices = trace_run(lambda x: tuple(x.max(1)), a)
    np.testing.assert_allclose(values, a.max(1))
    np.testing.assert_array_equal(indices, a.argmax(1))
    mins = trace_run(lambda x: aotc.min(x, 0, keepdim=True).values, a)
    np.testing.assert_allclose(mins, a.min(0, keepdims=True))
    both = trace_run(lambda x, y: x.max(y), a, a.T.copy().T + 1)
    np.testing.assert_allclose(both, a + 1)


def test_integer_and_bool_reductions():
    a = arr((3, 4), "int32")
    b = a > 0
    out = trace_run(lambda x, m: (x.sum(1), m.sum(), m.all(1), m.any(), x.all(), x.amax(0)), a, b)
    assert out[0].dtype == np.int64 and out[1].dtype == np.int64
    np.testing.assert_array_equal(out[0], a.sum(1))
    assert out[1] == b.sum()
    np.testing.assert_array_equal(out[2], b.all(1))
    assert out[3] == b.any() and out[4] == a.all()
    np.testing.assert_array_equal(out[5], a.max(0))
    with pytest.raises(TraceError, match="floating-point"):
        trace_run(lambda x: x.mean(), a)


# -- layout ------------------------------------------------------------------------------------------


def test_layout_methods():
    a = arr((2, 3, 4), "float32")
    out = trace_run(
        lambda x: (
            x.reshape(6, -1),
            x.view(-1),
            x.permute(2, 0, 1),
            x.transpose(0, 2),
            x.mT,
            x[0].T,
            x.unsqueeze(1).unsqueeze(-1),
            x.unsqueeze(0).squeeze(),
            x.unsqueeze(0).squeeze(0),
            x[:, :1].squeeze(1),
            x[:1].expand(5, -1, -1),
            x.flatten(1),
            x.flatten(),
            x.repeat(2, 1, 3),
            x.flip(0, 2),
            x.contiguous().clone(),
        ),
        a,
    )
    ref = (
        a.reshape(6, -1),
        a.reshape(-1),
        a.transpose(2, 0, 1),
        a.transpose(2, 1, 0),
        np.swapaxes(a, -1, -2),
        a[0].T,
        a[:, None, :, :, None],
        a,
        a,
        a[:, 0],
        np.broadcast_to(a[:1], (5, 3, 4)),
        a.reshape(2, 12),
        a.reshape(24),
        np.tile(a, (2, 1, 3)),
        a[::-1, :, ::-1],
        a,
    )
    for o, r in zip(out, ref):
        np.testing.assert_array_equal(o, r)


def test_shape_metadata():
    seen = {}

    def f(x):
        seen.update(
            shape=tuple(x.shape[1:]), size1=x.size(1), ndim=x.ndim, dim=x.dim(), dtype=x.dtype, numel=x[0].numel()
        )
        return x

    trace(f, {"x": TensorSpec((Dim("b", 1, 8), 3, 4), "float16")})
    assert seen == {"shape": (3, 4), "size1": 3, "ndim": 3, "dim": 3, "dtype": aotc.float16, "numel": 12}


def test_cat_stack_split_chunk():
    a, b = arr((2, 3), "float32", 1), arr((2, 5), "int32", 2)
    out = trace_run(
        lambda x, y: (
            aotc.cat([x, y], dim=1),
            aotc.stack([x, x * 2], dim=1),
            x.split(2, dim=1),
            aotc.split(y, [1, 4], dim=1),
            y.chunk(3, 1),
            aotc.unbind(x, 1),
        ),
        a,
        b,
    )
    cat, stack, split, split2, chunks, unbound = out
    assert cat.dtype == np.float32
    np.testing.assert_allclose(cat, np.concatenate([a, b], 1))
    np.testing.assert_allclose(stack, np.stack([a, a * 2], 1))
    assert [s.shape for s in split] == [(2, 2), (2, 1)]
    assert [s.shape for s in split2] == [(2, 1), (2, 4)]
    assert [c.shape for c in chunks] == [(2, 2), (2, 2), (2, 1)]  # torch: ceil(5/3)-sized pieces
    np.testing.assert_array_equal(np.concatenate(chunks, 1), b)
    for i, u in enumerate(unbound):
        np.testing.assert_array_equal(u, a[:, i])


def test_creation_functions():
    def f(x):
        n = x.shape[0]
        return (
            aotc.zeros(n, 3),
            aotc.ones((2, n), dtype=aotc.int32),
            aotc.full((n,), 7),
            aotc.full((2,), 1.5),
            aotc.full((2,), True),
            aotc.zeros_like(x),
            aotc.ones_like(x, dtype="bool"),
            aotc.full_like(x, 3),
            aotc.arange(n),
            aotc.arange(2, n, 3),
            aotc.arange(0.0, 1.0, 0.25),
            aotc.arange(5, dtype=aotc.float32),
        )

    g = trace(f, {"x": TensorSpec((Dim("n", 1, 64),), "float16")})
    out = run(g, np.ones(10, np.float16))
    ref = (
        np.zeros((10, 3), np.float32),
        np.ones((2, 10), np.int32),
        np.full(10, 7, np.int64),
        np.full(2, 1.5, np.float32),
        np.ones(2, bool),
        np.zeros(10, np.float16),
        np.ones(10, bool),
        np.full(10, 3, np.float16),
        np.arange(10),
        np.arange(2, 10, 3),
        np.arange(0, 1, 0.25, dtype=np.float32),
        np.arange(5, dtype=np.float32),
    )
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype
        np.testing.assert_array_equal(o, r)


def test_where_tril_triu_index_select():
    a = arr((4, 4), "float32")
    idx = np.array([3, 0, 0], np.int64)
    out = trace_run(
        lambda x, i: (
            aotc.where(x > 0, x, 0),
            x.tril(),
            aotc.triu(x, 1),
            x.index_select(1, i),
            x[i],
            aotc.where(x > 0, 1, 2),
        ),
        a,
        idx,
    )
    ref = (np.where(a > 0, a, 0), np.tril(a), np.triu(a, 1), a[:, idx], a[idx], np.where(a > 0, 1, 2))
    for o, r in zip(out, ref):
        np.testing.assert_array_equal(o, r)
    assert out[5].dtype == np.int64


def test_symbolic_sizes_in_ops():
    def f(x):
        b, s = x.shape
        y = x.reshape(b * s).view(b, s)
        return y + aotc.arange(s).float(), y.sum(1, keepdim=True) / s

    g = trace(f, {"x": TensorSpec((Dim("b", 1, 8), Dim("s", 1, 32)))})
    x = arr((3, 5), "float32")
    y, m = run(g, x)
    np.testing.assert_allclose(y, x + np.arange(5))
    np.testing.assert_allclose(m, x.sum(1, keepdims=True) / 5, rtol=1e-6)


def test_tensor_values_are_unavailable():
    for fn in (lambda x: x.item(), lambda x: x.tolist(), lambda x: float(x), lambda x: int(x), lambda x: np.asarray(x)):
        with pytest.raises(TraceError, match="control flow depends on tensor values"):
            trace_run(fn, arr((1,), "float32"))


def test_constants_from_python_data_and_new_tensors():
    def f(x):
        return (
            aotc.tensor([1.0, 2.0]) * x,
            aotc.tensor([[1, 2]]),
            aotc.tensor(3, dtype=aotc.float16),
            x.new_zeros(2, x.shape[0]),
            x.new_ones((1,)),
            x.new_full((2,), 4),
        )

    g = trace(f, {"x": TensorSpec((Dim("n", 1, 4, hint=2),), "float16")})
    out = run(g, np.array([3, 4], np.float16))
    assert [o.dtype.name for o in out] == ["float32", "int64", "float16", "float16", "float16", "float16"]
    np.testing.assert_array_equal(out[0], [3, 8])
    np.testing.assert_array_equal(out[3], np.zeros((2, 2)))
    np.testing.assert_array_equal(out[5], [4, 4])
    with pytest.raises(TraceError, match="stack/cat"):
        trace_run(lambda x: aotc.tensor([x, x]), np.ones(2, np.float32))


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda x: x.reshape(2, -1, -1), "one -1 at most"),
        (lambda x: x.reshape(5, -1), "invalid for input of size 6"),
        (lambda x: x.permute(0, 0), "repeated dim"),
        (lambda x: x.transpose(0, 5), "out of range"),
        (lambda x: x.unsqueeze(4), "out of range"),
        (lambda x: x.expand(3), "rank"),
        (lambda x: x.split(0), "positive int"),
        (lambda x: x.chunk(0), "positive int"),
        (lambda x: aotc.cat([]), "non-empty"),
        (lambda x: x.sum(dim=5), "out of range"),
        (lambda x: x.masked_fill(x.int(), 0), "bool mask"),
        (lambda x: x.int().masked_fill(x > 0, float("-inf")), "can't be represented"),
        (lambda x: x.to("complex64"), "unknown dtype"),
        (lambda x: x + "a", "got str"),
        (lambda x: x.flatten(1, 0), "comes after"),
        (lambda x: aotc.arange(0, 5, 0), "non-zero"),
        (lambda x: aotc.zeros(-1), "negative size"),
        (lambda x: aotc.where(x > 0), "data-dependent"),
        (lambda x: x.softmax(2), "out of range"),
        (lambda x: x @ 2, "rank >= 1"),
        (lambda x: x.div(2, rounding_mode="up"), "rounding_mode"),
    ],
)
def test_bad_arguments_are_trace_errors(fn, match):
    with pytest.raises(TraceError, match=match):
        trace_run(fn, arr((2, 3), "float32"))


def test_div_rounding_modes():
    a = np.array([7.5, -7.5, 3.0], np.float32)
    floor, trunc = trace_run(lambda x: (x.div(2, rounding_mode="floor"), x.div(2, rounding_mode="trunc")), a)
    np.testing.assert_array_equal(floor, np.floor(a / 2))
    np.testing.assert_array_equal(trunc, np.trunc(a / 2))
