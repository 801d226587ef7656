"""An operand a kernel reads through views, seen as a strided window of the buffer under them.

A chain of reshapes, permutes, slices, broadcasts and flips over a buffer reads element ``index`` of the view at
the buffer's row-major offset of ``source_index`` composed down the chain (aotc/kernels/view_rules.py). Where that
offset is affine in some of the view's dims, ``base + sum(i_k * s_k)`` with every ``s_k`` free of the indices,
those dims are a strided window of the buffer, which is what a tensor descriptor (TMA) describes: the base,
the window's shape and its strides. A slice, a reshape that splits a dim (the heads of a packed QKV projection)
and a permute keep the offset affine; a broadcast gives its dim stride 0 and a flip a negative stride; a reshape
that merges dims whose strides do not chain leaves a ``//`` or ``%`` of the index in the offset (not affine).
A pad, concat, gather or cast computes values, so an operand behind one is no window.

The dims outside the window (a program's batch and head) stay whatever index math the views give them: they
only move the base, which is a scalar per program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aotc.ir.graph import Graph
from aotc.ir.index import IndexSpace, flatten, is_index_var
from aotc.ir.ops import Op
from aotc.ir.symbolic import SymExpr, add, atom_symbols, from_terms, mul
from aotc.ir.types import Node, Value
from aotc.kernels import index_text as ix
from aotc.kernels.view_rules import source_index

__all__ = ["VIEW_OPS", "Window", "own_window", "source", "view_chain", "window"]

Index = tuple[int | SymExpr, ...]
# the views with one source element per element, which source_index maps
VIEW_OPS = frozenset({Op.RESHAPE, Op.PERMUTE, Op.SLICE, Op.BROADCAST, Op.FLIP})


@dataclass(frozen=True, slots=True)
class Window:
    """``value``'s element at index ``i`` is ``buffer``'s at row-major offset ``base + sum(i[k] * strides[k])``
    over the window's dims ``dims``; ``base`` holds the other dims' index variables (``$i<k>`` for dim k) and
    the strides only graph symbols."""

    buffer: Value
    chain: tuple[Node, ...]  # the views from the operand down to ``buffer``
    dims: tuple[int, ...]
    strides: tuple[int | SymExpr, ...]
    base: int | SymExpr


def view_chain(builder: Any, value: Value) -> tuple[Value, tuple[Node, ...]] | str:
    """The buffer ``builder`` reads ``value`` from and the views between, outermost first; or why ``value`` is
    no view of a buffer (a cast or another computed value, or one a template reads elsewhere)."""
    chain: list[Node] = []
    while True:
        if value.id in builder.redirects:  # a recurrence's step: the template maps its index, no view does
            return "the operand is read through the template's own index map (a recurrence step), not a buffer"
        if value.id not in builder.inline:
            return value, tuple(chain)
        _, node = builder.producers[value.id]
        if node.op not in VIEW_OPS:
            what = "a cast" if node.op is Op.CAST else node.op.value
            return f"the operand is computed in the kernel (through {what}), not a strided view of a buffer"
        chain.append(node)
        value = node.inputs[0]


def source(builder: Any, chain: Sequence[Node], index: Index) -> Index:
    """The index into the chain's buffer of the element at ``index`` of its outermost view."""
    for node in chain:
        index = tuple(source_index(builder, node, index))
    return index


def window(builder: Any, value: Value, dims: Sequence[int]) -> Window | str:
    """``value`` as a strided window over its dims ``dims``, or why it is none. The index math runs in a space
    of its own, so asking leaves the kernel's variables as they were."""
    found = view_chain(builder, value)
    if isinstance(found, str):
        return found
    buffer, chain = found
    return _window(builder.graph, value, buffer, chain, dims)


def own_window(graph: Graph, value: Value, dims: Sequence[int]) -> Window:
    """``value`` as a window of its own buffer (a value a kernel stores, row-major): always affine."""
    found = _window(graph, value, value, (), dims)
    assert not isinstance(found, str), found
    return found


def _window(graph: Graph, value: Value, buffer: Value, chain: Sequence[Node], dims: Sequence[int]) -> Window | str:
    scratch = _Scratch(graph)
    # a dim of size 1 outside the window is read at 0, as the builder's offsets read it
    shape = value.type.shape
    var = {k: scratch.space.var(f"i{k}", d) for k, d in enumerate(shape) if k in dims or not ix.is_one(d)}
    at = source(scratch, chain, tuple(var.get(k, 0) for k in range(len(shape))))
    held = buffer.type.shape
    flat = scratch.simplify(flatten([0 if ix.is_one(d) else i for i, d in zip(at, held)], held))
    names = {k: var[k].symbol_name for k in dims}
    strides = []
    for k in dims:
        stride = _coefficient(flat, names[k])
        if stride is None:
            return f"the views leave dim {k} of the operand no fixed stride in its buffer (not an affine view)"
        strides.append(stride)
    base = _without(flat, set(names.values()))
    return Window(buffer, tuple(chain), tuple(dims), tuple(strides), base)


@dataclass
class _Scratch:
    """What ``source_index`` asks of a builder (the graph and a simplifier), over a private index space."""

    graph: Graph

    def __post_init__(self) -> None:
        self.space = IndexSpace(self.graph.ranges, self.graph.multiples)

    def simplify(self, e: int | SymExpr) -> int | SymExpr:
        return self.space.simplify(e)


def _coefficient(e: int | SymExpr, var: str) -> int | SymExpr | None:
    """The index-free ``s`` with ``e == s * var + (terms without var)``, or None where ``e`` is not of that form
    (``var`` squared, inside a ``//``, ``%``, min or max, or times another index variable)."""
    if isinstance(e, int):
        return 0
    out: int | SymExpr = 0
    for mono, c in e.terms:
        hits = [a for a in mono if a.kind == "sym" and a.name == var]
        rest = tuple(a for a in mono if not (a.kind == "sym" and a.name == var))
        if not hits:
            if any(var in atom_symbols(a) for a in rest):
                return None
            continue
        if len(hits) > 1 or any(is_index_var(n) for a in rest for n in atom_symbols(a)):
            return None
        out = add(out, mul(c, from_terms({rest: 1}, 0)) if rest else c)
    return out


def _without(e: int | SymExpr, names: set[str]) -> int | SymExpr:
    """``e``'s terms that hold none of the symbols ``names``: its value with those set to 0, where it is affine
    in them (``_coefficient`` checked)."""
    if isinstance(e, int):
        return e
    kept = {mono: c for mono, c in e.terms if not any(atom_symbols(a) & names for a in mono)}
    return from_terms(kept, e.const)
