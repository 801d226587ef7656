"""The compile driver lives in aotc/compiler.py; the frontend alone pulls in no later layer."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

import aotc
import aotc.compiler
from aotc import Dim, TensorSpec


def test_frontend_imports_no_later_layer() -> None:
    code = (
        "import sys, aotc, aotc.nn, aotc.functional\n"
        "from aotc.frontend.trace import trace\n"
        "from aotc import Dim, TensorSpec\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('aotc.lowering', 'aotc.artifact', 'aotc.runtime',"
        " 'aotc.compiler', 'aotc.kernels')))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_public_compile_is_the_driver() -> None:
    assert aotc.compile is aotc.compiler.compile and aotc.CompiledModel is aotc.compiler.CompiledModel

    def double_plus_one(x):
        return x * 2 + 1

    stages: list[str] = []
    n = Dim("n", min=1, max=16)
    compiled = aotc.compile(double_plus_one, {"x": TensorSpec((n,), "float32")}, progress=stages.append)
    assert stages[0] == "trace" and stages[-1] == "write artifact" and "decompose" in stages
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(compiled(x=x), x * 2 + 1)
    assert repr(compiled).startswith("CompiledModel('double_plus_one'")
