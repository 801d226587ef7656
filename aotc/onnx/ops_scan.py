"""ONNX scans and selections -> aotc ops: CumSum (a triangular MATMUL), CumProd (a log-step scan), TopK
(k rounds of ARGMAX)."""

from __future__ import annotations

from typing import Any

import numpy as np

from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import norm_axis, numel
from aotc.ir.types import Value
from aotc.onnx.node import OnnxNode, Operand
from aotc.onnx.ops_gather import gather_elements
from aotc.onnx.ops_math import Converter, values
from aotc.onnx.ops_shape import slice_axis

Importer = Any


def _cumsum(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    axis = norm_axis(node.scalar(1, "axis"), x.type.rank)
    n = x.type.shape[axis]
    # y = x @ T along the axis, T[i, j] = 1 when input i contributes to output j
    i = imp.b.op(Op.IOTA, shape=(n, n), axis=0, dtype=DType.int64)
    j = imp.b.op(Op.IOTA, shape=(n, n), axis=1, dtype=DType.int64)
    rel = {(0, 0): Op.LE, (1, 0): Op.LT, (0, 1): Op.GE, (1, 1): Op.GT}[
        (node.attr("exclusive", 0), node.attr("reverse", 0))
    ]
    tri = imp.b.cast(imp.b.op(rel, i, j), x.type.dtype)
    rank = x.type.rank
    perm = tuple(k for k in range(rank) if k != axis) + (axis,)
    xt = imp.b.permute(x, perm)
    lead = xt.type.shape[:-1]
    y = imp.b.op(Op.MATMUL, imp.b.reshape(xt, (numel(lead), n)), tri)
    y = imp.b.reshape(y, lead + (n,))
    inv = tuple(perm.index(k) for k in range(rank))
    return [imp.b.permute(y, inv)]


def _one(dt: DType) -> object:
    return True if dt is DType.bool else (1 if dt.is_int else 1.0)


def _shift(imp: Importer, x: Value, axis: int, by: int, fill: object) -> Value:
    """x moved ``by`` places along the axis, the vacated front filled with ``fill``."""
    n = x.type.shape[axis]
    pads = [0] * 2 * x.type.rank
    pads[2 * axis] = by
    return imp.b.op(Op.PAD, slice_axis(imp, x, axis, 0, n - by), pads=tuple(pads), value=fill)


def _cumprod(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    axis = norm_axis(node.scalar(1, "axis"), x.type.rank)
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise node.fail(f"CumProd over dynamic dim {n} is not supported")
    one = _one(x.type.dtype)
    rev = bool(node.attr("reverse", 0))
    y = imp.b.op(Op.FLIP, x, axes=(axis,)) if rev else x
    if node.attr("exclusive", 0) and n:
        y = _shift(imp, y, axis, 1, one)
    step = 1
    while step < n:  # Hillis-Steele scan: log2(n) rounds of y *= y shifted by 1, 2, 4, ...
        y = imp.b.op(Op.MUL, y, _shift(imp, y, axis, step, one))
        step *= 2
    return [imp.b.op(Op.FLIP, y, axes=(axis,)) if rev else y]


MAX_TOPK = 256


def _topk(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    if node.opset >= 10:
        (k,) = node.static_ints(1, "K")
    else:
        k = node.attr("k")
    axis = norm_axis(node.attr("axis", -1), x.type.rank)
    if not 0 < k <= MAX_TOPK:
        raise node.fail(f"TopK needs 0 < k <= {MAX_TOPK}, got {k}")
    largest = bool(node.attr("largest", 1))
    dt = x.type.dtype
    if dt is DType.bool:
        raise node.fail("TopK of a bool tensor is not supported")
    info = np.finfo(np.float32) if dt.is_float else np.iinfo(dt.np)
    done = -np.inf if largest else np.inf
    done = done if dt.is_float else (int(info.min) if largest else int(info.max))
    pos = imp.b.op(Op.IOTA, shape=x.type.shape, axis=axis, dtype=DType.int64)
    work, vals, idxs = x, [], []
    for _ in range(k):  # k rounds: take the best, then rule it out; ties go to the lower index
        i = imp.b.op(Op.ARGMAX if largest else Op.ARGMIN, work, axis=axis, keepdim=True)
        vals.append(gather_elements(imp, x, i, axis))
        idxs.append(i)
        work = imp.b.op(Op.WHERE, imp.b.op(Op.EQ, pos, i), imp.full(done, dt), work)
    cat = lambda xs: xs[0] if len(xs) == 1 else imp.b.op(Op.CONCAT, *xs, axis=axis)  # noqa: E731
    return [cat(vals), cat(idxs)]


CONVERTERS: dict[str, Converter] = {"CumSum": _cumsum, "CumProd": _cumprod, "TopK": _topk}
