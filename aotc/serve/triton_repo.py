"""A Triton Inference Server model repository for an artifact (``aotc export-triton``).

Writes ``REPO/NAME/config.pbtxt`` (inputs and outputs with Triton datatypes, -1 for dynamic dims, and, when
every input and output has the batch dim first, ``max_batch_size`` from that dim's maximum with
``dynamic_batching``), ``REPO/NAME/1/model.py`` (a python-backend ``TritonPythonModel`` that loads the artifact
with ``aotc.runtime`` and runs each group of same-shaped requests as one call) and the artifact itself as
``REPO/NAME/1/model.aotc``. The Triton server's Python environment needs aotc's runtime (``pip install aotc``:
numpy, flatbuffers, xxhash; ``aotc[cuda]`` for GPU instances). Imports the runtime only.

An artifact that keeps state across calls (a decoder's KV cache) gets ``sequence_batching`` instead (no batching):
Triton's sequence batcher routes a sequence's requests to one instance in order and passes each request's
correlation id and start and end flags as the control inputs ``AOTC_SEQUENCE_ID``, ``AOTC_SEQUENCE_START`` and
``AOTC_SEQUENCE_END``; the model keeps one aotc Session per correlation id (opened or reset on a start, closed after
an end or when idle as long as the batcher's ``max_sequence_idle_microseconds``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from aotc.serve.signature import Signature, Tensor

ARTIFACT_FILE = "model.aotc"
# How long Triton keeps an idle sequence (and the model its session): 10 minutes, as aotc serve's default.
SEQUENCE_IDLE_US = 600_000_000
TRITON_DATATYPE = {"FP32": "TYPE_FP32", "FP16": "TYPE_FP16", "BF16": "TYPE_BF16", "INT32": "TYPE_INT32",
                   "INT64": "TYPE_INT64", "BOOL": "TYPE_BOOL"}  # fmt: skip

MODEL_PY = '''"""Triton Inference Server python backend for an aotc artifact; written by `aotc export-triton`.

Loads model.aotc (beside this file) once per model instance with aotc's runtime, on the instance's GPU for a
KIND_GPU instance, else on the cpu backend. Requests of one execute() call that share every non-batch dim run
as one call along the batch dim; a request the model refuses gets aotc's message as an INVALID_ARG error.
"""

import json
import os
import time

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
        # a model with state: one aotc Session per sequence (correlation id), see sequence_batching in config.pbtxt
        idle_us = config.get("sequence_batching", {}).get("max_sequence_idle_microseconds", 600_000_000)
        self.idle_s = int(idle_us) / 1e6
        self.sessions = {}  # correlation id -> [session, last used]

    def execute(self, requests):
        if self.exe.stateful:
            return [self._in_sequence(r) for r in requests]
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

    def _in_sequence(self, request):
        control = {n: pb_utils.get_input_tensor_by_name(request, f"AOTC_SEQUENCE_{n}").as_numpy().item()
                   for n in ("ID", "START", "END")}
        now = time.monotonic()
        for cid, (session, used) in list(self.sessions.items()):
            if now - used > self.idle_s:
                session.close()
                del self.sessions[cid]
        live = self.sessions.get(control["ID"])
        try:
            if live is None:
                if not control["START"]:
                    raise AotcError(f"no live sequence {control['ID']} (a sequence starts with its start flag)")
                live = self.sessions[control["ID"]] = [self.exe.session(), now]
            elif control["START"]:
                live[0].reset()
            live[1] = now
            feeds = {t.name: pb_utils.get_input_tensor_by_name(request, t.name).as_numpy() for t in self.signature.inputs}
            result = live[0].run(feeds)
        except Exception as e:
            result = e
        if control["END"] and control["ID"] in self.sessions:
            self.sessions.pop(control["ID"])[0].close()
        return self._response(result)

    def _response(self, result):
        if isinstance(result, BaseException):
            code = getattr(pb_utils.TritonError, "INVALID_ARG" if isinstance(result, AotcError) else "INTERNAL", None)
            message = " ".join(str(result).split())
            error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        tensors = [pb_utils.Tensor(t.name, a) for t, a in zip(self.signature.outputs, result)]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def finalize(self):
        for session, _ in self.sessions.values():
            session.close()
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
        stateful = exe.stateful
    finally:
        exe.close()
    batch = 0 if stateful else _max_batch_size(sig, max_batch)
    folder = Path(repo) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    config = config_pbtxt(sig, name, batch, device, instances, queue_delay_us, source.name, stateful=stateful)
    (folder / "config.pbtxt").write_text(config)
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
    sig: Signature,
    name: str,
    max_batch: int,
    device: str | None,
    instances: int,
    queue_delay_us: int,
    source: str,
    *,
    stateful: bool = False,
    idle_us: int = SEQUENCE_IDLE_US,
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
    if stateful:
        lines += _sequence_batching(idle_us)
    if device is not None:
        kind = "KIND_GPU" if device.startswith("cuda") else "KIND_CPU"
        lines += ["instance_group [", "  {", f"    count: {instances}", f"    kind: {kind}", "  }", "]"]
    lines += _parameter("aotc_artifact", ARTIFACT_FILE)
    if device is not None:
        lines += _parameter("aotc_device", "cpu" if not device.startswith("cuda") else device)
    return "\n".join(lines) + "\n"


def _sequence_batching(idle_us: int) -> list[str]:
    """The sequence batcher's section: the correlation id and the start and end flags as control inputs."""

    def control(name: str, kind: str, value: str) -> str:
        return f'    {{ name: "{name}" control [ {{ kind: {kind} {value} }} ] }}'

    return [
        "sequence_batching {",
        f"  max_sequence_idle_microseconds: {idle_us}",
        "  control_input [",
        ",\n".join(
            [
                control("AOTC_SEQUENCE_START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 1 ]"),
                control("AOTC_SEQUENCE_END", "CONTROL_SEQUENCE_END", "int32_false_true: [ 0, 1 ]"),
                control("AOTC_SEQUENCE_ID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_UINT64"),
            ]
        ),
        "  ]",
        "}",
    ]


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
