"""README and .ci/run stay in step, and the README's model-file example works as printed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import aotc
from aotc_cli.loader import load_model

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def marked_command(marker: str) -> str:
    """The one-line command in the ```sh block right after ``<!-- marker -->`` in the README."""
    match = re.search(rf"<!-- {marker} -->\s*```sh\n(.+?)\n```", README)
    assert match, f"README has no {marker} block"
    return match.group(1)


@pytest.mark.parametrize("marker", ["test-command", "quickstart-command"])
def test_ci_runs_the_readme_commands_verbatim(marker: str) -> None:
    command = marked_command(marker)
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command in [line.strip() for line in ci_lines]


def test_readme_test_command_runs_pytest_on_the_repo() -> None:
    command = marked_command("test-command")
    assert ".[dev]" in command and command.endswith("-m pytest -q")


def test_ci_script_is_strict_bash() -> None:
    text = (ROOT / ".ci" / "run").read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert "ruff check ." in text and "ruff format --check ." in text
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111


def test_readme_model_file_example(tmp_path: Path) -> None:
    section = README[README.index("## Model files") :]
    code = re.search(r"```python\n(.+?)```", section, re.S).group(1)
    path = tmp_path / "readme_mlp.py"
    path.write_text(code)
    model, inputs = load_model(path)
    compiled = aotc.compile(model, inputs)
    x = np.random.default_rng(0).standard_normal((3, 32)).astype(np.float32)
    sd = {k: np.asarray(v, np.float64) for k, v in model.state_dict().items()}
    expected = np.maximum(x @ sd["fc1.weight"].T + sd["fc1.bias"], 0) @ sd["fc2.weight"].T + sd["fc2.bias"]
    np.testing.assert_allclose(compiled(x=x), expected, rtol=1e-4, atol=1e-5)


def test_readme_python_api_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    section = README[README.index("## Python API") :]
    code = re.search(r"```python\n(.+?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)  # it saves block.aotc in the current folder
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["y"].shape == (2, 7, 256) and namespace["y2"].shape == (3, 100, 256)
    assert (tmp_path / "block.aotc").is_file()


def _extra(extras: dict[str, list[str]], name: str) -> set[str]:
    """The requirement names an extra installs, through the extras it names (``aotc[compiler]``)."""
    out: set[str] = set()
    for req in extras[name]:
        nested = re.fullmatch(r"aotc\[([\w,]+)\]", req)
        if nested:
            for n in nested.group(1).split(","):
                out |= _extra(extras, n)
        else:
            out.add(re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower())
    return out


def test_the_quick_start_installs_the_cpu_engine_and_the_torch_extra_leaves_torchvision_out() -> None:
    """The quick start's `aotc run` picks device='cpu' on a machine without a GPU: with onnxruntime installed it
    runs there without the warning that it fell back to the numpy references. The torch extra installs torch
    alone: a torchvision there broke transformers (it imports torchvision whenever one is installed)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    install = re.search(r"pip install -e '\.\[([\w,]+)\]'", marked_command("quickstart-command"))
    assert install, marked_command("quickstart-command")
    installed = set().union(*(_extra(extras, n) for n in install.group(1).split(",")))
    assert {"onnxruntime", "triton", "onnx"} <= installed
    assert "torch" in _extra(extras, "torch") and "torchvision" not in _extra(extras, "torch")
    assert "torchvision" in _extra(extras, "test")
