"""A launch bound to the graph it computes: a digest of everything its code was generated from and for.

``launch_digest(graph, kernel)`` hashes (BLAKE2b, 16 bytes) what codegen's output depends on and what the
launch is run with: the nodes it fuses (ops, attrs, input and output types, and how they connect, numbered
locally so repeated layers hash alike, and which graph input, weight or graph output each value it reads or
writes from outside them is), the graph's symbols (ranges and multiples size its tiles, masks and
index widths), its code (kind, name, source, constexprs, warps, stages, divisibility hints), its args (names,
types, kinds, which value each pointer passes, each size's expression), grid, index checks and its
``Extents``. The scheduler seals every launch of a final plan (``seal``); the artifact's writer and reader
recompute the digest from the variant's graph and refuse a launch whose digest differs: a graph edited under
kernels that do not follow it (a LayerNorm's eps, a swapped operand), or a kernel edited beside its graph.

The digest is a checksum, not a signature: whoever rewrites a file can recompute it. It binds each launch
to its graph against corruption and inconsistent edits; a signed file (aotc.artifact.signing) is what binds
it to its producer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.schedule import ArchLaunch, ArgKind, Extents, Kernel
from aotc.ir.symbolic import SymExpr, to_sexpr
from aotc.ir.types import Attrs, Node, TensorType

DIGEST_BYTES = 16
_VERSION = b"aotc launch digest 1\0"


class DigestCache:
    """Encodings of the interned parts of one graph and plan (types, attr sets, sources, expressions), found by
    identity; each entry keeps its key alive, so an id is never reused while cached."""

    def __init__(self) -> None:
        self._parts: dict[int, tuple[object, bytes]] = {}
        self._ends: tuple[Graph, dict[int, bytes]] | None = None

    def ends(self, graph: Graph) -> dict[int, bytes]:
        """What each graph input, weight and graph output is, by value id: ``I<position>:<name>``, ``C<name>``,
        ``O<position>`` (a value may be several)."""
        if self._ends is None or self._ends[0] is not graph:
            out: dict[int, bytes] = {}
            for i, (name, v) in enumerate(zip(graph.input_names, graph.inputs)):
                out[v.id] = out.get(v.id, b"") + b"I%d:%s;" % (i, _text(name))
            for node in graph.nodes:
                if node.op.value == "constant" and node.outputs:
                    out[node.outputs[0].id] = b"C" + _value(node.attrs.get("name")) + b";"
            for i, v in enumerate(graph.outputs):
                out[v.id] = out.get(v.id, b"") + b"O%d;" % i
            self._ends = (graph, out)
        return self._ends[1]

    def get(self, obj: object, encode: Any) -> bytes:
        hit = self._parts.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        data = encode(obj)
        self._parts[id(obj)] = (obj, data)
        return data


def launch_digest(
    graph: Graph, k: Kernel, nodes: Sequence[Node] | None = None, cache: DigestCache | None = None
) -> str:
    """The hex digest of launch ``k`` of a plan of ``graph`` (``nodes``: ``graph.nodes`` at ``k.nodes``, if known);
    its arch launches and its own digest are left out (each arch launch has its own). IndexError for a node
    index outside the graph."""
    c = cache or DigestCache()
    get = c.get
    if nodes is None:
        nodes = [graph.nodes[i] for i in k.nodes]
    local: dict[int, bytes] = {}  # value id -> its number in this launch, in first-use order
    ends = c.ends(graph)

    def token(vid: int) -> bytes:
        t = local.get(vid)
        if t is None:
            t = local[vid] = b"%d%s," % (len(local), ends.get(vid, b""))
        return t

    parts = [_VERSION, get(graph.symbols, _symbols)]
    for node in nodes:
        parts += (get(node.op, _op), get(node.attrs, _attrs))
        for v in node.inputs:
            parts += (b"i", token(v.id), get(v.type, _type))
        for v in node.outputs:
            parts += (b"o", token(v.id), get(v.type, _type))
    parts.append(b"R" + b"".join(token(v) for v in k.inputs) + b"W" + b"".join(token(v) for v in k.outputs))
    parts += (b"K%s\0%s\0" % (_text(k.kind.value), _text(k.name)), get(k.source, _source))
    parts += (get(k.constexprs, _constexprs), b"w%d,%d,D" % (k.num_warps, k.num_stages), get(k.divisible, _ints))
    parts.append(get(k.fused, _strings))
    for a in k.args:
        parts.append(_text(a.name) + b"\0" + _text(a.type) + _KIND[a.kind])
        if a.kind is ArgKind.BUFFER:
            parts.append(token(a.value))
        elif a.kind is ArgKind.SIZE:
            parts.append(get(a.size, _expr))
    parts.append(b"G")
    parts += (get(g, _expr) for g in k.grid)
    for chk in k.checks:
        parts.append(b"X%d\0%s\0%s\0" % (chk.slot, _text(chk.input), _text(chk.op)))
        parts += (get(chk.low, _expr), get(chk.high, _expr))
    parts += (b"E", get(k.extents, _extents) if k.extents is not None else b"-")
    return hashlib.blake2b(b"".join(parts), digest_size=DIGEST_BYTES).hexdigest()


def graph_digest(graph: Graph, weights: Mapping[str, bytes] | None = None) -> str:
    """The hex digest of what ``graph`` computes: its symbols, guards, inputs (names, types), nodes (ops, attrs,
    types, how they connect, by value id), outputs and output tree, states (names, initial values), and ``weights`` (constant name -> a checksum of
    its bytes: the artifact passes those of the weights only this graph holds). Not its nodes' source locations.
    A file binds its source graph to the variants lowered from it with this (aotc.artifact's SOURCE_DIGEST_KEY), as
    launch digests bind kernels: a source graph, or a weight only it reads, edited without the rest of the file is
    refused. A weight the variants read too is the same array for every backend, so editing it makes a valid file of
    another model, as for any weight."""
    c = DigestCache()
    get = c.get
    parts = [b"aotc graph digest 1\0", get(graph.symbols, _symbols)]
    for g in graph.guards:
        parts += (b"G", _expr(g.lhs), _text(g.rel), b"\0", _expr(g.rhs))
    for name, v in zip(graph.input_names, graph.inputs):
        parts += (b"I%d\0%s\0" % (v.id, _text(name)), get(v.type, _type))
    for node in graph.nodes:
        parts += (get(node.op, _op), get(node.attrs, _attrs))
        parts += (b"i%d," % v.id for v in node.inputs)
        for v in node.outputs:
            parts += (b"o%d" % v.id, get(v.type, _type))
    parts.append(b"O" + b"".join(b"%d," % v.id for v in graph.outputs))
    parts.append(_text(json.dumps(graph.output_tree, sort_keys=True)))
    for st in graph.states:  # none in a stateless graph, whose digest is as before states existed
        parts += (b"S", _text(st.name), b"\0", _text(st.init), b"\0")
    for name, checksum in sorted((weights or {}).items()):
        parts += (b"W", _text(name), b"\0", checksum)
    return hashlib.blake2b(b"".join(parts), digest_size=DIGEST_BYTES).hexdigest()


def seal(graph: Graph, k: Kernel, cache: DigestCache | None = None) -> Kernel:
    """``k`` (a launch of a final plan of ``graph``) with its digest, and its arch launches' digests."""
    c = cache or DigestCache()
    nodes = [graph.nodes[i] for i in k.nodes]
    arch_launches = tuple(
        ArchLaunch(v.arch, v.kernel.replace(digest=launch_digest(graph, v.kernel, nodes, c))) for v in k.arch_launches
    )
    return k.replace(arch_launches=arch_launches, digest=launch_digest(graph, k, nodes, c))


def seal_all(graph: Graph, kernels: Sequence[Kernel]) -> tuple[Kernel, ...]:
    c = DigestCache()
    return tuple(seal(graph, k, c) for k in kernels)


_KIND = {kind: b"\0" + kind.value.encode() + b"\0" for kind in ArgKind}


def _op(op: Any) -> bytes:
    return b"N" + _text(op.value) + b"\0"


def _source(s: str) -> bytes:
    return hashlib.blake2b(_text(s), digest_size=DIGEST_BYTES).digest()


def _constexprs(items: Sequence[tuple[str, int]]) -> bytes:
    return b"C" + b"".join(b"%s=%d," % (_text(n), v) for n, v in items)


def _ints(items: Sequence[int]) -> bytes:
    return b",".join(b"%d" % i for i in items) + b";"


def _strings(items: Sequence[str]) -> bytes:
    return b"F" + b",".join(_text(f) for f in items) + b";"


def _text(s: object) -> bytes:
    if not isinstance(s, str):
        raise TypeError(f"expected a string, got {type(s).__name__}")
    return s.encode("utf-8", "surrogatepass")


def _expr(e: object) -> bytes:
    if isinstance(e, bool) or not isinstance(e, (int, SymExpr)):
        raise TypeError(f"expected an integer expression, got {type(e).__name__}")
    return _text(to_sexpr(e)) + b";"


def _type(t: TensorType) -> bytes:
    return b"%s[%s]" % (_text(t.dtype.value), b",".join(_expr(d) for d in t.shape))


def _symbols(symbols: Sequence[Any]) -> bytes:
    return b"S" + b"".join(b"%s:%d:%d:%d," % (_text(s.name), s.min, s.max, s.multiple_of) for s in symbols)


def _attrs(attrs: Attrs) -> bytes:
    return b"{" + b"".join(_text(k) + b"=" + _value(v) + b"," for k, v in attrs.items()) + b"}"


def _value(v: object) -> bytes:
    """An attr value's canonical bytes: bool, int and float kept apart, -0.0 and NaN exact."""
    if v is None:
        return b"N"
    if isinstance(v, bool):
        return b"T" if v else b"F"
    if isinstance(v, int):
        return b"i%d" % v
    if isinstance(v, float):
        return b"f" + v.hex().encode()
    if isinstance(v, str):
        return b"s%d:" % len(v) + _text(v)
    if isinstance(v, DType):
        return b"d" + _text(v.value)
    if isinstance(v, SymExpr):
        return b"e" + _expr(v)
    if isinstance(v, tuple):
        return b"(" + b"".join(_value(x) + b"," for x in v) + b")"
    raise TypeError(f"attr value of type {type(v).__name__} has no canonical form")


def _extents(x: Extents) -> bytes:
    out = [b"L" + b"".join(_expr(e) for e in x.lows), b"H" + b"".join(_expr(e) for e in x.highs)]
    out.append(b"Q" + b"".join(b"%s:%d:%d," % (_text(n), lo, hi) for n, lo, hi in x.ranges))
    out.append(b"P" + b"".join(_expr(e) for e in x.requires))
    return b"".join(out)
