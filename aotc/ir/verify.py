"""The IR verifier: run between stages; errors name the stage, the node and what broke."""

from __future__ import annotations

from typing import Any

import numpy as np

from aotc.errors import AotcError, VerifyError
from aotc.ir.graph import RELATIONS, Graph
from aotc.ir.ops import KEPT_WHOLE, OPS, Op
from aotc.ir.shapes import ShapeCtx
from aotc.ir.state import state_problem
from aotc.ir.symbolic import SymExpr
from aotc.ir.types import Attrs, Node


def graph_ctx(graph: Graph) -> ShapeCtx:
    # Every guard holds before the graph runs, so shape rules may rely on all of them.
    return ShapeCtx(graph.ranges, graph.multiples, facts=[(g.lhs, g.rel, g.rhs) for g in graph.guards])


def verify(graph: Graph, stage: str = "", primitive_only: bool = False) -> None:
    """Raise VerifyError if the graph breaks an invariant."""
    where = f" after stage '{stage}'" if stage else ""

    def fail(msg: str, node: Node | None = None, index: int | None = None) -> VerifyError:
        op = getattr(node.op, "value", repr(node.op)) if node is not None else ""
        at = f" at node {index} ({op}{', ' + node.loc if node.loc else ''})" if node is not None else ""
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
        # Any printable name, as ONNX files use ("gpu_0/data_0", "input:0"): callers feed inputs by exact name.
        if not isinstance(name, str) or not name or not name.isprintable():
            raise fail(f"input name {name!r} must be a non-empty string of printable characters")

    ctx = graph_ctx(graph)
    defined: dict[int, Any] = {}
    # Shape rules are pure: a node with the same op, attrs and input types as an earlier one infers the same.
    # Types are keyed by identity (every one is alive in the graph while this runs, so no id is reused): equal
    # types held as distinct objects only infer once each, and no TensorType is hashed.
    inferred: dict[tuple[Any, ...], Any] = {}
    # Attr sets whose symbols were found declared (readers and builders share one Attrs between nodes).
    attrs_ok: set[Attrs] = set()
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
        if primitive_only and not d.primitive and node.op not in KEPT_WHOLE:
            raise fail("high-level op left in a primitive graph", node, i)
        for v in node.inputs:
            if v.id not in defined:
                raise fail(f"input {v} is used before it is defined", node, i)
            t = defined[v.id]
            if t is not v.type and t != v.type:
                raise fail(f"input {v} has type {v.type} but was defined as {t}", node, i)
        if node.attrs not in attrs_ok:
            if bad := _unknown_symbols(_attr_leaves(node.attrs), symbols):
                raise fail(f"uses undeclared symbols {bad}", node, i)
            attrs_ok.add(node.attrs)
        try:
            lo, hi = d.arity
            if len(node.inputs) < lo or (hi is not None and len(node.inputs) > hi):
                raise VerifyError(f"takes {lo}..{hi} inputs, got {len(node.inputs)}")
            in_types = [v.type for v in node.inputs]
            key = (node.op, node.attrs, *map(id, in_types))
            types = inferred.get(key)
            if types is None:
                types = inferred[key] = d.infer(in_types, node.attrs, ctx)
        except (AotcError, TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
            # A rule that chokes on malformed attrs still means the node is invalid, not a crash.
            raise fail(str(e) or type(e).__name__, node, i) from None
        if len(types) != len(node.outputs):
            raise fail(f"has {len(node.outputs)} outputs, rule says {len(types)}", node, i)
        for o, t in zip(node.outputs, types):
            if o.type is not t and (
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
            if not isinstance(arr, np.ndarray):
                raise fail(f"constant {name!r} is a {type(arr).__name__}, not a numpy array", node, i)
            out = node.outputs[0].type
            if arr.dtype != out.dtype.np or tuple(arr.shape) != out.shape:
                raise fail(f"constant {name!r} is {arr.dtype}{arr.shape}, node says {out}", node, i)
    for o in graph.outputs:
        if o.id not in defined:
            raise fail(f"output {o} is not defined")
        if defined[o.id] != o.type:
            raise fail(f"output {o} has type {o.type} but was defined as {defined[o.id]}")
    leaves: list[int] = []
    if not _tree_leaves(graph.output_tree, leaves, 0):
        raise fail(f"bad output tree {graph.output_tree!r}")
    if len(graph.states) > min(len(graph.inputs), len(graph.outputs)):
        raise fail(f"{len(graph.states)} states need as many trailing inputs and outputs")
    if sorted(leaves) != list(range(graph.num_results)):
        raise fail("output tree does not index every output exactly once (the states' outputs excepted)")
    if graph.states and (problem := state_problem(graph)):
        raise fail(problem)


_TREE_KINDS = ("tuple", "list", "dict")


def _tree_leaves(tree: Any, out: list[int], depth: int) -> bool:
    """Collect the int leaves of a well-formed output tree; False if any part is malformed.

    Stricter than graph.flatten_tree, which trusts its input: unflatten_tree must never meet a
    kind it does not know, a bool leaf, or a dict key that is not a unique string.
    """
    if depth > 64:
        return False
    if isinstance(tree, int) and not isinstance(tree, bool):
        out.append(tree)
        return True
    if not isinstance(tree, dict) or len(tree) != 1:
        return False
    ((kind, items),) = tree.items()
    if kind not in _TREE_KINDS or not isinstance(items, (list, tuple)):
        return False
    if kind != "dict":
        return all(_tree_leaves(sub, out, depth + 1) for sub in items)
    keys = [item[0] for item in items if isinstance(item, (list, tuple)) and len(item) == 2]
    if len(keys) != len(items) or not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
        return False
    return all(_tree_leaves(sub, out, depth + 1) for _, sub in items)


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
