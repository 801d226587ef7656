"""``import aotc.runtime`` (and loading and running an artifact) pulls in no compiler-side package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "v1_mlp.aotc"
FORBIDDEN = (
    "triton",
    "torch",
    "onnx",
    "onnxruntime",
    "click",
    "hypothesis",
    "ml_dtypes",
    "aotc.frontend",
    "aotc.lowering",
    "aotc.onnx",
    "aotc.artifact.writer",
    "aotc.artifact.encode",
    "aotc_cli",
)

SCRIPT = """
import json, sys
import numpy as np
import aotc.runtime
after_import = sorted(sys.modules)
exe = aotc.runtime.load(sys.argv[1])
z = np.load(sys.argv[1][:-5] + ".npz")
exe(**{k[3:]: z[k] for k in z.files if k.startswith("in_")})
print(json.dumps([after_import, sorted(sys.modules)]))
"""


def test_runtime_imports_nothing_from_the_compiler() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(GOLDEN)], capture_output=True, text=True, check=True)
    for stage, modules in zip(("import", "load and run"), json.loads(out.stdout)):
        bad = [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
        assert not bad, f"after {stage}, aotc.runtime pulled in {bad}"
