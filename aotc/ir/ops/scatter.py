"""Scatter: a copy of ``data`` with slices written (or combined) at given coordinates.

The one scatter primitive has ONNX ScatterND semantics: the last axis of ``indices`` (a static length ``k``, at
most the data's rank) holds coordinates into the data's first ``k`` axes, and ``updates`` holds, for each of
them, the slice ``data[i_0, ..., i_{k-1}]`` to write: its shape is ``indices.shape[:-1] + data.shape[k:]``.
ScatterElements is this op with full coordinates (``k`` = rank). Coordinate ``j`` must lie in
``[-d_j, d_j)`` (a negative one counts from the end, ONNX's rule); anything else raises IndexRangeError. With
``negative_indices=False`` (PyTorch's ``index_copy_``, and every write into a state) it must lie in ``[0, d_j)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.gather_ids import NEGATIVE_INDICES, IndexRangeError, checked_indices
from aotc.ir.ops.base import Op, OpDef, OpKind, one, same_dtype
from aotc.ir.shapes import ShapeCtx, fmt_shape
from aotc.ir.types import Attrs, TensorType

# reduction attr -> how a written element combines with what is there ("none": the update replaces it)
REDUCTIONS = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    data, idx, upd = ts
    dt = same_dtype([data, upd], "scatter data and updates")
    if not idx.dtype.is_int:
        raise ShapeError(f"scatter indices must be int32 or int64, got {idx.dtype.value}")
    k = idx.shape[-1] if idx.rank else None
    if not isinstance(k, int) or not 1 <= k <= data.rank:
        raise ShapeError(
            f"scatter indices {fmt_shape(idx.shape)} need a static last dim in [1, {data.rank}] (the data's rank)"
        )
    reduction = attrs.get("reduction", "none")
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ShapeError(f"scatter reduction must be one of {sorted(REDUCTIONS)}, got {reduction!r}")
    if not isinstance(attrs.get(NEGATIVE_INDICES, True), bool):
        raise ShapeError(f"scatter {NEGATIVE_INDICES} must be a bool, got {attrs[NEGATIVE_INDICES]!r}")
    if reduction != "none" and dt is DType.bool:
        raise ShapeError(f"scatter reduction {reduction!r} needs a numeric dtype, got bool")
    want = idx.shape[:-1] + data.shape[k:]
    if upd.rank != len(want):
        raise ShapeError(f"scatter updates {fmt_shape(upd.shape)} must have shape {fmt_shape(want)}")
    for i, (u, w) in enumerate(zip(upd.shape, want)):
        ctx.require_equal(u, w, f"scatter updates {fmt_shape(upd.shape)} must have shape {fmt_shape(want)}: dim {i}")
    return one(dt, data.shape)


def scatter_allows_negative(attrs: Attrs) -> bool:
    """Whether a scatter's coordinates may count from the end (ONNX's rule, the default) or must lie in [0, d)."""
    return bool(attrs.get(NEGATIVE_INDICES, True))


def _scatter_ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    data, idx, upd = xs
    where = _coordinates(data.shape, idx, attrs)  # checked before anything is copied or written
    return (scatter_into(data.copy(), where, upd, attrs),)


def scatter_in_place(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    """The reference of a state write: the updates written into ``data`` itself (the state's own array), every
    coordinate checked before any element is written."""
    data, idx, upd = xs
    return (scatter_into(data, _coordinates(data.shape, idx, attrs), upd, attrs),)


def _coordinates(shape: tuple[int, ...], idx: np.ndarray, attrs: Attrs) -> tuple[np.ndarray, ...]:
    negative = scatter_allows_negative(attrs)
    where = []
    for j in range(idx.shape[-1]):
        try:
            where.append(checked_indices(idx[..., j], shape[j], negative_indices=negative).astype(np.intp))
        except IndexRangeError as e:
            raise IndexRangeError(e.value, e.low, e.high, (*e.position, j)) from None
    return tuple(where)


def scatter_into(out: np.ndarray, where: tuple[np.ndarray, ...], upd: np.ndarray, attrs: Attrs) -> np.ndarray:
    combine = REDUCTIONS[attrs.get("reduction", "none")]
    if combine is None:
        out[where] = upd  # with repeated coordinates the last update wins, as numpy assigns in order
    else:
        combine.at(out, where, upd)
    return out


DEFS = [
    OpDef(
        Op.SCATTER,
        _scatter_infer,
        _scatter_ref,
        (3, 3),
        onnx="ScatterND",
        attrs=("reduction", NEGATIVE_INDICES),
        kind=OpKind.INDEX,
    )
]
