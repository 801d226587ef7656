"""What a runtime-only install (``pip install aotc``: numpy, flatbuffers, xxhash, click) can do: ``aotc inspect``
and ``aotc run`` work, and what needs an extra is refused in one line naming the extra to install (issue 19 item 9).
Each case runs in a fresh interpreter where every extra's packages are unimportable, as on such a machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "v5_mlp.aotc"
PROGRESS = re.compile(r"\s*.+\.\.\. done \(\d+\.\d+s\)")  # aotc/progress.py's line for a stage that took a while
# the packages of every extra (compiler, interpret, cuda, torch, sign, serve, cpu); None in sys.modules makes
# their import fail as if they were not installed
EXTRAS = ("triton", "torch", "onnx", "onnxruntime", "ml_dtypes", "cuda", "cryptography", "blake3", "kserve", "ray")
SCRIPT = f"""
import sys
for name in {EXTRAS!r}:
    sys.modules[name] = None
import importlib.util
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in {EXTRAS!r} else _find_spec(name, *a)
from importlib import metadata
_version = metadata.version
def version(name):
    if name in {EXTRAS!r}:
        raise metadata.PackageNotFoundError(name)
    return _version(name)
metadata.version = version
from aotc_cli.main import main
sys.argv = ["aotc", *sys.argv[1:]]
main()
"""


def _aotc(*args: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("AOTC_TARGETS", None)  # the tests' "none" skips the kernel compile
    if cache is not None:
        env["AOTC_CACHE_DIR"] = str(cache)  # an empty kernel cache: every kernel must compile
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env
    )


def test_inspect_and_run_work_without_any_extra() -> None:
    proc = _aotc("inspect", str(GOLDEN))
    assert proc.returncode == 0, proc.stderr
    assert "golden_mlp" in proc.stdout
    proc = _aotc("run", str(GOLDEN), "--random", "--dim", "batch=2", "--dim", "seq=4")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("run", str(GOLDEN), "--random", "--device", "interpret"), "aotc[interpret]"),
        (("compile", str(ROOT / "models" / "mlp.py"), "-o", "/dev/null"), "aotc[compiler]"),
    ],
)
def test_what_needs_an_extra_says_which_in_one_line(args: tuple[str, ...], extra: str, tmp_path: Path) -> None:
    proc = _aotc(*args, cache=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    # a stage past the progress threshold (a loaded machine) says so in its own line first: the error is one line
    lines = [line for line in proc.stderr.strip().splitlines() if not PROGRESS.fullmatch(line)]
    assert len(lines) == 1 and extra in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_interpret_without_triton_is_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import aotc
    from aotc.errors import UnsupportedError

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else find_spec(name, *a))
    with pytest.raises(UnsupportedError, match=r"device 'interpret' .* pip install 'aotc\[interpret\]'"):
        aotc.load(GOLDEN, device="interpret")
