"""The slim runtime: load, verify, run (servers and the compiler import it; imports aotc.ir and aotc.artifact).

The slim runtime: ``load(path)`` verifies an artifact and returns an ``Executable``.

Imports numpy, flatbuffers, aotc.ir and the artifact reader only; never the frontend, lowering,
triton, torch or onnx (tests/runtime/test_runtime_slim.py checks this).
"""

from aotc.runtime.executable import Executable, load
from aotc.runtime.guards import InputSpec

__all__ = ["Executable", "InputSpec", "load"]
