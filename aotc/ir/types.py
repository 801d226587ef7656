"""The immutable IR nodes: tensor types, SSA values, attribute maps and nodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from aotc.ir.dtypes import DType
from aotc.ir.symbolic import SymExpr, to_infix

ShapeDim = int | SymExpr
Shape = tuple[ShapeDim, ...]


@dataclass(frozen=True, slots=True)
class TensorType:
    dtype: DType
    shape: Shape

    @property
    def rank(self) -> int:
        return len(self.shape)

    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.value}[{', '.join(to_infix(d) for d in self.shape)}]"


@dataclass(frozen=True, slots=True)
class Value:
    """An SSA value; ``id`` is unique within its graph."""

    id: int
    type: TensorType

    def __str__(self) -> str:
        return f"%{self.id}"


class Attrs(Mapping[str, Any]):
    """A frozen, hashable, ordered attribute map (values: int, float, bool, str, DType, SymExpr, tuples)."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, Any] | None = None, **kw: Any) -> None:
        merged = dict(items or {}, **kw)
        self._items = tuple(sorted((k, _freeze(v)) for k, v in merged.items()))
        self._hash = hash(self._items)

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attrs) and self._items == other._items

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"

    def set(self, **kw: Any) -> Attrs:
        return Attrs(dict(self._items), **kw)


EMPTY_ATTRS = Attrs()


@dataclass(frozen=True, slots=True)
class Node:
    op: Any  # aotc.ir.ops.Op; typed loosely to keep this module free of the op table
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    attrs: Attrs = EMPTY_ATTRS
    loc: str = ""

    def replace(self, **changes: Any) -> Node:
        return dataclasses.replace(self, **changes)

    def __str__(self) -> str:
        outs = ", ".join(f"{o}: {o.type}" for o in self.outputs)
        ins = ", ".join(str(i) for i in self.inputs)
        attrs = ", ".join(f"{k}={_attr_str(v)}" for k, v in self.attrs.items())
        return f"{outs} = {self.op.value}({ins}{'; ' + attrs if attrs else ''})"


def _freeze(v: Any) -> Any:
    """Lists become tuples so every attr value is hashable."""
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


def _attr_str(v: Any) -> str:
    if isinstance(v, SymExpr):
        return to_infix(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(_attr_str(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, DType):
        return v.value
    return repr(v)
