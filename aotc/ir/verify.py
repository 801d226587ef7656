"""The IR verifier: run between stages; errors name the stage, the node and what broke."""

from __future__ import annotations

import re
from typing import Any

from aotc.errors import AotcError, VerifyError
from aotc.ir.graph import RELATIONS, Graph, flatten_tree
from aotc.ir.ops import OPS, Op
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic import SymExpr
from aotc.ir.types import Attrs, Node

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def graph_ctx(graph: Graph) -> ShapeCtx:
    eqs = [(g.lhs, g.rhs) for g in graph.guards if g.rel == "=="]
    return ShapeCtx(graph.ranges, graph.multiples, eqs)


def verify(graph: Graph, stage: str = "", primitive_only: bool = False) -> None:
    """Raise VerifyError if the graph breaks an invariant."""
    where = f" after stage '{stage}'" if stage else ""

    def fail(msg: str, node: Node | None = None, index: int | None = None) -> VerifyError:
        at = f" at node {index} ({node.op.value}{', ' + node.loc if node.loc else ''})" if node is not None else ""
        return VerifyError(f"invalid graph{where}{at}: {msg}")

    symbols = {s.name for s in graph.symbols}
    if len(symbols) != len(graph.symbols):
        raise fail("duplicate symbol names")
    for s in graph.symbols:
        if not (isinstance(s.min, int) and isinstance(s.max, int) and 0 <= s.min <= s.max) or s.multiple_of < 1:
            raise fail(f"symbol {s.name} has a bad range [{s.min}, {s.max}] or multiple_of {s.multiple_of}")
    for g in graph.guards:
        if g.rel not in RELATIONS:
            raise fail(f"guard {g} has unknown relation")
        if bad := _unknown_symbols((g.lhs, g.rhs), symbols):
            raise fail(f"guard {g}: uses undeclared symbols {bad}")
    if len(set(graph.input_names)) != len(graph.input_names) or len(graph.input_names) != len(graph.inputs):
        raise fail("input names must be unique, one per input")
    for name in graph.input_names:
        if not _NAME.match(name):
            raise fail(f"input name {name!r} is not an identifier")

    ctx = graph_ctx(graph)
    defined: dict[int, Any] = {}
    for v in graph.inputs:
        if v.id in defined:
            raise fail(f"value {v} defined twice")
        if bad := _unknown_symbols(v.type.shape, symbols):
            raise fail(f"input {v}: uses undeclared symbols {bad}")
        defined[v.id] = v.type
    for i, node in enumerate(graph.nodes):
        if node.op not in OPS:
            raise fail(f"unknown op {node.op!r}", node, i)
        d = OPS[node.op]
        if primitive_only and not d.primitive:
            raise fail("high-level op left in a primitive graph", node, i)
        for v in node.inputs:
            if v.id not in defined:
                raise fail(f"input {v} is used before it is defined", node, i)
            if defined[v.id] != v.type:
                raise fail(f"input {v} has type {v.type} but was defined as {defined[v.id]}", node, i)
        if bad := _unknown_symbols(_attr_leaves(node.attrs), symbols):
            raise fail(f"uses undeclared symbols {bad}", node, i)
        try:
            lo, hi = d.arity
            if len(node.inputs) < lo or (hi is not None and len(node.inputs) > hi):
                raise VerifyError(f"takes {lo}..{hi} inputs, got {len(node.inputs)}")
            types = d.infer([v.type for v in node.inputs], node.attrs, ctx)
        except AotcError as e:
            raise fail(str(e), node, i) from None
        if len(types) != len(node.outputs):
            raise fail(f"has {len(node.outputs)} outputs, rule says {len(types)}", node, i)
        for o, t in zip(node.outputs, types):
            if (
                o.type.dtype is not t.dtype
                or len(o.type.shape) != len(t.shape)
                or not all(ctx.known_equal(a, b) for a, b in zip(o.type.shape, t.shape))
            ):
                raise fail(f"output {o} is recorded as {o.type} but the rule gives {t}", node, i)
            if o.id in defined:
                raise fail(f"value {o} defined twice", node, i)
            defined[o.id] = o.type
        if node.op is Op.CONSTANT:
            name = node.attrs["name"]
            arr = graph.constants.get(name)
            if arr is None:
                raise fail(f"constant {name!r} is missing", node, i)
            out = node.outputs[0].type
            if arr.dtype != out.dtype.np or tuple(arr.shape) != out.shape:
                raise fail(f"constant {name!r} is {arr.dtype}{arr.shape}, node says {out}", node, i)
    for o in graph.outputs:
        if o.id not in defined:
            raise fail(f"output {o} is not defined")
    try:
        leaves = flatten_tree(graph.output_tree)
    except (TypeError, ValueError, AttributeError):
        raise fail(f"bad output tree {graph.output_tree!r}") from None
    if sorted(leaves) != list(range(len(graph.outputs))):
        raise fail("output tree does not index every output exactly once")


def _attr_leaves(attrs: Attrs) -> list[Any]:
    out: list[Any] = []
    for v in attrs.values():
        out.extend(v if isinstance(v, tuple) else (v,))
    return out


def _unknown_symbols(dims: Any, symbols: set[str]) -> list[str]:
    unknown: set[str] = set()
    for d in dims:
        if isinstance(d, SymExpr):
            unknown |= d.free_symbols() - symbols
    return sorted(unknown)
