"""Graphs for the runtime tests, built with the IR Builder and written to artifact bytes."""

from __future__ import annotations

from graph_kit import const, make_graph  # noqa: F401 - re-exported for the runtime tests

from aotc.artifact import write_artifact
from aotc.ir import Graph


def artifact_bytes(*variants: Graph) -> bytes:
    return write_artifact(list(variants))
