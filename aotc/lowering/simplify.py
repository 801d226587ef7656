"""Layout and identity simplifications, as data: (ops, rule) pairs for the rewrite driver."""

from __future__ import annotations

from collections.abc import Sequence

from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.types import Node, Value
from aotc.lowering.rewrite import Rewriter, Rule, rewrite

# (from, to) casts that are exact, so casting back recovers the original value.
_WIDENING = {
    ("float16", "float32"),
    ("bfloat16", "float32"),
    ("int32", "int64"),
    ("bool", "int32"),
    ("bool", "int64"),
    ("bool", "float32"),
}


def _identity(rw: Rewriter, node: Node, inputs: Sequence[Value]) -> Sequence[Value] | None:
    """Reshape/broadcast to the input's own shape, an identity permute, a cast to the same dtype."""
    if node.op is Op.PERMUTE and node.attrs["perm"] != tuple(range(len(node.attrs["perm"]))):
        return None
    return (inputs[0],) if node.outputs[0].type == inputs[0].type else None


def _reshape_chain(rw: Rewriter, node: Node, inputs: Sequence[Value]) -> Sequence[Value] | None:
    src = rw.producer(inputs[0])
    if src is not None and src.op is Op.RESHAPE:
        return (rw.b.reshape(src.inputs[0], node.attrs["shape"]),)
    return None


def _permute_chain(rw: Rewriter, node: Node, inputs: Sequence[Value]) -> Sequence[Value] | None:
    src = rw.producer(inputs[0])
    if src is not None and src.op is Op.PERMUTE:
        p1, p2 = src.attrs["perm"], node.attrs["perm"]
        return (rw.b.permute(src.inputs[0], tuple(p1[i] for i in p2)),)
    return None


def _cast_chain(rw: Rewriter, node: Node, inputs: Sequence[Value]) -> Sequence[Value] | None:
    src = rw.producer(inputs[0])
    if src is not None and src.op is Op.CAST:
        inner = src.inputs[0]
        pair = (inner.type.dtype.value, src.attrs["dtype"].value)
        if inner.type.dtype is node.attrs["dtype"] and pair in _WIDENING:
            return (inner,)
    return None


RULES: list[Rule] = [
    ({Op.RESHAPE, Op.BROADCAST, Op.PERMUTE, Op.CAST}, _identity),
    ({Op.RESHAPE}, _reshape_chain),
    ({Op.PERMUTE}, _permute_chain),
    ({Op.CAST}, _cast_chain),
]


def simplify(graph: Graph) -> Graph:
    return rewrite(graph, RULES)
