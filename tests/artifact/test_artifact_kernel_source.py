"""A file whose kernel table holds Python the product's codegen does not write never runs that code: the writer will
not write it; the reader binds each source to its launches (digests) and leaves holding it to what codegen writes to
the backend that runs source text, interpret, which refuses it at load (ArtifactError naming the kernel and the
line; ``aotc run --device interpret`` exits 1 with one line); cpu and cuda never read it; and should a plan reach
the Triton launcher without the backend's check, the launcher checks the source again before it compiles anything."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from click.testing import CliRunner
from kernel_kit import golden_model, unchecked, write

import aotc
from aotc.artifact import read_artifact
from aotc.errors import ArtifactError
from aotc.ir.digest import seal
from aotc.ir.schedule import Schedule
from aotc.runtime.backends import interpret
from aotc_cli.errors import EXIT_USER
from aotc_cli.main import cli

GOLDEN_NPZ = Path(__file__).resolve().parents[1] / "golden" / "v5_mlp.npz"


def _payloads(marker: str) -> dict[str, tuple[str, int]]:
    """Kernel 0's source (k0_reduction_sum) with code that writes ``marker`` if it ever runs, and the line it is on."""
    _, _, schedule = golden_model()
    src = schedule.kernels[0].source
    lines = src.split("\n")
    top = len([ln for ln in lines[: lines.index("@triton.jit")] if ln.startswith("import")])
    deco = lines.index("@triton.jit") + 1
    body = lines.index("    pid = tl.program_id(0)") + 1
    opens = f"open({marker!r}, 'w').close()"
    return {
        "module statement": (src.replace("import triton.language as tl\n", f"import triton.language as tl\n{opens}\n"), top + 1),
        "module import": (src.replace("import triton\n", "import triton\nimport os\n"), 2),
        "decorator": (src.replace("@triton.jit\n", f"@({opens} or triton.jit)\n"), deco),
        "annotation": (src.replace("XBLOCK: tl.constexpr", "XBLOCK: tl.core"), lines.index("    XBLOCK: tl.constexpr,") + 1),
        "import in body": (src.replace("    pid = ", "    import os\n    pid = "), body),
        "builtin in body": (src.replace("    pid = ", f"    {opens}\n    pid = "), body),
        "tensor memory": (src.replace("    pid = ", f"    in_ptr0.handle.data.tofile({marker!r})\n    pid = "), body),
    }  # fmt: skip


def _with_source(schedule: Schedule, source: str) -> Schedule:
    """Kernel 0 with ``source``, its digest recomputed as a deliberate attacker would (so only the source checks
    stand in the way)."""
    k0 = seal(golden_model()[1], schedule.kernels[0].replace(source=source))
    return dataclasses.replace(schedule, kernels=(k0, *schedule.kernels[1:]))


def _refusal(e: BaseException, line: int) -> None:
    assert isinstance(e, ArtifactError), repr(e)
    msg = str(e)
    assert f"kernel k0_reduction_sum: its source line {line} (`" in msg and "\n" not in msg, msg


PAYLOADS = sorted(_payloads("m"))


@pytest.mark.parametrize("label", PAYLOADS)
def test_writer_and_interpret_refuse_and_nothing_runs(tmp_path: Path, label: str) -> None:
    marker = tmp_path / "payload-ran"
    source, line = _payloads(str(marker))[label]
    _, variant, schedule = golden_model()
    bad = _with_source(schedule, source)
    with pytest.raises(ArtifactError) as info:
        write(variant, bad)
    _refusal(info.value, line)
    with unchecked():
        data = write(variant, bad)
    art = read_artifact(data)  # bound to its launches: the digest the attacker recomputed
    with pytest.raises(ArtifactError) as info:
        aotc.load(art, device="interpret")
    _refusal(info.value, line)
    # the cpu backend never reads kernel source: it computes the file's graph
    with np.load(GOLDEN_NPZ) as npz:
        z = dict(npz)
    feeds = {"x": z["in_x"], "ids": z["in_ids"]}
    got = aotc.load(art, device="reference").run(feeds)
    want = aotc.load(write(variant, schedule), device="reference").run(feeds)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert not marker.exists()


def test_a_source_edited_without_its_digest_is_refused_by_the_reader() -> None:
    _, variant, schedule = golden_model()
    k0 = schedule.kernels[0]
    edited = k0.replace(source=k0.source.replace("    pid = ", "    pid0 = 0\n    pid = "))
    with unchecked():
        data = write(variant, dataclasses.replace(schedule, kernels=(edited, *schedule.kernels[1:])))
    with pytest.raises(ArtifactError, match="digest"):
        read_artifact(data)


@pytest.mark.parametrize("label", ["module statement", "import in body", "tensor memory"])
def test_aotc_run_exits_1_with_one_line(tmp_path: Path, label: str) -> None:
    marker = tmp_path / "payload-ran"
    source, line = _payloads(str(marker))[label]
    _, variant, schedule = golden_model()
    with unchecked():
        data = write(variant, _with_source(schedule, source))
    path = tmp_path / "bad.aotc"
    path.write_bytes(data)
    result = CliRunner().invoke(cli, ["run", str(path), "--random", "--device", "interpret"])
    assert result.exit_code == EXIT_USER, (result.exit_code, result.output)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: ")
    assert f"kernel k0_reduction_sum: its source line {line} (`" in result.stderr, result.stderr
    assert not marker.exists()


@pytest.mark.parametrize("label", PAYLOADS)
def test_the_interpret_backend_checks_what_the_reader_let_through(tmp_path: Path, label: str) -> None:
    """With the interpret backend's check at load switched off, the file loads, and its first call is refused before any of
    the kernel's code runs."""
    pytest.importorskip("triton")
    marker = tmp_path / "payload-ran"
    source, line = _payloads(str(marker))[label]
    _, variant, schedule = golden_model()
    with unchecked():
        data = write(variant, _with_source(schedule, source))
    with mock.patch.object(interpret, "check_kernel_source"):
        exe = aotc.load(data, device="interpret")
    with np.load(GOLDEN_NPZ) as npz:
        z = dict(npz)
    with pytest.raises(ArtifactError) as info:
        exe(x=z["in_x"], ids=z["in_ids"])
    _refusal(info.value, line)
    assert not marker.exists()
