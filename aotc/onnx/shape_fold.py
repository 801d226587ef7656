"""Shape arithmetic at import time: ONNX ops over integer tensors whose elements may be symbolic dims.

``Shape -> Gather -> Concat -> Reshape`` chains over dynamic dims never reach the graph: each op here maps
object arrays of ints / SymExprs to new ones, so a Reshape target is known (symbolically) when it is imported.
A fold returns None when it can't decide (say ``Equal(batch, 1)``); the node is then imported as runtime ops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic import SymExpr, exact_div, floordiv, mod, mul, smax, smin
from aotc.onnx.node import Known, OnnxNode

Fold = Callable[[OnnxNode, list[np.ndarray | None], ShapeCtx], list[Known] | None]
INT64 = np.dtype(np.int64)


class _Undecided(Exception):
    """An element can't be computed symbolically."""


def _nonneg(ctx: ShapeCtx, x: int | SymExpr) -> bool:
    return ctx.bounds(x)[0] >= 0


def _div(ctx: ShapeCtx) -> Callable:
    def fn(a: int | SymExpr, b: int | SymExpr) -> int | SymExpr:
        if isinstance(a, int) and isinstance(b, int):
            if b == 0:
                raise _Undecided
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b > 0) else -q
        # ONNX integer division truncates; that is floor division when both sides are non-negative.
        if isinstance(b, int) and b > 0 and _nonneg(ctx, a):
            return floordiv(a, b)
        if ctx.bounds(b)[0] >= 1:
            q = exact_div(a, b)  # (B*H*W) / (H*W): an exact quotient needs no rounding rule
            if q is not None:
                return q
        raise _Undecided

    return fn


def _mod(ctx: ShapeCtx) -> Callable:
    def fn(a: int | SymExpr, b: int | SymExpr) -> int | SymExpr:
        if isinstance(b, int) and b > 0:
            return mod(a, b)  # ONNX integer Mod takes the divisor's sign, like floor mod
        raise _Undecided

    return fn


def _compare(ctx: ShapeCtx, rel: str) -> Callable:
    def fn(a: int | SymExpr, b: int | SymExpr) -> bool:
        lo, hi = ctx.bounds(a - b)
        if rel == "==":
            if lo == hi == 0 or ctx.known_equal(a, b):
                return True
            if lo > 0 or hi < 0:
                return False
        elif rel == "<":
            if hi < 0 or lo >= 0:
                return hi < 0
        elif rel == "<=":
            if hi <= 0 or lo > 0:
                return hi <= 0
        elif rel == ">":
            if lo > 0 or hi <= 0:
                return lo > 0
        elif rel == ">=" and (lo >= 0 or hi < 0):
            return lo >= 0
        raise _Undecided

    return fn


def _abs(ctx: ShapeCtx) -> Callable:
    def fn(a: int | SymExpr) -> int | SymExpr:
        lo, hi = ctx.bounds(a)
        if lo >= 0:
            return a
        if hi <= 0:
            return mul(a, -1)
        raise _Undecided

    return fn


def _ufunc(fn: Callable, nin: int) -> Callable:
    return np.frompyfunc(fn, nin, 1)


