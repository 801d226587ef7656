"""What an artifact holds, as a JSON-able dict (``aotc inspect --json``)."""

from __future__ import annotations

from typing import Any

from aotc.artifact.reader import Artifact
from aotc.ir.graph import Graph
from aotc.ir.symbolic import to_infix
from aotc.ir.types import TensorType


def describe(artifact: Artifact) -> dict[str, Any]:
    """Versions, interface, symbols, guards, op counts and sizes. Top-level inputs, outputs, symbols and
    guards are those of the first variant; ``variants`` lists each one."""
    first = artifact.variants[0]
    return {
        "format_version": artifact.format_version,
        "schema_version": artifact.schema_version,
        "producer_version": artifact.producer_version,
        "model_name": artifact.name,
        "file_size": artifact.file_size,
        # read_artifact returns only artifacts whose every checksum matched
        "checksums": "ok",
        "inputs": _inputs(first),
        "outputs": [{"index": i, **_type(o.type)} for i, o in enumerate(first.outputs)],
        "output_tree": first.output_tree,
        "symbols": _symbols(first),
        "guards": _guards(first),
        "variants": [_variant(i, g) for i, g in enumerate(artifact.variants)],
        "source": None
        if artifact.source is None
        else {"nodes": len(artifact.source.nodes), "op_counts": artifact.source.op_counts()},
        "constants": len(artifact.constants),
        "weight_bytes": artifact.weight_bytes,
        "meta": artifact.meta,
    }


def _variant(index: int, g: Graph) -> dict[str, Any]:
    return {
        "index": index,
        "name": g.name,
        "inputs": _inputs(g),
        "symbols": _symbols(g),
        "guards": _guards(g),
        "nodes": len(g.nodes),
        "op_counts": g.op_counts(),
        "constants": len(g.constants),
    }


def _type(t: TensorType) -> dict[str, Any]:
    return {"dtype": t.dtype.value, "shape": [to_infix(d) for d in t.shape]}


def _inputs(g: Graph) -> list[dict[str, Any]]:
    return [{"name": name, **_type(v.type)} for name, v in zip(g.input_names, g.inputs)]


def _symbols(g: Graph) -> list[dict[str, Any]]:
    return [{"name": s.name, "min": s.min, "max": s.max, "multiple_of": s.multiple_of} for s in g.symbols]


def _guards(g: Graph) -> list[dict[str, str]]:
    return [{"guard": f"{to_infix(gd.lhs)} {gd.rel} {to_infix(gd.rhs)}", "loc": gd.loc} for gd in g.guards]
