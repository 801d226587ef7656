"""Layout and data-movement primitives, plus the source ops (iota, full, constant)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aotc.errors import ExecError, ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.gather_ids import NEGATIVE_INDICES, allows_negative, checked_indices
from aotc.ir.ops.base import Op, OpDef, OpKind, number_attr, one, same_dtype
from aotc.ir.shapes import ShapeCtx, fmt_shape, norm_axis, numel
from aotc.ir.symbolic import SymExpr, add, floordiv, mul, smax
from aotc.ir.types import Attrs, Shape, ShapeDim, TensorType


def _shape_attr(attrs: Attrs, key: str = "shape") -> Shape:
    shape = attrs.get(key)
    if not isinstance(shape, tuple) or not all(
        isinstance(d, (int, SymExpr)) and not isinstance(d, bool) for d in shape
    ):
        raise ShapeError(f"attr {key!r} must be a tuple of dims, got {shape!r}")
    return shape


def _nonneg(ctx: ShapeCtx, shape: Shape, what: str) -> None:
    for d in shape:
        if not ctx.proves_nonneg(d):
            raise ShapeError(f"{what}: dim {d} may be negative")


def _reshape_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    shape = _shape_attr(attrs)
    _nonneg(ctx, shape, "reshape")
    ctx.require_equal(
        numel(ts[0].shape),
        numel(shape),
        f"reshape {fmt_shape(ts[0].shape)} to {fmt_shape(shape)} changes the element count",
    )
    return one(ts[0].dtype, shape)


def _permute_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    perm = attrs.get("perm")
    if not isinstance(perm, tuple) or sorted(perm) != list(range(ts[0].rank)):
        raise ShapeError(f"permute: {perm!r} is not a permutation of {ts[0].rank} axes")
    return one(ts[0].dtype, tuple(ts[0].shape[p] for p in perm))


def _broadcast_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    shape, src = _shape_attr(attrs), ts[0].shape
    _nonneg(ctx, shape, "broadcast")
    if len(shape) < len(src):
        raise ShapeError(f"broadcast {fmt_shape(src)} to lower rank {fmt_shape(shape)}")
    for i, d in enumerate(src):
        o = shape[len(shape) - len(src) + i]
        if not ctx.is_one(d):
            ctx.require_equal(d, o, f"cannot broadcast {fmt_shape(src)} to {fmt_shape(shape)}")
    return one(ts[0].dtype, shape)


def _slice_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    src = ts[0].shape
    starts, stops, steps = attrs.get("starts"), attrs.get("stops"), attrs.get("steps")
    if not all(isinstance(v, tuple) and len(v) == len(src) for v in (starts, stops, steps)):
        raise ShapeError("slice needs starts, stops and steps with one entry per axis")
    out: list[ShapeDim] = []
    for dim, start, stop, step in zip(src, starts, stops, steps):
        if not isinstance(step, int) or step <= 0:
            raise ShapeError(f"slice step must be a positive int, got {step!r}")
        ctx.check_true(start, ">=", 0, "slice start")
        ctx.check_true(stop, "<=", dim, "slice stop")
        length = floordiv(add(add(stop, mul(start, -1)), step - 1), step)
        out.append(length if ctx.bounds(length)[0] >= 0 else smax(length, 0))
    return one(ts[0].dtype, tuple(out))


def _slice_ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    idx = tuple(slice(a, max(a, b), c) for a, b, c in zip(attrs["starts"], attrs["stops"], attrs["steps"]))
    return (np.asarray(xs[0][idx], order="C"),)


def _pad_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    src, pads = ts[0].shape, attrs.get("pads")
    if not isinstance(pads, tuple) or len(pads) != 2 * len(src):
        raise ShapeError("pad needs (lo, hi) per axis")
    for p in pads:
        ctx.check_true(p, ">=", 0, "pad amount")
    number_attr(attrs, "value", 0.0, finite=False)
    return one(ts[0].dtype, tuple(add(add(d, pads[2 * i]), pads[2 * i + 1]) for i, d in enumerate(src)))


def _pad_ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    p = attrs["pads"]
    widths = [(p[2 * i], p[2 * i + 1]) for i in range(xs[0].ndim)]
    value = attrs.get("value", 0.0)
    x = xs[0]
    if x.ndim == 0:  # np.pad refuses an empty width list
        return (x.copy(),)
    if x.dtype == np.bool_:
        value = bool(value)
    elif x.dtype.kind in "iu":
        value = int(value)
    return (np.pad(x, widths, constant_values=np.asarray(value).astype(x.dtype)),)


def _concat_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    dt = same_dtype(ts, "concat")
    rank = ts[0].rank
    if rank == 0:
        raise ShapeError("concat of scalars: reshape them to rank 1 first")
    if any(t.rank != rank for t in ts):
        raise ShapeError(f"concat needs inputs of one rank, got {[fmt_shape(t.shape) for t in ts]}")
    axis = norm_axis(attrs.get("axis", 0), rank)
    total: ShapeDim = 0
    for t in ts:
        for i in range(rank):
            if i != axis:
                ctx.require_equal(ts[0].shape[i], t.shape[i], f"concat along axis {axis}: dim {i} differs")
        total = add(total, t.shape[axis])
    return one(dt, tuple(total if i == axis else d for i, d in enumerate(ts[0].shape)))


def _flip_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    axes = attrs.get("axes", ())
    if not isinstance(axes, tuple):
        raise ShapeError(f"flip axes must be a tuple of ints, got {axes!r}")
    if len({norm_axis(a, ts[0].rank) for a in axes}) != len(axes):
        raise ShapeError(f"flip axes repeat an axis: {axes!r}")
    return one(ts[0].dtype, ts[0].shape)


def _gather_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    data, idx = ts
    if not idx.dtype.is_int:
        raise ShapeError(f"gather indices must be int32 or int64, got {idx.dtype.value}")
    if data.rank == 0:
        raise ShapeError("gather from a scalar: data needs rank >= 1")
    axis = norm_axis(attrs.get("axis", 0), data.rank)
    if not isinstance(attrs.get(NEGATIVE_INDICES, False), bool):
        raise ShapeError(f"gather attr {NEGATIVE_INDICES!r} must be a bool, got {attrs[NEGATIVE_INDICES]!r}")
    return one(data.dtype, data.shape[:axis] + idx.shape + data.shape[axis + 1 :])


def _gather_ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    # Ids outside [0, n) (PyTorch) or [-n, n) (ONNX, negative_indices=True) raise IndexRangeError.
    data, idx = xs
    axis = attrs.get("axis", 0) % max(data.ndim, 1)
    return (np.take(data, checked_indices(idx, data.shape[axis], allows_negative(attrs)), axis=axis),)


def _source_shape(attrs: Attrs, ctx: ShapeCtx) -> Shape:
    shape = _shape_attr(attrs)
    _nonneg(ctx, shape, "shape")
    if not isinstance(attrs.get("dtype"), DType):
        raise ShapeError("needs a dtype attr")
    return shape


def _iota_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    shape = _source_shape(attrs, ctx)
    if not shape:
        raise ShapeError("iota needs a shape of rank >= 1")
    if attrs["dtype"] is DType.bool:
        raise ShapeError("iota needs a numeric dtype, got bool")
    norm_axis(attrs.get("axis", 0), len(shape))
    return one(attrs["dtype"], shape)


def _iota_ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    shape, axis = attrs["shape"], attrs.get("axis", 0) % max(len(attrs["shape"]), 1)
    ar = np.arange(shape[axis]).astype(attrs["dtype"].np)
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return (np.asarray(np.broadcast_to(ar.reshape(view), shape), order="C"),)


def _full_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    shape = _source_shape(attrs, ctx)
    # A symbolic value lets a graph compute with a dynamic size (e.g. a mean's divisor).
    if not isinstance(attrs.get("value"), (int, float, bool, SymExpr)):
        raise ShapeError("full needs a scalar value attr")
    return one(attrs["dtype"], shape)


def _constant_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    shape = _source_shape(attrs, ctx)
    if not isinstance(attrs.get("name"), str) or not all(isinstance(d, int) for d in shape):
        raise ShapeError("constant needs a name and a static shape")
    return one(attrs["dtype"], shape)


def _constant_ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    raise ExecError("constant nodes are bound by the executor, not run")


DEFS = [
    OpDef(
        Op.RESHAPE,
        _reshape_infer,
        lambda xs, a: (xs[0].reshape(a["shape"]),),
        (1, 1),
        onnx="Reshape",
        attrs=("shape",),
        kind=OpKind.VIEW,
    ),
    OpDef(
        Op.PERMUTE,
        _permute_infer,
        lambda xs, a: (np.asarray(np.transpose(xs[0], a["perm"]), order="C"),),
        (1, 1),
        onnx="Transpose",
        attrs=("perm",),
        kind=OpKind.VIEW,
    ),
    OpDef(
        Op.BROADCAST,
        _broadcast_infer,
        lambda xs, a: (np.asarray(np.broadcast_to(xs[0], a["shape"]), order="C"),),
        (1, 1),
        onnx="Expand",
        attrs=("shape",),
        kind=OpKind.VIEW,
    ),
    OpDef(
        Op.SLICE, _slice_infer, _slice_ref, (1, 1), onnx="Slice", attrs=("starts", "stops", "steps"), kind=OpKind.VIEW
    ),
    OpDef(Op.PAD, _pad_infer, _pad_ref, (1, 1), onnx="Pad", attrs=("pads", "value"), kind=OpKind.VIEW),
    OpDef(
        Op.CONCAT,
        _concat_infer,
        lambda xs, a: (np.concatenate(xs, axis=a.get("axis", 0)),),
        (1, None),
        onnx="Concat",
        attrs=("axis",),
        kind=OpKind.VIEW,
    ),
    OpDef(
        Op.FLIP,
        _flip_infer,
        lambda xs, a: (np.asarray(np.flip(xs[0], a.get("axes", ())), order="C"),),
        (1, 1),
        attrs=("axes",),
        kind=OpKind.VIEW,
    ),
    OpDef(
        Op.GATHER,
        _gather_infer,
        _gather_ref,
        (2, 2),
        onnx="Gather",
        attrs=("axis", NEGATIVE_INDICES),
        kind=OpKind.INDEX,
    ),
    OpDef(Op.IOTA, _iota_infer, _iota_ref, (0, 0), attrs=("shape", "axis", "dtype"), kind=OpKind.SOURCE),
    OpDef(
        Op.FULL,
        _full_infer,
        lambda xs, a: (np.full(a["shape"], a["value"], dtype=a["dtype"].np),),
        (0, 0),
        onnx="ConstantOfShape",
        attrs=("shape", "value", "dtype"),
        kind=OpKind.SOURCE,
    ),
    OpDef(
        Op.CONSTANT,
        _constant_infer,
        _constant_ref,
        (0, 0),
        onnx="Constant",
        attrs=("name", "shape", "dtype"),
        kind=OpKind.SOURCE,
    ),
]
