"""Kernel kinds are template names (schema 8): stored as text, read back through the template table, the enum codes
of schema 3-7 still read, and a name this aotc has no template for refused naming it."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
from kernel_kit import golden_model, write
from mutation import reseal

from aotc.artifact import read_artifact
from aotc.artifact.layout import PREAMBLE_SIZE
from aotc.errors import ArtifactError
from aotc.ir.schedule import Schedule
from aotc.ir.templates import BY_KIND, TEMPLATES, KernelKind, grid_need, template

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _kernel_tables(data: bytes) -> list:
    from aotc.artifact.generated.Artifact import Artifact

    fb_len = int.from_bytes(data[24:32], "little")
    root = Artifact.GetRootAs(data[PREAMBLE_SIZE : PREAMBLE_SIZE + fb_len], 0)
    return [root.Kernels(i) for i in range(root.KernelsLength())]


def _named(data: bytes, old: str, new: str) -> bytes:
    """``data`` with the length-prefixed string ``old`` (a kind name) spelled ``new`` (as long), resealed."""
    assert len(old) == len(new)
    before = len(old).to_bytes(4, "little") + old.encode() + b"\0"
    assert before in data
    return reseal(data.replace(before, len(new).to_bytes(4, "little") + new.encode() + b"\0"))


def test_a_schema_8_file_stores_each_kind_by_name() -> None:
    data = (GOLDEN / "v8_mlp.aotc").read_bytes()
    tables = _kernel_tables(data)
    assert tables and all(t.Kind() == 0 for t in tables)
    names = {t.KindName().decode() for t in tables}
    assert {"matmul", "reduction", "pointwise"} <= names <= set(BY_KIND)
    art = read_artifact(data)
    assert {str(k.kind) for v in art.variants for k in v.plan.kernels} == names


@pytest.mark.parametrize("version", [3, 4, 5, 6, 7])
def test_older_files_read_their_kind_codes_as_template_names(version: int) -> None:
    data = (GOLDEN / f"v{version}_mlp.aotc").read_bytes()
    assert all(t.KindName() is None for t in _kernel_tables(data))
    (s,) = (v.plan for v in read_artifact(data).variants)
    kinds = {k.kind for k in s.kernels}
    assert KernelKind.MATMUL in kinds and all(kind is template(kind).kind for kind in kinds)


def test_a_kind_no_template_has_is_refused_naming_it() -> None:
    _, variant, schedule = golden_model()
    data = write(variant, schedule)
    read_artifact(data)
    with pytest.raises(ArtifactError, match=r"kernel kind 'matmal', which is not a template of this aotc"):
        read_artifact(_named(data, "matmul", "matmal"))


def test_the_writer_refuses_a_kind_no_template_has() -> None:
    _, variant, schedule = golden_model()
    k = schedule.kernels[0]
    bad = Schedule((k.replace(kind=KernelKind("lstm_sequence")), *schedule.kernels[1:]), *_rest(schedule))
    with pytest.raises(ArtifactError, match=r"kernel kind 'lstm_sequence' is not a template of this aotc"):
        write(variant, bad)


def _rest(s: Schedule) -> tuple:
    return (s.buffers, s.arena_bytes, s.views, s.flags, s.declined)


def test_kind_names_and_codes_are_schema_gated() -> None:
    from aotc.artifact import writer

    _, variant, schedule = golden_model()
    with mock.patch.object(writer, "SCHEMA_VERSION", 7):
        data = write(variant, schedule)
    with pytest.raises(ArtifactError, match=r"schema version 7 file holds a schema 8 kind name"):
        read_artifact(data)


def test_every_row_names_a_distinct_kind_and_its_hooks_resolve() -> None:
    from aotc.kernels.templates import hook

    assert len(BY_KIND) == len(TEMPLATES)
    for row in TEMPLATES:
        assert KernelKind(str(row.kind)) is row.kind is getattr(KernelKind, row.kind.upper())
        for ref in (row.emit, row.check, row.group):
            if ref:
                assert callable(hook(ref)), ref
        assert row.tuning in ("", "gemm", "attention", "recurrent")
        assert not row.epilogue or row.roots, f"{row.kind}: an epilogue needs a root"


def test_an_unknown_kind_has_no_grid() -> None:
    _, variant, schedule = golden_model()
    with pytest.raises(ValueError, match="'nope' is not a template"):
        grid_need(variant, schedule.kernels[0].replace(kind=KernelKind("nope")))
