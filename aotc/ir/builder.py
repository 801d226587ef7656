"""Builds nodes with shape inference: used by the tracer, decompositions, passes and the ONNX importer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops import OPS, Op
from aotc.ir.shapes import DEFAULT_CTX, ShapeCtx
from aotc.ir.types import Attrs, Node, Shape, TensorType, Value


class Builder:
    """Appends nodes to a list, giving each output a fresh value id."""

    def __init__(self, ctx: ShapeCtx = DEFAULT_CTX, next_id: int = 0, loc: str = "") -> None:
        self.ctx = ctx
        self.nodes: list[Node] = []
        self.next_id = next_id
        self.loc = loc

    def new_value(self, type_: TensorType) -> Value:
        v = Value(self.next_id, type_)
        self.next_id += 1
        return v

    def emit(self, op: Op, inputs: Sequence[Value], attrs: Attrs | dict[str, Any] | None = None) -> tuple[Value, ...]:
        d = OPS[op]
        lo, hi = d.arity
        if len(inputs) < lo or (hi is not None and len(inputs) > hi):
            raise ShapeError(f"{op.value} takes {lo}..{hi if hi is not None else 'any'} inputs, got {len(inputs)}")
        attrs = attrs if isinstance(attrs, Attrs) else Attrs(attrs or {})
        try:
            types = d.infer([v.type for v in inputs], attrs, self.ctx)
        except ShapeError as e:
            raise ShapeError(f"{op.value}: {e}") from None
        outs = tuple(self.new_value(t) for t in types)
        self.nodes.append(Node(op, tuple(inputs), outs, attrs, self.loc))
        return outs

    def op(self, op: Op, *inputs: Value, **attrs: Any) -> Value:
        """Emit a single-output op."""
        return self.emit(op, inputs, attrs)[0]

    # -- helpers decompositions use ---------------------------------------------
    def full(self, value: Any, dtype: DType, shape: Shape = ()) -> Value:
        return self.op(Op.FULL, shape=tuple(shape), value=value, dtype=dtype)

    def cast(self, x: Value, dtype: DType) -> Value:
        return x if x.type.dtype is dtype else self.op(Op.CAST, x, dtype=dtype)

    def reshape(self, x: Value, shape: Shape) -> Value:
        return x if tuple(shape) == x.type.shape else self.op(Op.RESHAPE, x, shape=tuple(shape))

    def permute(self, x: Value, perm: Sequence[int]) -> Value:
        return x if tuple(perm) == tuple(range(x.type.rank)) else self.op(Op.PERMUTE, x, perm=tuple(perm))
