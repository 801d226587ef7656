"""What the serving modules import: the pieces a Triton python backend imports (signature, batching, codec, the
repository writer) need the runtime and numpy alone, and ``import aotc.runtime`` never pulls in a server."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
import aotc.runtime
after_runtime = sorted(sys.modules)
import aotc.serve.batching, aotc.serve.codec, aotc.serve.signature, aotc.serve.triton_repo
print(json.dumps([after_runtime, sorted(sys.modules)]))
"""
SERVERS = ("kserve", "ray", "fastapi", "uvicorn", "grpc", "tritonclient", "prometheus_client")
COMPILER = ("aotc.frontend", "aotc.lowering", "aotc.kernels", "aotc.onnx", "aotc.compiler", "triton", "torch", "onnx")


def test_serving_pieces_for_triton_import_the_runtime_only() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    after_runtime, after_serve = json.loads(out.stdout)
    for stage, modules, forbidden in (
        ("import aotc.runtime", after_runtime, (*SERVERS, *COMPILER, "aotc.serve")),
        ("import aotc.serve's numpy-only modules", after_serve, (*SERVERS, *COMPILER)),
    ):
        bad = [m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden)]
        assert not bad, f"{stage} pulled in {bad}"
