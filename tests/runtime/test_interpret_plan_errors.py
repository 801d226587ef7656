"""A launch plan the interpret backend's setup refuses (the cuda backend's too: it reuses that setup for its storage
plan) is the file's fault when the plan came from a file: a PlanError is an ArtifactError, so ``aotc run`` exits 1
with one line, not 3 ("internal error"). It stays a VerifyError for callers that hand the backend a plan the
compiler just made."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import aotc
from aotc.artifact import read_artifact
from aotc.errors import ArtifactError, VerifyError
from aotc.ir.schedule import Schedule, View
from aotc.ir.variant import Variant
from aotc.runtime.backends import InterpretBackend
from aotc.runtime.backends.interpret import PlanError
from aotc_cli.errors import EXIT_INTERNAL, EXIT_USER, classify
from aotc_cli.main import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "artifact"))
from kernel_kit import golden_model, with_kernel, write


def _bad_plans() -> dict[str, tuple[Schedule, str]]:
    """Plans of the golden model that do not fit its graph, with what the interpret setup says."""
    _, variant, s = golden_model()
    out0, out1 = variant.outputs[0].id, variant.outputs[1].id
    last = len(s.kernels) - 1
    return {
        "arg without storage": (dataclasses.replace(s, buffers=s.buffers[1:]), "has no storage"),
        "unwritten output": (with_kernel(s, last, lambda k: k.replace(outputs=())), "no kernel writes value"),
        "view cycle": (dataclasses.replace(s, views=(View(out0, out1), View(out1, out0))), "views form a cycle"),
        "writes an input": (
            dataclasses.replace(s, views=(View(out0, variant.inputs[0].id),)),
            "which lives in a graph input",
        ),
        "unknown view value": (dataclasses.replace(s, views=(View(out0, 9999),)), "names value %9999"),
        "check slot": (dataclasses.replace(s, flags=0), "outside the 0 flags"),
    }


PLANS = _bad_plans()


@pytest.mark.parametrize("label", sorted(PLANS))
def test_the_setup_raises_a_plan_error_both_kinds_of_caller_catch(label: str) -> None:
    _, variant, _ = golden_model()
    bad, match = PLANS[label]
    with pytest.raises(PlanError, match=match) as info:
        InterpretBackend().prepare(Variant(variant, bad), {})
    assert isinstance(info.value, ArtifactError) and isinstance(info.value, VerifyError)
    assert str(info.value).startswith(f"variant {variant.name!r}: its launch plan does not fit its graph: ")
    code, message = classify(info.value)
    assert code == EXIT_USER and message.startswith("error: variant ")
    assert classify(VerifyError("a graph the compiler broke"))[0] == EXIT_INTERNAL  # still aotc's own bug


@pytest.mark.parametrize("label", sorted(PLANS))
def test_aotc_run_exits_1_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label: str) -> None:
    """The file as the reader would return it were its checks to miss the plan's fault: ``aotc run --device
    interpret`` says so in one line and exits 1."""
    _, variant, schedule = golden_model()
    path = tmp_path / "m.aotc"
    path.write_bytes(write(variant, schedule))
    bad, match = PLANS[label]
    read = read_artifact(path.read_bytes())
    art = dataclasses.replace(read, variants=(read.variants[0].replace(plan=bad),))
    load = aotc.load
    monkeypatch.setattr(aotc, "load", lambda _path, device=None, **kw: load(art, device=device, **kw))
    result = CliRunner().invoke(cli, ["run", str(path), "--random", "--device", "interpret"])
    assert result.exit_code == EXIT_USER, (result.exit_code, result.output)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: variant ") and match in result.stderr, result.stderr


def test_the_cuda_setup_refuses_the_same_way() -> None:
    """The cuda backend builds its storage plan with the interpret setup, before it touches the driver."""
    from fake_cuda import FakeDriver, fake_binaries

    from aotc.runtime.backends.cuda import CudaBackend

    _, variant, _ = golden_model()
    bad, match = PLANS["arg without storage"]
    with CudaBackend(driver=FakeDriver()) as backend, pytest.raises(ArtifactError, match=match):
        backend.prepare(Variant(variant, bad), fake_binaries(bad))
