"""The two cpu paths for the tests: the numpy references and onnxruntime over the artifact's verified graphs.

``executable(source, path)`` loads artifact bytes (or a read Artifact) on one of them, the same files on both (the
onnxruntime backend writes each variant graph as ONNX itself, so a file needs no stored model).
"""

from __future__ import annotations

from typing import Any

import pytest

import aotc.runtime
from aotc.artifact.reader import Artifact, read_artifact

PATHS = ("reference", "onnxruntime")


def executable(source: bytes | Artifact, path: str, **options: Any) -> aotc.runtime.Executable:
    if path == "reference":
        return aotc.runtime.load(source, device="reference")
    pytest.importorskip("onnxruntime")
    from aotc.runtime.backends.onnxrt import OrtBackend, OrtProgram

    artifact = source if isinstance(source, Artifact) else read_artifact(source)
    exe = aotc.runtime.Executable(artifact, OrtBackend(artifact.constants, **options))
    assert all(isinstance(program, OrtProgram) for _, program in exe._variants), "a variant has no ONNX form"
    return exe
