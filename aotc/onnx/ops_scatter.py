"""ONNX ScatterND, ScatterElements and Scatter (ScatterElements' opset 9-10 name) -> the aotc scatter primitive.

The primitive has ScatterND's semantics. ScatterElements names, for each update, only its coordinate on one
axis; the others are the update's own position, so its full coordinates are that index with iotas for the
other axes, stacked on a new last axis.
"""

from __future__ import annotations

from typing import Any

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import norm_axis
from aotc.ir.types import Value
from aotc.onnx.node import OnnxNode, Operand
from aotc.onnx.ops_math import Converter, values

Importer = Any
_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _reduction(node: OnnxNode) -> str:
    r = node.attr("reduction", "none")
    if r not in _REDUCTIONS:
        raise node.fail(f"reduction {r!r} is not one of {', '.join(_REDUCTIONS)}")
    return r


def _operands(imp: Importer, node: OnnxNode) -> tuple[Value, Value, Value]:
    data, updates = values(imp, node, 0, 2)
    idx = imp.value(node.inputs[1], DType.int64, what=f"{node.label} indices")
    if not idx.type.dtype.is_int:
        raise node.fail(f"indices must be int32 or int64, got {idx.type.dtype.value}")
    return data, idx, updates


def _scatter_nd(imp: Importer, node: OnnxNode) -> list[Operand]:
    data, idx, updates = _operands(imp, node)
    return [imp.b.op(Op.SCATTER, data, idx, updates, reduction=_reduction(node))]


def _scatter_elements(imp: Importer, node: OnnxNode) -> list[Operand]:
    data, idx, updates = _operands(imp, node)
    rank = data.type.rank
    if rank == 0 or idx.type.rank != rank or updates.type.rank != rank:
        raise ShapeError(
            f"{node.label}: data, indices and updates must have one rank >= 1, got "
            f"{data.type.shape}, {idx.type.shape}, {updates.type.shape}"
        )
    axis = norm_axis(node.attr("axis", 0), rank)
    shape = idx.type.shape
    for i, (n, d) in enumerate(zip(shape, data.type.shape)):
        # a dim that may exceed the data's is left to the scatter's bounds check on the iota coordinates
        if i != axis and imp.ctx.bounds(n - d)[0] > 0:
            raise ShapeError(f"{node.label}: indices dim {i} ({n}) exceeds the data's ({d})")
    b, dt = imp.b, idx.type.dtype
    coords = [idx if a == axis else b.op(Op.IOTA, shape=shape, axis=a, dtype=dt) for a in range(rank)]
    full = b.op(Op.CONCAT, *[b.reshape(c, (*shape, 1)) for c in coords], axis=rank)
    return [b.op(Op.SCATTER, data, full, updates, reduction=_reduction(node))]


CONVERTERS: dict[str, Converter] = {
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,
    "ScatterND": _scatter_nd,
}
