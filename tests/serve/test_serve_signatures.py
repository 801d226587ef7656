"""Servers insisting on signatures: a real ``aotc serve`` process with ``--trusted-key`` refuses an unsigned file
and a file signed by another key at start, one line naming the file and why; a server on cuda without a trusted key
says once, at start, that the cubins and PTX it serves run unchecked."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aotc_cli.main import cli

from .conftest import START_TIMEOUT_S, free_port, server_command

# the fake driver, and fake cubins and PTX that pass the reader's checks (as tests/artifact builds them)
sys.path[:0] = [str(Path(__file__).resolve().parents[1] / d) for d in ("runtime", "artifact")]
pytest.importorskip("triton")  # the fake driver runs the kernels under the Triton interpreter

from fake_cuda import FakeDriver  # noqa: E402 (needs the path above)
from kernel_kit import fake_binaries  # noqa: E402

UNCHECKED = (
    "warning: serving on cuda without --trusted-key: the cubins and PTX of the files served run on the GPU "
    "unchecked (no reader can verify machine code); --trusted-key KEY.pub serves only files signed by that key"
)


def keygen(path: Path) -> str:
    """A new key pair at ``path`` and ``path``.pub; returns its fingerprint."""
    result = CliRunner().invoke(cli, ["keygen", str(path)])
    assert result.exit_code == 0, result.output
    match = re.search(r"SHA256:\S+", result.output)
    assert match, result.output
    return match.group(0)


def sign(artifact: Path, key: Path, out: Path) -> Path:
    result = CliRunner().invoke(cli, ["sign", str(artifact), "--key", str(key), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def start_refused(args: list[Any]) -> subprocess.CompletedProcess[str]:
    """``aotc serve ARGS`` in a process of its own, which must end by itself (a refusal at start)."""
    cmd = server_command(args, free_port(), free_port())
    return subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)


def test_a_real_server_refuses_an_unsigned_file_with_one_line(artifacts: dict[str, Path], tmp_path: Path) -> None:
    keygen(tmp_path / "key")
    done = start_refused([artifacts["mlp"], "--trusted-key", tmp_path / "key.pub"])
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"error: invalid artifact '{artifacts['mlp']}': artifact is not signed, and a signature is required"
    ]
    assert done.stdout == ""


def test_a_real_server_refuses_a_file_signed_by_another_key(artifacts: dict[str, Path], tmp_path: Path) -> None:
    keygen(tmp_path / "trusted")
    other = keygen(tmp_path / "other")
    signed = sign(artifacts["mlp"], tmp_path / "other", tmp_path / "mlp.aotc")
    done = start_refused([signed, "--trusted-key", tmp_path / "trusted.pub"])
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"error: invalid artifact '{signed}': signed by key {other}, which is not a trusted key"
    ]


def test_one_refused_file_among_served_ones_stops_the_start(artifacts: dict[str, Path], tmp_path: Path) -> None:
    """A server given a signed and an unsigned file serves neither: it names the unsigned one and exits (after the
    signed one's "loaded" log line)."""
    keygen(tmp_path / "key")
    signed = sign(artifacts["mlp"], tmp_path / "key", tmp_path / "signed.aotc")
    done = start_refused([signed, artifacts["cnn"], "--trusted-key", tmp_path / "key.pub"])
    assert done.returncode == 1, done.stderr
    assert [line for line in done.stderr.splitlines() if "kserve.aotc INFO" not in line] == [
        f"error: invalid artifact '{artifacts['cnn']}': artifact is not signed, and a signature is required"
    ]
    assert "serving" not in done.stderr


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """``aotc serve`` run through to the point where the server would start, which records the models' devices
    instead of serving them."""
    import aotc.serve.server

    served: list[list[str]] = []
    monkeypatch.setattr(aotc.serve.server, "serve", lambda models, **_: served.append([m.exe.device for m in models]))
    yield served


@pytest.fixture
def on_fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every served model loads as an executable on the fake CUDA driver (no GPU needed)."""
    from aotc.artifact import read_artifact, write_artifact
    from aotc.ir.variant import Variant
    from aotc.runtime import Executable
    from aotc.runtime.backends.cuda import CudaBackend
    from aotc.serve.model import AotcModel

    loaded = []

    def load(self: AotcModel) -> bool:
        # the served file as compiled (a plan, no cubins: the tests build none) with the fake driver's images added
        art = read_artifact(self.path)
        plan = art.variants[0].plan
        binaries = fake_binaries(plan)
        art = read_artifact(
            write_artifact([Variant(art.variants[0].graph, plan)], source=art.source, binaries=binaries)
        )
        fake = FakeDriver()
        fake.register(plan, art.kernels)
        self.exe = Executable(art, CudaBackend(driver=fake))
        loaded.append(self.exe)
        self.ready = True
        return True

    monkeypatch.setattr(AotcModel, "load", load)
    yield
    for exe in loaded:
        exe.close()


def serve_lines(args: list[Any]) -> list[str]:
    result = CliRunner().invoke(cli, ["serve", *map(str, args), "--port", "1"])
    assert result.exit_code == 0, result.output
    return result.stderr.splitlines()


@pytest.mark.usefixtures("on_fake_cuda")
@pytest.mark.parametrize("device", [["--device", "cuda"], []], ids=["explicit", "best-available"])
def test_a_cuda_server_without_a_trusted_key_says_once_that_cubins_run_unchecked(
    artifacts: dict[str, Path], started: list[list[str]], device: list[str]
) -> None:
    """Judged by the device the files loaded on, so a load left to pick the best device warns there too."""
    lines = serve_lines([artifacts["mlp"], artifacts["cnn"], *device])
    assert started == [["cuda", "cuda"]]
    assert [line for line in lines if line.startswith("warning:")] == [UNCHECKED]


@pytest.mark.usefixtures("on_fake_cuda")
def test_a_cuda_server_with_a_trusted_key_says_nothing(
    artifacts: dict[str, Path], tmp_path: Path, started: list[list[str]]
) -> None:
    keygen(tmp_path / "key")
    lines = serve_lines([artifacts["mlp"], "--trusted-key", tmp_path / "key.pub"])
    assert started == [["cuda"]]
    assert not [line for line in lines if "unchecked" in line]


def test_a_cpu_server_says_nothing(artifacts: dict[str, Path], started: list[list[str]]) -> None:
    lines = serve_lines([artifacts["mlp"], "--device", "cpu"])
    assert started == [["cpu"]]
    assert not [line for line in lines if "unchecked" in line]


def test_ray_replicas_warn_where_they_load_on_cuda() -> None:
    """Replicas load in Ray's processes, so the server judges their device from --device and --gpus-per-replica."""
    from aotc_cli.serve_cmd import _replica_device, unchecked_gpu_notice

    assert unchecked_gpu_notice([_replica_device(None, 1.0)], []) == UNCHECKED
    assert unchecked_gpu_notice([_replica_device("cuda:1", 0.0)], []) == UNCHECKED
    assert unchecked_gpu_notice([_replica_device(None, 0.0)], []) is None
    assert unchecked_gpu_notice([_replica_device("cpu", 1.0)], []) is None
    assert unchecked_gpu_notice([_replica_device(None, 1.0)], ["/keys/k.pub"]) is None
