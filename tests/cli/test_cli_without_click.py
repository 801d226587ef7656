"""The model loader and the feed builder import without click: the GPU check scripts use them on machines
that have only what the runtime and the compiler need (defect 7 of the first-GPU-run issue)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# None in sys.modules makes any `import click` raise ImportError, as on a machine without it.
SCRIPT = """
import sys
sys.modules["click"] = None
from aotc_cli.feeds import choose_dims, random_array
from aotc_cli.loader import import_file
model, inputs = import_file(sys.argv[1]).build()
print(sorted(inputs), "click" in sys.modules and sys.modules["click"] is not None)
"""


def test_loader_and_feeds_import_without_click() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "models" / "mlp.py")], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["['x']", "False"]
