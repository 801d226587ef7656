"""The op table: every op defined once, gathered here from the files that hold each family."""

from __future__ import annotations

from aotc.ir.ops import elementwise, layout, nn, reduce, vision
from aotc.ir.ops.base import Op, OpDef

OPS: dict[Op, OpDef] = {d.op: d for d in (*elementwise.DEFS, *layout.DEFS, *reduce.DEFS, *nn.DEFS, *vision.DEFS)}

missing = [op for op in Op if op not in OPS]
assert not missing, f"ops without a table entry: {missing}"

PRIMITIVES = frozenset(op for op, d in OPS.items() if d.primitive)
HIGH_LEVEL = frozenset(op for op, d in OPS.items() if not d.primitive)
UNARY = frozenset(d.op for d in elementwise.DEFS if d.arity == (1, 1) and d.op is not Op.CAST)
BINARY = frozenset(d.op for d in elementwise.DEFS if d.arity == (2, 2))
ELEMENTWISE = UNARY | BINARY | {Op.WHERE, Op.CAST}
REDUCTIONS = frozenset({Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD, Op.ARGMAX, Op.ARGMIN})
SOURCES = frozenset({Op.IOTA, Op.FULL, Op.CONSTANT})

__all__ = ["BINARY", "ELEMENTWISE", "HIGH_LEVEL", "OPS", "PRIMITIVES", "REDUCTIONS", "SOURCES", "UNARY", "Op", "OpDef"]
