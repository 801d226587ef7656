"""``import aotc.runtime`` (and loading and running an artifact) pulls in no compiler-side package: the cpu backend
writes its onnxruntime model with aotc.ir.onnx_form, never the onnx package. onnxruntime itself loads only with the
cpu backend, and the interpret backend imports triton only when its first kernel launches."""

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
    "click",
    "hypothesis",
    "ml_dtypes",
    "aotc.frontend",
    "aotc.lowering",
    "aotc.onnx",
    "aotc.artifact.writer",
    "aotc.artifact.encode",
    "aotc_cli",
    # signatures: only when trusted_keys are given (tests/artifact/test_artifact_signing.py loads a signed file)
    "cryptography",
    "blake3",
    "aotc.artifact.signing",
)

SCRIPT = """
import json, sys
import numpy as np
import aotc.runtime
after_import = sorted(sys.modules)
exe = aotc.runtime.load(sys.argv[1])
z = np.load(sys.argv[1][:-5] + ".npz")
exe(**{k[3:]: z[k] for k in z.files if k.startswith("in_")})
after_run = sorted(sys.modules)
import aotc.runtime.backends.interpret
import aotc.runtime.backends.triton_interp
from aotc.errors import UnsupportedError
try:
    aotc.runtime.load(sys.argv[1], device="interpret")  # no kernels in a v1 file: refused before any launch
except UnsupportedError:
    pass
after_interpret = sorted(sys.modules)
try:
    aotc.runtime.load(sys.argv[1], device="cuda")  # no cuda-bindings, no GPU, or no kernels: refused
except UnsupportedError:
    pass
print(json.dumps([after_import, after_run, after_interpret, sorted(sys.modules)]))
"""

# The CUDA driver bindings load on first cuda use only; onnxruntime (the cpu backend's engine) on the first load.
DRIVER = ("cuda", "aotc.runtime.backends.cuda")
ENGINE = ("onnxruntime",)


def test_runtime_imports_nothing_from_the_compiler() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(GOLDEN)], capture_output=True, text=True, check=True)
    stages = ("import", "load and run", "loading the interpret backend", "asking for the cuda backend")
    for i, (stage, modules) in enumerate(zip(stages, json.loads(out.stdout), strict=True)):
        forbidden = FORBIDDEN + (DRIVER if i < 3 else ()) + (ENGINE if i == 0 else ())
        bad = [m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden)]
        assert not bad, f"after {stage}, aotc.runtime pulled in {bad}"
