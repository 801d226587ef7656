"""``describe`` and ``aotc inspect`` list the kernels (name, targets, fused ops, warps, shared memory) and the
arena's size bound over every binding of the symbols."""

from __future__ import annotations

import json

from click.testing import CliRunner
from kernel_kit import fake_binaries, golden_model, write

from aotc.artifact import describe, read_artifact
from aotc.ir.symbolic_values import evaluate
from aotc_cli.inspect_cmd import inspect_command, render_text


def _art(binaries: bool = True):  # type: ignore[no-untyped-def]
    src, variant, schedule = golden_model()
    return read_artifact(write(variant, schedule, fake_binaries(schedule) if binaries else (), source=src))


def test_kernels_and_arena_in_describe() -> None:
    schedule = golden_model()[2]
    d = describe(_art())
    names = list(dict.fromkeys(k.name for k in schedule.kernels))
    assert [k["name"] for k in d["kernels"]] == names
    first = {k.name: k for k in reversed(schedule.kernels)}
    for entry in d["kernels"]:
        k = first[entry["name"]]
        assert entry["targets"] == ["sm_80", "sm_90"] and entry["ptx"] is True
        assert entry["ops"] == list(k.fused) and entry["num_warps"] == k.num_warps
        assert entry["shared"] == 2048 and entry["shared_by_target"] == {"sm_80": 1024, "sm_90": 2048}
    # arena sizes grow with the symbols, so the sound bound is the size at every symbol's maximum
    at_max = evaluate(schedule.arena_bytes, {"batch": 8, "seq": 64})
    assert d["arena_bytes"] == at_max == d["variants"][0]["arena_bytes"]
    assert d["variants"][0]["launches"] == len(schedule.kernels)
    json.dumps(d)


def test_without_targets_kernels_have_no_binaries() -> None:
    d = describe(_art(binaries=False))
    assert d["kernels"] and all(k["targets"] == [] and k["shared"] is None for k in d["kernels"])
    assert "source only, no targets" in render_text(d)


def test_inspect_text_and_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, variant, schedule = golden_model()
    path = tmp_path / "m.aotc"
    path.write_bytes(write(variant, schedule, fake_binaries(schedule), source=src))
    out = CliRunner().invoke(inspect_command, [str(path)])
    assert out.exit_code == 0, out.output
    assert "kernels    7 (with cubins and PTX)" in out.output
    assert f"{schedule.kernels[0].name}" in out.output and "sm_80,sm_90" in out.output
    assert "arena " in out.output
    js = json.loads(CliRunner().invoke(inspect_command, [str(path), "--json"]).output)
    assert {"name", "targets", "ops", "num_warps", "shared"} <= set(js["kernels"][0])
    assert isinstance(js["arena_bytes"], int)
