"""The reader's leaner FlatBuffer table (aotc/artifact/fbtable.py) reads every file exactly as flatbuffers' own."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_kit import model, with_arch_launch, write

from aotc.artifact import fbtable, read_artifact
from aotc.ir.digest import graph_digest

GOLDEN = sorted((Path(__file__).resolve().parents[1] / "golden").glob("v*_mlp.aotc"))


def _reading(source: Path | bytes, fast: bool) -> tuple:
    fbtable.install(fast)
    try:
        a = read_artifact(source)
    finally:
        fbtable.install(True)
    graphs = (*(v.graph for v in a.variants), *([a.source] if a.source is not None else []))
    return (
        [graph_digest(g) for g in graphs],
        [[n.loc for n in g.nodes] for g in graphs],
        [v.plan for v in a.variants],
        dict(a.kernels),
        a.meta,
        a.onnx,
        {k: (v.dtype, v.shape, v.tobytes()) for k, v in a.constants.items()},
        (a.features, a.kernel_features, a.cuda_driver_floor, a.source_bound),
    )


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_fast_table_reads_each_golden_file_as_flatbuffers_does(path: Path) -> None:
    assert _reading(path, fast=False) == _reading(path, fast=True)


def test_fast_table_reads_a_file_with_binaries_and_arch_launches_as_flatbuffers_does() -> None:
    data = write(with_arch_launch(model()[1], 1), binaries=True)
    assert _reading(data, fast=False) == _reading(data, fast=True)


def test_install_switches_every_generated_module() -> None:
    import aotc.artifact.generated.Launch as launch

    fbtable.install(False)
    try:
        assert launch.flatbuffers.table.Table is not fbtable.FastTable
    finally:
        fbtable.install(True)
    assert launch.flatbuffers.table.Table is fbtable.FastTable
