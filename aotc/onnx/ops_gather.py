"""ONNX indexed reads -> aotc GATHER over a flattened tensor (GatherElements, GatherND) and the losses built on
them (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).

Each element's flat position is computed with IOTA arithmetic, so one 1-D GATHER does the read; shapes may be
symbolic (strides become symbolic FULL values).
"""

from __future__ import annotations

from typing import Any

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import norm_axis, numel
from aotc.ir.types import Shape, ShapeDim, Value
from aotc.onnx.node import OnnxNode, Operand
from aotc.onnx.ops_math import Converter, float_input, values
from aotc.onnx.ops_shape import slice_axis

Importer = Any
I64 = DType.int64


def _wrap(imp: Importer, idx: Value, n: ShapeDim) -> Value:
    """Negative indices count from the end of a dim of size n."""
    zero = imp.full(0, I64)
    return imp.b.op(Op.WHERE, imp.b.op(Op.LT, idx, zero), imp.b.op(Op.ADD, idx, imp.full(n, I64)), idx)


def _scaled(imp: Importer, x: Value, stride: ShapeDim) -> Value:
    return x if isinstance(stride, int) and stride == 1 else imp.b.op(Op.MUL, x, imp.full(stride, I64))


def _sum(imp: Importer, xs: list[Value]) -> Value:
    y = xs[0]
    for x in xs[1:]:
        y = imp.b.op(Op.ADD, y, x)
    return y


def gather_elements(imp: Importer, x: Value, idx: Value, axis: int) -> Value:
    """out[i, j, k] = x[i, idx[i, j, k], k] for axis 1 (and likewise for any axis)."""
    shape, out = x.type.shape, idx.type.shape
    if len(out) != len(shape):
        raise ShapeError(f"GatherElements indices must have the data's rank {len(shape)}, got {idx.type}")
    terms = []
    for d in range(len(shape)):
        coord = _wrap(imp, idx, shape[d]) if d == axis else imp.b.op(Op.IOTA, shape=out, axis=d, dtype=I64)
        terms.append(_scaled(imp, coord, numel(shape[d + 1 :])))
    flat = imp.b.reshape(x, (numel(shape),))
    return imp.b.op(Op.GATHER, flat, _sum(imp, terms), axis=0)


def _gather_elements(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    idx = imp.b.cast(imp.value(node.inputs[1], I64, what=f"{node.label} indices"), I64)
    return [gather_elements(imp, x, idx, norm_axis(node.attr("axis", 0), x.type.rank))]


def _gather_nd(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    idx = imp.b.cast(imp.value(node.inputs[1], I64, what=f"{node.label} indices"), I64)
    nb = node.attr("batch_dims", 0)
    k = idx.type.shape[-1]
    if not isinstance(k, int) or nb + k > x.type.rank:
        raise ShapeError(f"{node.label}: indices {idx.type} don't fit data {x.type} with batch_dims={nb}")
    batch, indexed, rest = x.type.shape[:nb], x.type.shape[nb : nb + k], x.type.shape[nb + k :]
    lead: Shape = idx.type.shape[:-1]
    terms = []
    for j in range(k):
        comp = imp.b.reshape(slice_axis(imp, idx, idx.type.rank - 1, j, j + 1), lead)
        terms.append(_scaled(imp, _wrap(imp, comp, indexed[j]), numel(indexed[j + 1 :])))
    positions = numel(indexed)
    for d in range(nb):  # which batch entry: the leading dims of the indices are the batch dims
        b_idx = imp.b.op(Op.IOTA, shape=lead, axis=d, dtype=I64)
        terms.append(_scaled(imp, b_idx, numel(batch[d + 1 :]) * positions))
    flat = imp.b.reshape(x, (numel(batch) * positions, numel(rest)))
    y = imp.b.op(Op.GATHER, flat, _sum(imp, terms) if terms else imp.full(0, I64, lead), axis=0)
    return [imp.b.reshape(y, lead + rest)]


# -- losses ----------------------------------------------------------------------------------------------------


def nll_loss(imp: Importer, node: OnnxNode, logp: Value, target: Value, weight: Value | None) -> Value:
    b = imp.b
    t = b.cast(target, I64)
    ignore = node.attr("ignore_index")
    valid = b.op(Op.NE, t, imp.full(int(ignore), I64)) if ignore is not None else None
    safe = b.op(Op.WHERE, valid, t, imp.full(0, I64)) if valid is not None else t
    shape = logp.type.shape
    picked = gather_elements(imp, logp, b.reshape(safe, shape[:1] + (1,) + shape[2:]), 1)
    loss = b.op(Op.NEG, b.reshape(picked, safe.type.shape))
    w = b.op(Op.GATHER, weight, safe, axis=0) if weight is not None else None
    if valid is not None:
        w = b.op(
            Op.WHERE, valid, w if w is not None else imp.full(1.0, logp.type.dtype), imp.full(0.0, logp.type.dtype)
        )
    if w is not None:
        loss = b.op(Op.MUL, loss, w)
    reduction = node.attr("reduction", "mean")
    axes = tuple(range(loss.type.rank))
    if reduction == "none":
        return loss
    total = b.op(Op.REDUCE_SUM, loss, axes=axes, keepdim=False)
    if reduction == "sum":
        return total
    if reduction != "mean":
        raise node.fail(f"reduction {reduction!r} is not supported")
    if w is None:
        return b.op(Op.REDUCE_MEAN, loss, axes=axes, keepdim=False)
    w = b.op(Op.BROADCAST, w, shape=loss.type.shape) if w.type.shape != loss.type.shape else w
    return b.op(Op.DIV, total, b.op(Op.REDUCE_SUM, w, axes=axes, keepdim=False))


def _nll(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    float_input(node, x)
    target = imp.value(node.inputs[1], I64, what=f"{node.label} target")
    weight = None if node.input(2) is None else imp.value(node.inputs[2], x.type.dtype, what=f"{node.label} weight")
    return [nll_loss(imp, node, x, target, weight)]


def _softmax_cross_entropy(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    float_input(node, x)
    labels = imp.value(node.inputs[1], I64, what=f"{node.label} labels")
    weight = None if node.input(2) is None else imp.value(node.inputs[2], x.type.dtype, what=f"{node.label} weights")
    logp = imp.b.op(Op.LOG_SOFTMAX, x, axis=1)
    outs: list[Operand] = [nll_loss(imp, node, logp, labels, weight)]
    if node.wants(1):
        outs.append(logp)
    return outs


CONVERTERS: dict[str, Converter] = {
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "NegativeLogLikelihoodLoss": _nll,
    "SoftmaxCrossEntropyLoss": _softmax_cross_entropy,
}
