"""The two cpu paths for the tests: the numpy references and onnxruntime over the artifact's ONNX model.

``executable(source, path)`` loads artifact bytes (or a read Artifact) on one of them. An artifact that stores no
ONNX model (as the runtime tests' hand-built graphs, written without the compiler) gets the one the compiler
would store, so the same files run on both paths.
"""

from __future__ import annotations

from typing import Any

import pytest

import aotc.runtime
from aotc.artifact.reader import Artifact, read_artifact
from aotc.onnx.runtime_model import runtime_onnx
from aotc.runtime.backends import stored_onnx

PATHS = ("reference", "onnxruntime")


def executable(source: bytes | Artifact, path: str, **options: Any) -> aotc.runtime.Executable:
    if path == "reference":
        return aotc.runtime.load(source, device="reference")
    pytest.importorskip("onnxruntime")
    from aotc.runtime.backends.onnxrt import OrtBackend

    artifact = source if isinstance(source, Artifact) else read_artifact(source)
    model = stored_onnx(artifact)
    if model is None:
        graph = artifact.source if artifact.source is not None else artifact.variants[0]
        made = runtime_onnx(graph)
        assert made.model is not None, made.note
        model = made.model
    return aotc.runtime.Executable(artifact, OrtBackend(model, artifact.constants, **options))
