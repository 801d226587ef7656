"""The op table, one entry per op (part of aotc.ir: any layer may import it; it imports numpy only).

The op table: every op defined once, gathered here from the files that hold each family."""

from __future__ import annotations

from aotc.ir.ops import attention, elementwise, layout, nn, reduce, scatter, vision
from aotc.ir.ops.base import Op, OpDef, OpKind

OPS: dict[Op, OpDef] = {
    d.op: d
    for d in (*elementwise.DEFS, *layout.DEFS, *reduce.DEFS, *nn.DEFS, *attention.DEFS, *vision.DEFS, *scatter.DEFS)
}

missing = [op for op in Op if op not in OPS]
assert not missing, f"ops without a table entry: {missing}"

PRIMITIVES = frozenset(op for op, d in OPS.items() if d.primitive)
HIGH_LEVEL = frozenset(op for op, d in OPS.items() if not d.primitive)
# High-level ops a lowered graph may keep: the scheduler takes them whole (one fused kernel) and the
# cpu backend runs their reference, so they are never decomposed and re-discovered.
KEPT_WHOLE = frozenset({Op.SDPA})


def primitives_of(kind: OpKind) -> frozenset[Op]:
    """The primitive ops of one kind (the op families passes and the scheduler test against)."""
    return frozenset(op for op in PRIMITIVES if OPS[op].kind is kind)


ELEMENTWISE = primitives_of(OpKind.POINTWISE)
UNARY = frozenset(op for op in ELEMENTWISE if OPS[op].arity == (1, 1) and op is not Op.CAST)
BINARY = frozenset(op for op in ELEMENTWISE if OPS[op].arity == (2, 2))
REDUCTIONS = primitives_of(OpKind.REDUCTION)
VIEWS = primitives_of(OpKind.VIEW)
INDEXING = primitives_of(OpKind.INDEX)
CONTRACTIONS = primitives_of(OpKind.CONTRACTION)
SOURCES = frozenset(op for op, d in OPS.items() if d.kind is OpKind.SOURCE)

__all__ = [
    "BINARY",
    "CONTRACTIONS",
    "ELEMENTWISE",
    "HIGH_LEVEL",
    "INDEXING",
    "KEPT_WHOLE",
    "OPS",
    "PRIMITIVES",
    "REDUCTIONS",
    "SOURCES",
    "UNARY",
    "VIEWS",
    "Op",
    "OpDef",
    "OpKind",
    "primitives_of",
]
