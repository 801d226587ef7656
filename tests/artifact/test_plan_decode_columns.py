"""The plan decoder reads its string vectors straight from the buffer (one vtable lookup per vector, not one per
element): every such column reads exactly what the generated accessors read, in the golden files and in a
file with per-architecture launches and binaries; a column with bytes that are not UTF-8 is refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kernel_kit import GOLDEN
from mutation import fb_region, reseal
from plan_kit import model, with_arch_launch, write

from aotc.artifact import plan_decode, read_artifact
from aotc.artifact.decode import Decoder
from aotc.artifact.plan_decode import PlanDecoder
from aotc.errors import ArtifactError

# (table getter, slot, generated accessor) of every column _column reads
COLUMNS = {
    "launch arg sizes": ("launch", plan_decode._LAUNCH_ARG_SIZES, "ArgSizes"),
    "launch grid": ("launch", plan_decode._LAUNCH_GRID, "Grid"),
    "launch fused": ("launch", plan_decode._LAUNCH_FUSED, "Fused"),
    "arch launch grid": ("arch launch", plan_decode._ARCH_GRID, "Grid"),
    "code constexpr names": ("code", plan_decode._CODE_CONSTEXPR_NAMES, "ConstexprNames"),
    "code arg names": ("code", plan_decode._CODE_ARG_NAMES, "ArgNames"),
    "code arg types": ("code", plan_decode._CODE_ARG_TYPES, "ArgTypes"),
    "meta params": ("meta", plan_decode._META_PARAMS, "Params"),
    "schedule declined": ("schedule", plan_decode._SCHEDULE_DECLINED, "Declined"),
}


def _tables(root: Any) -> Iterator[tuple[str, Any]]:
    for i in range(root.KernelsLength()):
        code = root.Kernels(i)
        yield "code", code
        if code.PtxMeta() is not None:
            yield "meta", code.PtxMeta()
        for j in range(code.CubinsLength()):
            yield "meta", code.Cubins(j).Meta()
    plans = [root.Variants(v).Plan() for v in range(root.VariantsLength())]  # schema >= 9
    plans += [root.VariantGraphs(v).Schedule() for v in range(root.VariantGraphsLength())]  # schema 3-8
    for s in plans:
        if s is None:
            continue
        yield "schedule", s
        for i in range(s.LaunchesLength()):
            launch = s.Launches(i)
            yield "launch", launch
            for j in range(launch.ArchLaunchesLength() if not launch.ArchLaunchesIsNone() else 0):
                yield "arch launch", launch.ArchLaunches(j)


def _files() -> dict[str, bytes]:
    files = {p.stem: p.read_bytes() for p in sorted(GOLDEN.parent.glob("v[3-9]_*.aotc"))}
    files["arch_launches"] = write(with_arch_launch(model()[1], 1), binaries=True)
    return files


@pytest.mark.parametrize(("name", "data"), list(_files().items()), ids=list(_files()))
def test_each_column_reads_what_the_generated_accessors_read(name: str, data: bytes) -> None:
    start, end = fb_region(data)
    dec = Decoder(data[start:end])
    reader = PlanDecoder.__new__(PlanDecoder)  # only _column and the decoder's count are used
    reader.count = dec.count  # type: ignore[misc]
    seen = set()
    for kind, table in _tables(dec.root):
        for label, (of, slot, accessor) in COLUMNS.items():
            if of != kind:
                continue
            generated = tuple(
                getattr(table, accessor)(i).decode() for i in range(getattr(table, accessor + "Length")())
            )
            assert reader._column(table, slot, label) == generated, (name, label)
            seen.add(label)
    assert seen >= {"launch arg sizes", "launch grid", "launch fused", "code arg names", "meta params"}


def test_a_column_that_is_not_utf8_is_refused() -> None:
    data = bytearray(write(model()[1]))
    at = data.rindex(b"\x06\x00\x00\x00matmul", *fb_region(bytes(data))) + 4  # a launch's fused op (the
    # first "matmul" is the graph's string table)
    data[at] = 0xFF
    with pytest.raises(ArtifactError, match=r"launch \d+ \(k\d_matmul.*\) fused \d+ is not valid UTF-8"):
        read_artifact(reseal(data))
