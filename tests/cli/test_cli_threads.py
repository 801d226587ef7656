"""``--threads N`` on ``aotc run`` and ``aotc serve``: onnxruntime's intra-op threads for the cpu device, the same
option as ``aotc.load(threads=)``, carried to every process that loads the artifact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import aotc
from aotc import TensorSpec
from aotc.runtime.executable import Executable
from aotc_cli.main import cli

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model, which device='cpu' runs on onnxruntime."""
    import aotc.functional as F

    path = tmp_path_factory.mktemp("threads") / "relu.aotc"
    aotc.compile(lambda x: F.relu(x) * 2.0, {"x": TensorSpec((2, 3), "float32")}).save(path)
    return path


def intra_op_threads(exe: Executable) -> int:
    """The intra-op threads of the onnxruntime session of every variant (one value)."""
    (threads,) = {program._session.get_session_options().intra_op_num_threads for _, program in exe._variants}
    return threads


def loads_seen(monkeypatch: pytest.MonkeyPatch) -> list[Executable]:
    """Record every Executable that aotc.load returns during the test."""
    seen: list[Executable] = []
    real = aotc.load

    def spy(*args: Any, **kwargs: Any) -> Executable:
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(aotc, "load", spy)
    monkeypatch.setattr("aotc.runtime.load", spy)
    return seen


@pytest.mark.parametrize("threads", [1, 2])
def test_run_sets_onnxruntimes_intra_op_threads(artifact: Path, monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    seen = loads_seen(monkeypatch)
    result = CliRunner().invoke(cli, ["run", str(artifact), "--random", "--device", "cpu", "--threads", str(threads)])
    assert result.exit_code == 0, result.output
    assert "ran on cpu" in result.output
    assert [intra_op_threads(exe) for exe in seen] == [threads]


def test_run_refuses_a_negative_thread_count(artifact: Path) -> None:
    result = CliRunner().invoke(cli, ["run", str(artifact), "--random", "--threads", "-1"])
    assert result.exit_code == 2
    assert "--threads" in result.stderr and "-1" in result.stderr


def test_serve_passes_threads_to_each_model(artifact: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("kserve")
    seen = loads_seen(monkeypatch)
    served: list[Any] = []
    monkeypatch.setattr("aotc.serve.server.serve", lambda models, **_: served.extend(models))
    result = CliRunner().invoke(cli, ["serve", str(artifact), "--device", "cpu", "--threads", "1", "--port", "0"])
    assert result.exit_code == 0, result.output
    assert [m.load_options for m in served] == [{"threads": 1}]
    assert [intra_op_threads(exe) for exe in seen] == [1]
    for m in served:
        m.exe.close()


def spinning(exe: Executable) -> str:
    """onnxruntime's allow_spinning entry of every variant's session (one value; "default" when not set)."""
    values = set()
    for _, program in exe._variants:
        try:
            values.add(
                program._session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
            )
        except RuntimeError:  # onnxruntime: "does not have configuration with key"
            values.add("default")
    (value,) = values
    return value


def test_spin_is_onnxruntimes_default_unless_turned_off(artifact: Path) -> None:
    assert spinning(aotc.load(artifact, device="cpu")) == "default"  # onnxruntime's: spin
    assert spinning(aotc.load(artifact, device="cpu", spin=False)) == "0"
    with pytest.raises(aotc.AotcError, match="spin must be True or False, got 'no'"):
        aotc.load(artifact, device="cpu", spin="no")  # type: ignore[arg-type]


def test_a_served_model_does_not_spin(artifact: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("kserve")
    seen = loads_seen(monkeypatch)
    served: list[Any] = []
    monkeypatch.setattr("aotc.serve.server.serve", lambda models, **_: served.extend(models))
    result = CliRunner().invoke(cli, ["serve", str(artifact), "--device", "cpu", "--port", "0"])
    assert result.exit_code == 0, result.output
    assert [spinning(exe) for exe in seen] == ["0"]
    for m in served:
        m.exe.close()