def _binary(make: Callable[[ShapeCtx], Callable], out_dtype: np.dtype | None = None) -> Fold:
    def fold(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
        a, b = xs[0], xs[1]
        out = np.asarray(_ufunc(make(ctx), 2)(a, b), dtype=object)
        return [Known.of(out, out_dtype or _int_dtype(node))]

    return fold


def _int_dtype(node: OnnxNode) -> np.dtype:
    for x in node.inputs:
        if isinstance(x, Known) and x.dtype.kind in "iu":
            return x.dtype
    return INT64


def _variadic(fn: Callable) -> Fold:
    def fold(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
        out = xs[0]
        for x in xs[1:]:
            out = _ufunc(fn, 2)(out, x)
        return [Known.of(np.asarray(out, dtype=object), _int_dtype(node))]

    return fold


def _unary(make: Callable[[ShapeCtx], Callable]) -> Fold:
    def fold(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
        return [Known.of(np.asarray(_ufunc(make(ctx), 1)(xs[0]), dtype=object), _int_dtype(node))]

    return fold


def _norm_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    return tuple(sorted(a % max(rank, 1) for a in axes))


def _gather(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    data, idx = xs[0], xs[1]
    if any(isinstance(i, SymExpr) for i in idx.flat):
        return None
    axis = node.attr("axis", 0) % max(data.ndim, 1)
    n = data.shape[axis]
    index = np.asarray(idx.tolist() if idx.ndim else idx.item(), dtype=np.int64).reshape(idx.shape)
    index = np.where(index < 0, index + n, index)
    if index.size and (index.min() < 0 or index.max() >= n):
        return None
    return [Known.of(np.take(data, index, axis=axis), _int_dtype(node))]


def _concat(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    parts = [x for x in xs if x is not None]
    return [Known.of(np.concatenate(parts, axis=node.attr("axis", 0)), _int_dtype(node))]


def _slice(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    data = xs[0]
    if node.opset >= 10:
        bounds = [node.ints(i, what) for i, what in enumerate(("starts", "ends", "axes", "steps"), start=1)]
        if any(isinstance(v, SymExpr) for b in bounds if b is not None for v in b):
            return None  # a constant sliced to a dynamic length (position_ids[:, :seq]) is sliced at run time
        starts, ends, axes, steps = bounds
    else:
        starts, ends, axes, steps = node.attr("starts"), node.attr("ends"), node.attr("axes"), None
    axes = tuple(axes) if axes is not None else tuple(range(len(starts)))
    steps = tuple(steps) if steps is not None else (1,) * len(starts)
    idx = [slice(None)] * data.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        idx[a % data.ndim] = slice(s, e, st)
    return [Known.of(np.asarray(data[tuple(idx)], dtype=object), _int_dtype(node))]


def _squeeze(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    data = xs[0]
    axes = node.axes(1, since=13)
    axes = _norm_axes(axes, data.ndim) if axes is not None else tuple(i for i, d in enumerate(data.shape) if d == 1)
    return [Known.of(np.squeeze(data, axis=axes), _int_dtype(node))]


def _unsqueeze(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    data = xs[0]
    axes = node.axes(1, since=13) or ()
    rank = data.ndim + len(axes)
    out = data
    for a in _norm_axes(axes, rank):
        out = np.expand_dims(out, a)
    return [Known.of(out, _int_dtype(node))]


def _reshape(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    data = xs[0]
    shape = list(node.static_ints(1, "shape") if node.opset >= 5 else node.attr("shape"))
    if not node.attr("allowzero", 0):
        shape = [data.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [Known.of(data.reshape(shape), _int_dtype(node))]


def _flatten(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    data = xs[0]
    axis = node.attr("axis", 1)
    axis = axis + data.ndim if axis < 0 else axis
    rows = int(np.prod(data.shape[:axis], dtype=np.int64))
    return [Known.of(data.reshape(rows, -1) if data.size else data.reshape(rows, 0), _int_dtype(node))]


def _cast(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    import onnx

    to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(node.attr("to")))
    if to.kind not in "iu":
        return None
    return [Known.of(xs[0], to)]


def _where(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    cond, a, b = xs
    if any(isinstance(c, SymExpr) for c in cond.flat):
        return None
    return [Known.of(np.asarray(np.where(cond.astype(bool), a, b), dtype=object), _int_dtype(node))]


def _reduce(fn: Callable, since: int) -> Fold:
    def fold(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
        data = xs[0]
        axes = node.axes(1, since=since)
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                return [Known.of(data, _int_dtype(node))]
            axes = tuple(range(data.ndim))
        axes = _norm_axes(axes, data.ndim)
        out = np.moveaxis(data, axes, tuple(range(data.ndim - len(axes), data.ndim)))
        lead = out.shape[: data.ndim - len(axes)]
        flat = out.reshape(lead + (-1,)) if data.size else out.reshape(lead + (0,))
        red = np.empty(lead, dtype=object)
        for i in np.ndindex(*lead):
            vals = list(flat[i])
            if not vals:
                return None
            acc = vals[0]
            for v in vals[1:]:
                acc = fn(acc, v)
            red[i] = acc
        if node.attr("keepdims", 1):
            red = red.reshape(tuple(1 if i in axes else d for i, d in enumerate(data.shape)))
        return [Known.of(red, _int_dtype(node))]

    return fold


def _expand(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    shape = node.ints(1, "shape")
    if any(isinstance(d, SymExpr) for d in shape):
        return None
    out_shape = np.broadcast_shapes(xs[0].shape, tuple(shape))
    return [Known.of(np.broadcast_to(xs[0], out_shape).copy(), _int_dtype(node))]


def _transpose(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    perm = node.attr("perm")
    return [Known.of(np.transpose(xs[0], None if perm is None else tuple(perm)), _int_dtype(node))]


def _tile(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    return [Known.of(np.tile(xs[0], node.static_ints(1, "repeats")), _int_dtype(node))]


def _identity(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    return [Known.of(xs[0], _int_dtype(node))]


def _shape(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    shape = xs[0].shape
    start, end = node.attr("start", 0), node.attr("end")
    return [Known.of(np.asarray(shape[slice(start, end)], dtype=np.int64), INT64)]


def _size(node: OnnxNode, xs: list[np.ndarray | None], ctx: ShapeCtx) -> list[Known] | None:
    return [Known.of(np.asarray(xs[0].size, dtype=np.int64), INT64)]


BOOL = np.dtype(bool)

FOLDS: dict[str, Fold] = {
    "Identity": _identity,
    "Cast": _cast,
    "Shape": _shape,
    "Size": _size,
    "Gather": _gather,
    "Concat": _concat,
    "Slice": _slice,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Expand": _expand,
    "Tile": _tile,
    "Transpose": _transpose,
    "Where": _where,
    "Add": _binary(lambda ctx: lambda a, b: a + b),
    "Sub": _binary(lambda ctx: lambda a, b: a - b),
    "Mul": _binary(lambda ctx: lambda a, b: a * b),
    "Div": _binary(_div),
    "Mod": _binary(_mod),
    "Neg": _unary(lambda ctx: lambda a: mul(a, -1)),
    "Abs": _unary(_abs),
    "Sum": _variadic(lambda a, b: a + b),
    "Max": _variadic(smax),
    "Min": _variadic(smin),
    "Equal": _binary(lambda ctx: _compare(ctx, "=="), BOOL),
    "Less": _binary(lambda ctx: _compare(ctx, "<"), BOOL),
    "LessOrEqual": _binary(lambda ctx: _compare(ctx, "<="), BOOL),
    "Greater": _binary(lambda ctx: _compare(ctx, ">"), BOOL),
    "GreaterOrEqual": _binary(lambda ctx: _compare(ctx, ">="), BOOL),
    "ReduceProd": _reduce(mul, since=18),
    "ReduceSum": _reduce(lambda a, b: a + b, since=13),
    "ReduceMax": _reduce(smax, since=18),
    "ReduceMin": _reduce(smin, since=18),
}


def fold_symbolic(node: OnnxNode, ctx: ShapeCtx) -> list[Known] | None:
    """The node's outputs when every input is known and some are symbolic; None when undecidable."""
    fold = FOLDS.get(node.op_type)
    if fold is None:
        return None
    xs = [x.elements() if isinstance(x, Known) else None for x in node.inputs]
    if node.op_type not in ("Shape", "Size") and any(
        isinstance(x, Known) and x.dtype.kind not in "iub" for x in node.inputs
    ):
        return None
    try:
        return fold(node, xs, ctx)
    except _Undecided:
        return None
