"""A Triton Inference Server model repository for an artifact (``aotc export-triton``).

Writes ``REPO/NAME/config.pbtxt`` (inputs and outputs with Triton datatypes, -1 for dynamic dims, and, when
every input and output has the batch dim first, ``max_batch_size`` from that dim's maximum with
``dynamic_batching``), ``REPO/NAME/1/model.py`` (a python-backend ``TritonPythonModel`` that loads the artifact
with ``aotc.runtime`` and runs each group of same-shaped requests as one call) and the artifact itself as
``REPO/NAME/1/model.aotc``. The Triton server's Python environment needs aotc's runtime (``pip install aotc``:
numpy, flatbuffers, xxhash; ``aotc[cuda]`` for GPU instances). Imports the runtime only.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from aotc.serve.signature import Signature, Tensor

ARTIFACT_FILE = "model.aotc"
TRITON_DATATYPE = {"FP32": "TYPE_FP32", "FP16": "TYPE_FP16", "BF16": "TYPE_BF16", "INT32": "TYPE_INT32",
                   "INT64": "TYPE_INT64", "BOOL": "TYPE_BOOL"}  # fmt: skip

MODEL_PY = '''"""Triton Inference Server python backend for an aotc artifact; written by `aotc export-triton`.

Loads model.aotc (beside this file) once per model instance with aotc's runtime, on the instance's GPU for a
KIND_GPU instance, else on the cpu backend. Requests of one execute() call that share every non-batch dim run
as one call along the batch dim; a request the model refuses gets aotc's message as an INVALID_ARG error.
"""

import json
import os

import triton_python_backend_utils as pb_utils

from aotc.errors import AotcError
from aotc.runtime import load
from aotc.serve.batching import BatchAxes, group, run_grouped
from aotc.serve.signature import Signature


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        gpu = args.get("model_instance_kind") == "GPU"
        device = f"cuda:{args['model_instance_device_id']}" if gpu else params.get("aotc_device") or "cpu"
        here = os.path.join(args["model_repository"], args["model_version"])
        # spin=False: a server's cores belong to the next requests between calls (see aotc.serve.model)
        self.exe = load(os.path.join(here, params["aotc_artifact"]), device=device, spin=False)
        self.signature = Signature.of(self.exe)
        self.max_batch = int(config.get("max_batch_size", 0))
        self.axes = BatchAxes.of(self.signature) if self.max_batch > 0 else None

    def execute(self, requests):
        feeds = [
            {t.name: pb_utils.get_input_tensor_by_name(r, t.name).as_numpy() for t in self.signature.inputs}
            for r in requests
        ]
        if self.axes is None:
            batches = [[i] for i in range(len(requests))]
        else:
            batches = group(self.axes, feeds, self.max_batch, self._fits)
        responses = [None] * len(requests)
        for batch in batches:
            results = run_grouped(self.exe.run, self.axes, [feeds[i] for i in batch])
            for i, result in zip(batch, results):
                responses[i] = self._response(result)
        return responses

    def _fits(self, feeds):
        self.exe.check(feeds)

    def _response(self, result):
        if isinstance(result, BaseException):
            code = getattr(pb_utils.TritonError, "INVALID_ARG" if isinstance(result, AotcError) else "INTERNAL", None)
            message = " ".join(str(result).split())
            error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        tensors = [pb_utils.Tensor(t.name, a) for t, a in zip(self.signature.outputs, result)]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def finalize(self):
        self.exe.close()
'''


def write_repository(
    artifact: str | os.PathLike[str],
    repo: str | os.PathLike[str],
    *,
    name: str | None = None,
    max_batch: int | None = None,
    device: str | None = None,
    instances: int = 1,
    queue_delay_us: int = 0,
) -> Path:
    """Write ``repo/name`` for ``artifact`` and return that folder. ``max_batch`` caps ``max_batch_size`` (None:
    the batch dim's maximum; 0: no batching); ``device`` ("cpu" or "cuda") fixes the instance kind (None: Triton's
    default, a GPU instance per GPU when there are GPUs)."""
    from aotc.runtime import load

    source = Path(artifact)
    name = name or source.stem
    exe = load(source, device="cpu")  # read for its signature only
    try:
        sig = Signature.of(exe)
    finally:
        exe.close()
    batch = _max_batch_size(sig, max_batch)
    folder = Path(repo) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config_pbtxt(sig, name, batch, device, instances, queue_delay_us, source.name))
    (folder / "1" / "model.py").write_text(MODEL_PY)
    shutil.copyfile(source, folder / "1" / ARTIFACT_FILE)
    return folder


def _max_batch_size(sig: Signature, asked: int | None) -> int:
    """The batch dim's maximum (capped by ``asked``) when every tensor has the batch dim first, as Triton
    requires of a batching model; else 0."""
    if sig.batch is None or asked == 0:
        return 0
    if any(t.batch_axis != 0 for t in (*sig.inputs, *sig.outputs)):
        return 0
    return sig.batch.max if asked is None else max(0, min(asked, sig.batch.max))


def config_pbtxt(
    sig: Signature, name: str, max_batch: int, device: str | None, instances: int, queue_delay_us: int, source: str
) -> str:
    lines = [
        f"# Written by `aotc export-triton` from {source}. Dims: "
        + (", ".join(str(d) for d in sig.dims) or "none (every dim is static)"),
        f"name: {_quote(name)}",
        'backend: "python"',
        f"max_batch_size: {max_batch}",
        "input [",
        ",\n".join(_tensor(t, max_batch) for t in sig.inputs),
        "]",
        "output [",
        ",\n".join(_tensor(t, max_batch) for t in sig.outputs),
        "]",
    ]
    if max_batch:
        lines += ["dynamic_batching {", f"  max_queue_delay_microseconds: {queue_delay_us}", "}"]
    if device is not None:
        kind = "KIND_GPU" if device.startswith("cuda") else "KIND_CPU"
        lines += ["instance_group [", "  {", f"    count: {instances}", f"    kind: {kind}", "  }", "]"]
    lines += _parameter("aotc_artifact", ARTIFACT_FILE)
    if device is not None:
        lines += _parameter("aotc_device", "cpu" if not device.startswith("cuda") else device)
    return "\n".join(lines) + "\n"


def _tensor(t: Tensor, max_batch: int) -> str:
    shape = t.shape[1:] if max_batch else t.shape
    lines = ["  {", f"    name: {_quote(t.name)}", f"    data_type: {TRITON_DATATYPE[t.datatype]}"]
    if shape:
        lines.append(f"    dims: [ {', '.join(str(d) for d in shape)} ]")
    else:  # Triton has no empty dims: a scalar travels as [1], reshaped to []
        lines += ["    dims: [ 1 ]", "    reshape: { shape: [ ] }"]
    return "\n".join([*lines, "  }"])


def _parameter(key: str, value: str) -> list[str]:
    return ["parameters: {", f"  key: {_quote(key)}", f"  value: {{ string_value: {_quote(value)} }}", "}"]


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # JSON's escapes of ", \\ and control characters are text format's
