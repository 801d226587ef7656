"""Graph-level checks the writer and the reader share."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aotc.artifact.layout import MAX_TREE_DEPTH
from aotc.ir.digest import graph_digest
from aotc.ir.graph import Graph, Symbol
from aotc.ir.ops import OPS, Op

# The artifact meta key the writer puts the source graph's digest under (ir.digest.graph_digest), binding the source
# graph to the variants lowered from it; the reader checks it and takes it out of the meta it returns.
SOURCE_DIGEST_KEY = "aotc.source_digest"
SOURCE_DIGEST_VERSION = 8  # from this schema on, every file with a source graph carries its digest


def source_weights(source: Graph, variants: Sequence[Graph], checksums: Mapping[str, bytes]) -> dict[str, bytes]:
    """The stored checksums of the weights the source graph's digest covers (graph_digest): every weight that not
    every graph holds (the source's own, such as batch norm statistics, and the variants' own, such as the conv
    weights they were folded into). Editing one of those would make the cpu backend, which runs the source graph,
    compute something other than the kernels and references, which run the variants; a weight every graph holds is
    one array for every backend."""
    graphs = [source, *variants]
    everywhere = set(source.constants).intersection(*(g.constants for g in variants))
    return {name: checksums[name] for g in graphs for name in g.constants if name not in everywhere}


def source_problem(
    source: Graph | None, digest: object, schema_version: int, weights: Mapping[str, bytes] | None = None
) -> str:
    """Why a file's source graph is not the one its writer bound to the variants with ``digest`` ('' when it is, or
    when a file from before the binding has none); ``weights``: source_weights."""
    if digest is None:
        if source is not None and schema_version >= SOURCE_DIGEST_VERSION:
            return f"the source graph has no digest (meta {SOURCE_DIGEST_KEY!r}), which every schema 8 file's carries"
        return ""
    if source is None:
        return f"meta {SOURCE_DIGEST_KEY!r} binds a source graph, but the file has none"
    if not isinstance(digest, str):
        return f"meta {SOURCE_DIGEST_KEY!r} is a {type(digest).__name__}, not a digest"
    if graph_digest(source, weights) != digest:
        return "the source graph does not match its digest: it was changed without the rest of the file"
    return ""


def interface_mismatch(a: Graph, b: Graph) -> str:
    """Why two variants of one model don't share a calling interface ('' when they do)."""
    if a.input_names != b.input_names:
        return f"inputs {list(b.input_names)} != {list(a.input_names)}"
    for name, x, y in zip(a.input_names, a.inputs, b.inputs):
        if x.type.dtype is not y.type.dtype or x.type.rank != y.type.rank:
            return f"input {name!r} is {y.type}, expected the dtype and rank of {x.type}"
    if len(a.outputs) != len(b.outputs) or json.dumps(a.output_tree) != json.dumps(b.output_tree):
        return "the outputs differ"
    if a.states != b.states:
        return f"the states {[str(s) for s in b.states]} != {[str(s) for s in a.states]}"
    for i, (x, y) in enumerate(zip(a.outputs, b.outputs)):
        if x.type.dtype is not y.type.dtype or x.type.rank != y.type.rank:
            return f"output {i} is {y.type}, expected the dtype and rank of {x.type}"
    return ""


def check_output_tree(tree: Any, n_outputs: int, error: type[Exception], what: str) -> None:
    """Raise ``error`` unless tree is a well-formed output structure indexing every output exactly once."""
    leaves: list[int] = []

    def walk(t: Any, depth: int) -> None:
        if depth > MAX_TREE_DEPTH:
            raise error(f"{what}: output tree nests deeper than {MAX_TREE_DEPTH} levels")
        if isinstance(t, int) and not isinstance(t, bool):
            if not 0 <= t < n_outputs:
                raise error(f"{what}: output tree leaf {t} is not an output index (there are {n_outputs})")
            leaves.append(t)
            return
        if not (isinstance(t, dict) and len(t) == 1):
            raise error(f"{what}: bad output tree node {t!r}")
        ((kind, items),) = t.items()
        if kind not in ("tuple", "list", "dict") or not isinstance(items, (list, tuple)):
            raise error(f"{what}: bad output tree node {t!r}")
        if kind != "dict":
            for sub in items:
                walk(sub, depth + 1)
            return
        keys = set()
        for item in items:
            if not (isinstance(item, (list, tuple)) and len(item) == 2):
                raise error(f"{what}: dict entry {item!r} is not a [key, value] pair")
            key, sub = item
            if not isinstance(key, (str, int)) or isinstance(key, bool) or key in keys:
                raise error(f"{what}: dict key {key!r} is not a unique str or int")
            keys.add(key)
            walk(sub, depth + 1)

    walk(tree, 0)
    if sorted(leaves) != list(range(n_outputs)):
        raise error(f"{what}: output tree does not name every output exactly once")


def symbol_problem(s: Symbol) -> str:
    """Why no value can bind symbol ``s`` ('' when some can): an empty range, or a multiple_of that no
    value in [min, max] is a multiple of."""
    if s.multiple_of < 1 or s.min > s.max:
        return f"symbol {s.name} has the empty range [{s.min}, {s.max}] (multiple_of {s.multiple_of})"
    if -(-s.min // s.multiple_of) * s.multiple_of > s.max:
        return f"symbol {s.name}: no value in [{s.min}, {s.max}] is a multiple of {s.multiple_of}"
    return ""


def graph_problem(g: Graph) -> str:
    """What the IR verifier lets pass but a stored graph must not hold ('' when nothing): attrs its op
    does not declare (the op would ignore them and fall back to its defaults), constants no node uses,
    symbols no value can satisfy. A declared attr may be absent: some have defaults (gather's
    ``negative_indices``)."""
    for s in g.symbols:
        problem = symbol_problem(s)
        if problem:
            return problem
    used: set[str] = set()
    seen: set[tuple[Op, Any]] = set()
    for i, node in enumerate(g.nodes):
        if (node.op, node.attrs) not in seen:
            seen.add((node.op, node.attrs))
            declared = OPS[node.op].attrs
            unknown = [k for k in node.attrs if k not in declared]
            if unknown:
                return f"node {i} ({node.op.value}) has attrs {unknown} that {node.op.value} does not declare {list(declared)}"
        if node.op is Op.CONSTANT:
            used.add(node.attrs["name"])
    used |= {s.init for s in g.states}  # a state's initial value: read by a session, not by a node
    unused = sorted(set(g.constants) - used)
    if unused:
        return f"constants {unused[:5]} are held but no node uses them"
    return ""
