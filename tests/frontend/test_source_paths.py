"""Source locations name files relative to their project, so an artifact does not depend on where the checkout
lives, where the compiler was started or how the model's path was spelled."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from aotc.frontend.source_paths import source_path
from aotc_cli.main import cli

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"

# A model that spreads its layers over two files, so locations in a neighbouring module are covered too.
_LAYERS = """
import aotc.functional as F
from aotc import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        return F.gelu(self.fc(x)) + x
"""
_MODEL = """
import numpy as np
from layers import Block

from aotc import Dim, TensorSpec, nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.head = Block(), nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.block(x).relu())


def build():
    model = Net()
    rng = np.random.default_rng(0)
    model.load_state_dict({k: rng.normal(0, 0.1, v.shape).astype(np.float32) for k, v in model.state_dict().items()})
    return model, {"x": TensorSpec((Dim("batch", min=1, max=16), 32), "float32")}
"""


def _checkout(root: Path) -> Path:
    (root / "models").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'user-models'\n")
    (root / "models" / "layers.py").write_text(_LAYERS)
    (root / "models" / "net.py").write_text(_MODEL)
    shutil.copy(MODELS_DIR / "mlp.py", root / "models" / "mlp.py")
    return root


@pytest.mark.parametrize("model", ["net.py", "mlp.py"])
def test_two_checkouts_compile_to_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    first = _checkout(tmp_path / "home" / "ci" / "build")
    second = _checkout(tmp_path / "srv" / "another" / "checkout")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    outputs = []
    for root, spelled in ((first, first / "models" / model), (second, second / "models" / ".." / "models" / model)):
        out = tmp_path / f"{root.name}-{model}.aotc"
        result = CliRunner().invoke(cli, ["compile", str(spelled), "-o", str(out), "--target", "sm_80"])
        assert result.exit_code == 0, result.output
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    for data in outputs:
        assert str(tmp_path).encode() not in data
    assert f"models/{model}:".encode() in outputs[0]
    if model == "net.py":  # the neighbouring file is named from the same project root
        assert b"models/layers.py:" in outputs[0]


def test_paths_are_named_from_their_project(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "src" / "pkg").mkdir(parents=True)
    (project / ".git").mkdir()
    assert source_path(str(project / "src" / "pkg" / "model.py")) == "src/pkg/model.py"
    # Inside an installed package: named from site-packages, whatever the environment's path.
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "transformers" / "models").mkdir(parents=True)
    assert source_path(str(site / "transformers" / "models" / "gpt2.py")) == "transformers/models/gpt2.py"
    # No project marker anywhere above: the file's own folder is its project.
    loose = tmp_path / "loose"
    loose.mkdir()
    assert source_path(str(loose / "notebook.py")) == "notebook.py"
    assert source_path("<stdin>") == "<stdin>"
