"""Constant folding: computations whose inputs are all known at compile time become constants.

Views of known values are not folded (see ``fold``): each weight is stored once, as the model gave it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aotc.ir.graph import Graph
from aotc.ir.ops import OPS, SOURCES, Op, OpKind
from aotc.ir.types import Node, Value
from aotc.lowering.rewrite import Rewriter, rewrite


def fold_constants(graph: Graph, max_bytes: int = 1 << 16) -> Graph:
    constants = dict(graph.constants)
    known: dict[int, np.ndarray] = {}

    def value_of(rw: Rewriter, v: Value) -> np.ndarray | None:
        if v.id in known:
            return known[v.id]
        src = rw.producer(v)
        if src is None or not v.type.is_static():
            return None
        if src.op is Op.CONSTANT:
            arr = constants[src.attrs["name"]]
        elif src.op in (Op.FULL, Op.IOTA) and not _symbolic(src):
            arr = OPS[src.op].ref([], src.attrs)[0]
        else:
            return None
        known[v.id] = arr
        return arr

    def fold(rw: Rewriter, node: Node, inputs: Sequence[Value]) -> Sequence[Value] | None:
        if node.op in SOURCES or not inputs or not all(o.type.is_static() for o in node.outputs):
            return None
        arrays = [value_of(rw, v) for v in inputs]
        if any(a is None for a in arrays):
            return None
        out_bytes = sum(int(np.prod(o.type.shape)) * o.type.dtype.itemsize for o in node.outputs)
        if OPS[node.op].kind is OpKind.VIEW:
            # A view costs nothing at run time (index math in its consumer), while a folded copy would be
            # stored beside the weight it was made from, which the artifact's source graph keeps. So the view
            # stays a node; its value is only remembered, for folding the computations that read it.
            if out_bytes <= max(max_bytes, sum(a.nbytes for a in arrays)):
                known[node.outputs[0].id] = OPS[node.op].ref(arrays, node.attrs)[0]
            return None
        # A large result would be a second stored copy of the weights it came from (or a cheap broadcast of
        # a scalar blown up into a weight): leave that to run time, where it fuses into its consumer.
        if out_bytes > max_bytes:
            return None
        with np.errstate(all="ignore"):
            results = OPS[node.op].ref(arrays, node.attrs)
        outs = []
        for o, r in zip(node.outputs, results):
            name = _fresh_name(constants, o.id)
            arr = np.asarray(r, dtype=o.type.dtype.np, order="C")
            constants[name] = arr
            v = rw.b.op(Op.CONSTANT, name=name, shape=o.type.shape, dtype=o.type.dtype)
            known[v.id] = arr
            outs.append(v)
        return outs

    folded = rewrite(graph, [(None, fold)])
    return folded.replace(constants=constants)


def _symbolic(node: Node) -> bool:
    return any(not isinstance(d, int) for d in node.attrs["shape"]) or not isinstance(
        node.attrs.get("value", 0), (int, float, bool)
    )


def _fresh_name(constants: dict[str, np.ndarray], vid: int) -> str:
    name, k = f"_folded.{vid}", 0
    while name in constants:
        k += 1
        name = f"_folded.{vid}.{k}"
    return name


def prune_constants(graph: Graph) -> Graph:
    """Drop constants no node refers to (after DCE removed their users); a state's initial value stays."""
    used = {n.attrs["name"] for n in graph.nodes if n.op is Op.CONSTANT} | {s.init for s in graph.states}
    return graph.replace(constants={k: v for k, v in graph.constants.items() if k in used})
