"""Shared helpers for the IR tests: typed arrays, single-op graphs, decomposition graphs, tolerances."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aotc.ir import Builder, DType, Graph, Symbol, TensorType, Value, verify
from aotc.ir.dtypes import dtype_of
from aotc.ir.evaluate import run_graph
from aotc.ir.ops import OPS, Op
from aotc.ir.shapes import DEFAULT_CTX, ShapeCtx
from aotc.ir.types import Attrs

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16
I32, I64, BOOL = DType.int32, DType.int64, DType.bool
FLOATS = (F32, F16, BF16)
INTS = (I32, I64)
NUMERIC = FLOATS + INTS
ALL_DTYPES = tuple(DType)

# rtol, atol per dtype for results rounded once to that dtype (half types: about 2 ulp).
TOL = {F32: (2e-6, 1e-6), F16: (2e-3, 1e-4), BF16: (1.6e-2, 1e-3), I32: (0, 0), I64: (0, 0), BOOL: (0, 0)}

# Inputs that every float op must handle: zeros of both signs, infinities, NaN, huge and tiny magnitudes.
FLOAT_EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 2.5, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-30, 3.0e38, 1e-45, 7.0)
INT_EDGES = (0, 1, -1, 7, -7, 2, -2, 100, -100, 3)


def arr(values: Any, dtype: DType) -> np.ndarray:
    with np.errstate(all="ignore"):  # huge edge values overflow to inf in half types on purpose
        return np.asarray(values, dtype=np.float64 if dtype.is_float else dtype.np).astype(dtype.np)


def rand(shape: Sequence[int], dtype: DType, rng: np.random.Generator, lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    if dtype is BOOL:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        return rng.integers(int(lo) - 5, int(hi) + 6, size=shape).astype(dtype.np)
    return arr(rng.uniform(lo, hi, size=shape), dtype)


def with_edges(shape: Sequence[int], dtype: DType, rng: np.random.Generator) -> np.ndarray:
    """Random values with the dtype's edge values written over the first elements."""
    x = rand(shape, dtype, rng).reshape(-1)
    edges = FLOAT_EDGES if dtype.is_float else INT_EDGES if dtype.is_int else (True, False)
    n = min(len(edges), x.size)
    x[:n] = arr(edges[:n], dtype)
    return x.reshape(shape)


def ttype(x: np.ndarray) -> TensorType:
    return TensorType(dtype_of(x.dtype), tuple(x.shape))


def infer(op: Op, types: Sequence[TensorType], ctx: ShapeCtx = DEFAULT_CTX, **attrs: Any) -> TensorType:
    (t,) = OPS[op].infer(list(types), Attrs(attrs), ctx)
    return t


def ref_checked(op: Op, xs: Sequence[np.ndarray], ctx: ShapeCtx = DEFAULT_CTX, **attrs: Any) -> np.ndarray:
    """Run the op's numpy reference and check it agrees with the shape/dtype rule."""
    t = infer(op, [ttype(x) for x in xs], ctx, **attrs)
    with np.errstate(all="ignore"):
        (y,) = OPS[op].ref(list(xs), Attrs(attrs))
    y = np.asarray(y)
    assert y.dtype == t.dtype.np, f"{op.value}: ref gives {y.dtype}, rule says {t.dtype.value}"
    assert y.shape == t.shape, f"{op.value}: ref gives {y.shape}, rule says {t.shape}"
    return y


def assert_close(got: np.ndarray, want: np.ndarray, dtype: DType, scale: float = 1.0) -> None:
    rtol, atol = TOL[dtype]
    g = np.asarray(got).astype(np.float64) if dtype.is_float else np.asarray(got)
    w = np.asarray(want).astype(np.float64) if dtype.is_float else np.asarray(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    if dtype.is_float:
        np.testing.assert_allclose(g, w, rtol=rtol * scale, atol=atol * scale, equal_nan=True)
    else:
        np.testing.assert_array_equal(g, w)


def graph_of(
    inputs: Sequence[TensorType],
    build: Any,
    symbols: Sequence[Symbol] = (),
    constants: Mapping[str, np.ndarray] | None = None,
) -> Graph:
    """A verified graph whose body ``build(builder, input_values)`` emits; it returns the output values."""
    ctx = ShapeCtx({s.name: (s.min, s.max) for s in symbols}, {s.name: s.multiple_of for s in symbols})
    ins = tuple(Value(i, t) for i, t in enumerate(inputs))
    b = Builder(ctx, next_id=len(ins))
    outs = tuple(build(b, ins))
    g = Graph(
        ins,
        tuple(f"x{i}" for i in range(len(ins))),
        tuple(b.nodes),
        outs,
        output_tree={"tuple": list(range(len(outs)))},
        symbols=tuple(symbols),
        constants=constants or {},
    )
    verify(g, "test")
    return g


def run_single(op: Op, xs: Sequence[np.ndarray], **attrs: Any) -> np.ndarray:
    """Run one op through a verified one-node graph and the graph runner."""
    g = graph_of([ttype(x) for x in xs], lambda b, ins: b.emit(op, ins, attrs))
    (y,) = run_graph(g, list(xs), {})
    return y


def decomposed(
    op: Op, inputs: Sequence[TensorType], attrs: Mapping[str, Any], symbols: Sequence[Symbol] = ()
) -> tuple[Graph, Graph]:
    """(high-level one-node graph, its decomposition), both verified; the second primitive-only."""
    high = graph_of(inputs, lambda b, ins: b.emit(op, ins, dict(attrs)), symbols)
    low = graph_of(inputs, lambda b, ins: OPS[op].decompose(b, ins, Attrs(dict(attrs))), symbols)
    verify(low, "decompose", primitive_only=True)
    return high, low
