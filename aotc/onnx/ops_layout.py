"""ONNX data-movement and mask ops -> aotc layout ops: Tile, Pad (constant, edge, reflect, wrap),
DepthToSpace / SpaceToDepth, CenterCropPad, Trilu, EyeLike, OneHot, and Dropout at inference."""

from __future__ import annotations

from typing import Any

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import norm_axis
from aotc.ir.symbolic import floordiv
from aotc.ir.types import ShapeDim, Value
from aotc.onnx._common import dtype_from_np, dtype_from_onnx
from aotc.onnx.node import OnnxNode, Operand
from aotc.onnx.ops_math import Converter, values
from aotc.onnx.ops_shape import slice_axis

Importer = Any

# -- tiling and padding --------------------------------------------------------------------------------------


def _tile(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    reps = node.static_ints(1, "repeats")
    if len(reps) != x.type.rank or any(r < 0 for r in reps):
        raise ShapeError(f"{node.label}: repeats {reps} must be one non-negative int per axis of rank {x.type.rank}")
    if all(r == 1 for r in reps):
        return [x]
    shape = x.type.shape
    inter = tuple(v for d in shape for v in (1, d))
    big = tuple(v for r, d in zip(reps, shape) for v in (r, d))
    y = imp.b.op(Op.BROADCAST, imp.b.reshape(x, inter), shape=big)
    return [imp.b.reshape(y, tuple(r * d for r, d in zip(reps, shape)))]


def _pad(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    rank = x.type.rank
    if node.opset >= 11:
        pads = node.ints(1, "pads")
        value = node.scalar(2, "constant_value", 0)
        axes = node.static_ints(3, "axes") if node.opset >= 18 else None
    else:
        pads, value, axes = tuple(node.attr("pads")), node.attr("value", 0.0), None
    axes = tuple(norm_axis(a, rank) for a in axes) if axes is not None else tuple(range(rank))
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"{node.label}: {len(pads)} pads for {len(axes)} axes")
    lo: list[ShapeDim] = [0] * rank
    hi: list[ShapeDim] = [0] * rank
    for j, a in enumerate(axes):
        lo[a], hi[a] = pads[j], pads[j + len(axes)]
    # negative pads crop
    crop_lo = [-p if isinstance(p, int) and p < 0 else 0 for p in lo]
    crop_hi = [-p if isinstance(p, int) and p < 0 else 0 for p in hi]
    if any(crop_lo) or any(crop_hi):
        shape = x.type.shape
        x = imp.b.op(
            Op.SLICE, x, starts=tuple(crop_lo), stops=tuple(d - c for d, c in zip(shape, crop_hi)), steps=(1,) * rank
        )
        lo = [0 if c else p for p, c in zip(lo, crop_lo)]
        hi = [0 if c else p for p, c in zip(hi, crop_hi)]
    mode = node.attr("mode", "constant")
    if not any(not (isinstance(p, int) and p == 0) for p in lo + hi):
        return [x]
    if mode == "constant":
        flat = tuple(v for pair in zip(lo, hi) for v in pair)
        dt = x.type.dtype
        v = bool(value) if dt is DType.bool else (int(value) if dt.is_int else float(value))
        return [imp.b.op(Op.PAD, x, pads=flat, value=v)]
    if mode not in ("edge", "reflect", "wrap"):
        raise node.fail(f"pad mode {mode!r} is not supported")
    for a in range(rank):
        x = _pad_axis(imp, node, x, a, lo[a], hi[a], mode)
    return [x]


def _pad_axis(imp: Importer, node: OnnxNode, x: Value, a: int, lo: ShapeDim, hi: ShapeDim, mode: str) -> Value:
    if not isinstance(lo, int) or not isinstance(hi, int):
        raise node.fail(f"{mode} padding needs static pad amounts")
    if lo == 0 and hi == 0:
        return x
    d = x.type.shape[a]
    parts = []
    if lo:
        parts.append(_border(imp, x, a, d, lo, mode, left=True))
    parts.append(x)
    if hi:
        parts.append(_border(imp, x, a, d, hi, mode, left=False))
    return imp.b.op(Op.CONCAT, *parts, axis=a)


def _border(imp: Importer, x: Value, a: int, d: ShapeDim, p: int, mode: str, left: bool) -> Value:
    b = imp.b
    if mode == "edge":
        edge = slice_axis(imp, x, a, 0, 1) if left else slice_axis(imp, x, a, d - 1, d)
        shape = tuple(p if i == a else s for i, s in enumerate(x.type.shape))
        return b.op(Op.BROADCAST, edge, shape=shape)
    if mode == "wrap":
        return slice_axis(imp, x, a, d - p, d) if left else slice_axis(imp, x, a, 0, p)
    # reflect mirrors around the edge element without repeating it
    part = slice_axis(imp, x, a, 1, p + 1) if left else slice_axis(imp, x, a, d - 1 - p, d - 1)
    return b.op(Op.FLIP, part, axes=(a,))


# -- small structural ops ----------------------------------------------------------------------------------


def _trilu(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    k = node.scalar(1, "k", 0)
    if not isinstance(k, int):
        raise node.fail("a dynamic diagonal offset k is not supported")
    return [imp.b.op(Op.TRIU if node.attr("upper", 1) else Op.TRIL, x, k=k)]


def _dropout(imp: Importer, node: OnnxNode) -> list[Operand]:
    x = node.inputs[0]
    training = node.scalar(2, "training_mode", False) if node.opset >= 12 else False
    ratio = node.scalar(1, "ratio", 0.5) if node.opset >= 12 else node.attr("ratio", 0.5)
    if training and ratio != 0:
        raise node.fail("Dropout in training mode is random; only inference (training_mode=false) is supported")
    outs: list[Operand] = [x]
    if node.wants(1):
        shape = x.type.shape if isinstance(x, Value) else x.shape
        outs.append(imp.full(True, DType.bool, tuple(shape)))
    return outs


def _depth_to_space(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    bs = node.attr("blocksize")
    n, c, h, w = x.type.shape
    if node.attr("mode", "DCR") == "DCR":
        y = imp.b.permute(imp.b.reshape(x, (n, bs, bs, floordiv(c, bs * bs), h, w)), (0, 3, 4, 1, 5, 2))
    else:
        y = imp.b.permute(imp.b.reshape(x, (n, floordiv(c, bs * bs), bs, bs, h, w)), (0, 1, 4, 2, 5, 3))
    return [imp.b.reshape(y, (n, floordiv(c, bs * bs), h * bs, w * bs))]


def _space_to_depth(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    bs = node.attr("blocksize")
    n, c, h, w = x.type.shape
    y = imp.b.reshape(x, (n, c, floordiv(h, bs), bs, floordiv(w, bs), bs))
    y = imp.b.permute(y, (0, 3, 5, 1, 2, 4) if node.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4))
    return [imp.b.reshape(y, (n, c * bs * bs, floordiv(h, bs), floordiv(w, bs)))]


def _one_hot(imp: Importer, node: OnnxNode) -> list[Operand]:
    idx = imp.value(node.inputs[0], what=f"{node.label} indices")
    depth = node.scalar(1, "depth")
    if isinstance(depth, float):
        depth = int(depth)
    vals = imp.value(node.inputs[2], what=f"{node.label} values")
    rank = idx.type.rank + 1
    axis = norm_axis(node.attr("axis", -1), rank)
    i64 = imp.b.cast(idx, DType.int64)
    d = imp.full(depth, DType.int64)
    # negative indices count from the end; anything still out of range matches no position
    i64 = imp.b.op(Op.WHERE, imp.b.op(Op.LT, i64, imp.full(0, DType.int64)), imp.b.op(Op.ADD, i64, d), i64)
    shape = idx.type.shape[:axis] + (depth,) + idx.type.shape[axis:]
    pos = imp.b.op(Op.IOTA, shape=shape, axis=axis, dtype=DType.int64)
    hit = imp.b.op(Op.EQ, pos, imp.b.reshape(i64, idx.type.shape[:axis] + (1,) + idx.type.shape[axis:]))
    off = imp.b.reshape(slice_axis(imp, vals, 0, 0, 1), ())
    on = imp.b.reshape(slice_axis(imp, vals, 0, 1, 2), ())
    return [imp.b.op(Op.WHERE, hit, on, off)]


def _eye_like(imp: Importer, node: OnnxNode) -> list[Operand]:
    x = node.inputs[0]
    shape = x.type.shape if isinstance(x, Value) else x.shape
    dt = dtype_from_onnx(node.attr("dtype"), f"{node.label} dtype") if node.attr("dtype") is not None else None
    if dt is None:
        dt = x.type.dtype if isinstance(x, Value) else dtype_from_np(x.dtype, f"{node.label} input")
    row = imp.b.op(Op.IOTA, shape=tuple(shape), axis=0, dtype=DType.int64)
    col = imp.b.op(Op.IOTA, shape=tuple(shape), axis=1, dtype=DType.int64)
    diag = imp.b.op(Op.EQ, imp.b.op(Op.SUB, col, row), imp.full(node.attr("k", 0), DType.int64))
    return [imp.b.cast(diag, dt)]


def _center_crop_pad(imp: Importer, node: OnnxNode) -> list[Operand]:
    """Crop (a centered window) or zero-pad (centered) each listed axis to the target size."""
    (x,) = values(imp, node, 0)
    target = node.static_ints(1, "shape")
    rank = x.type.rank
    axes = [norm_axis(a, rank) for a in (node.attr("axes") or range(rank))]
    if len(target) != len(axes):
        raise ShapeError(f"{node.label}: {len(target)} target sizes for {len(axes)} axes")
    for a, size in zip(axes, target):
        dim = x.type.shape[a]
        if imp.ctx.known_equal(dim, size):
            continue
        if not isinstance(dim, int):
            raise node.fail(f"cropping or padding dynamic dim {dim} is not supported")
        if size < dim:
            start = (dim - size) // 2
            x = slice_axis(imp, x, a, start, start + size)
        else:
            pads = [0] * 2 * rank
            pads[2 * a] = (size - dim) // 2
            pads[2 * a + 1] = size - dim - pads[2 * a]
            x = imp.b.op(Op.PAD, x, pads=tuple(pads), value=False if x.type.dtype is DType.bool else 0)
    return [x]


CONVERTERS: dict[str, Converter] = {
    "Tile": _tile,
    "Pad": _pad,
    "CenterCropPad": _center_crop_pad,
    "Trilu": _trilu,
    "Dropout": _dropout,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "OneHot": _one_hot,
    "EyeLike": _eye_like,
}
