"""Schema 9 keeps each variant in a Variant table (its graph and its plan) and leaves the places of schema 1-8
empty: no Artifact.variant_graphs, no Graph.schedule. A file that mixes the two layouts is refused."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from kernel_kit import GOLDEN, golden_model, write
from mutation import fb_region, reseal

from aotc.artifact import SCHEMA_VERSION, encode, read_artifact
from aotc.artifact.decode import VARIANT_VERSION
from aotc.artifact.fbverify import verify_flatbuffer
from aotc.artifact.generated import Graph as FbGraph
from aotc.artifact.generated import Variant as FbVariant
from aotc.artifact.generated.Artifact import Artifact as FbArtifact
from aotc.artifact.plan_encode import encode_schedule
from aotc.errors import ArtifactError

V8 = (GOLDEN.parent / "v8_mlp.aotc").read_bytes()
V9 = (GOLDEN.parent / f"v{VARIANT_VERSION}_mlp.aotc").read_bytes()


def _relabelled(data: bytes, version: int) -> bytes:
    """``data`` claiming schema ``version``, in its preamble and in its FlatBuffer, checksums resealed."""
    start, end = fb_region(data)
    slots: dict[str, tuple[int, int]] = {}
    verify_flatbuffer(data[start:end], on_slot=lambda pos, size, what: slots.setdefault(what, (pos, size)))
    pos, size = slots["Artifact.schema_version"]
    out = bytearray(data)
    out[start + pos : start + pos + size] = version.to_bytes(size, "little")
    return reseal(out, schema=version)


def test_a_schema_9_file_keeps_its_variants_in_variant_tables() -> None:
    assert SCHEMA_VERSION >= VARIANT_VERSION
    start, end = fb_region(V9)
    root = FbArtifact.GetRootAs(V9[start:end], 0)
    assert root.VariantGraphsIsNone() and root.VariantsLength() == 1
    (variant,) = (root.Variants(i) for i in range(root.VariantsLength()))
    assert variant.Graph().Schedule() is None and variant.Plan() is not None
    art = read_artifact(V9)
    assert art.variants[0].plan is not None and art.variants[0].name == art.name


def test_the_old_place_in_a_schema_9_file_is_refused() -> None:
    with pytest.raises(ArtifactError, match="holds its variants' graphs in the schema 1-8 list"):
        read_artifact(_relabelled(V8, VARIANT_VERSION))


def test_variant_tables_in_an_older_file_are_refused() -> None:
    with pytest.raises(ArtifactError, match=f"schema version 8 file holds schema {VARIANT_VERSION} variant tables"):
        read_artifact(_relabelled(V9, 8))


def test_a_schema_9_graph_with_a_schedule_is_refused() -> None:
    """The variant's plan written where schema 3-8 kept it, inside its graph (and not as its plan)."""
    _, graph, schedule = golden_model()
    end = FbGraph.End

    def old_place(b: Any, v: Any, t: Any, const_index: Any, what: str, code_index: Any) -> int:
        plan = encode_schedule(b, v.plan, code_index)
        with mock.patch.object(FbGraph, "End", lambda b: (FbGraph.AddSchedule(b, plan), end(b))[1]):
            g = encode._graph(b, v.graph, t, const_index, what)
        FbVariant.Start(b)
        FbVariant.AddGraph(b, g)
        return FbVariant.End(b)

    with mock.patch.object(encode, "_variant", old_place):
        data = write(graph, schedule)
    with pytest.raises(ArtifactError, match=r"variant 0: its graph has a schedule \(from schema 9: its plan\)"):
        read_artifact(data)
