"""A file whose kernel table holds Python the product's codegen does not write is refused, and that code never runs:
the writer will not write it, the reader refuses it (ArtifactError naming the kernel and the line), ``aotc run
--device interpret`` exits 1 with one line, and should a file reach the interpret backend without the reader's
check, the backend checks the source again before it compiles anything."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from click.testing import CliRunner
from kernel_kit import golden_model, unchecked, write

import aotc
from aotc.artifact import code_checks, read_artifact
from aotc.errors import ArtifactError
from aotc.ir.digest import seal
from aotc.ir.schedule import Schedule
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
def test_writer_and_reader_refuse_and_nothing_runs(tmp_path: Path, label: str) -> None:
    marker = tmp_path / "payload-ran"
    source, line = _payloads(str(marker))[label]
    _, variant, schedule = golden_model()
    bad = _with_source(schedule, source)
    with pytest.raises(ArtifactError) as info:
        write(variant, bad)
    _refusal(info.value, line)
    with unchecked():
        data = write(variant, bad)
    with pytest.raises(ArtifactError) as info:
        read_artifact(data)
    _refusal(info.value, line)
    with pytest.raises(ArtifactError) as info:
        aotc.load(data, device="interpret")
    _refusal(info.value, line)
    assert not marker.exists()


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
    assert result.stderr.startswith("error: invalid artifact ")
    assert f"kernel k0_reduction_sum: its source line {line} (`" in result.stderr, result.stderr
    assert not marker.exists()


@pytest.mark.parametrize("label", PAYLOADS)
def test_the_interpret_backend_checks_what_the_reader_let_through(tmp_path: Path, label: str) -> None:
    """With the reader's source check switched off, the file loads, and its first call is refused before any of
    the kernel's code runs."""
    pytest.importorskip("triton")
    marker = tmp_path / "payload-ran"
    source, line = _payloads(str(marker))[label]
    _, variant, schedule = golden_model()
    with unchecked():
        data = write(variant, _with_source(schedule, source))
    with mock.patch.object(code_checks, "check_kernel_source"):
        art = read_artifact(data)
    exe = aotc.load(art, device="interpret")
    with np.load(GOLDEN_NPZ) as npz:
        z = dict(npz)
    with pytest.raises(ArtifactError) as info:
        exe(x=z["in_x"], ids=z["in_ids"])
    _refusal(info.value, line)
    assert not marker.exists()
