"""``AotcModel``: one artifact as a KServe model, served over the Open Inference Protocol (v2).

It loads the artifact once with the slim runtime (``aotc.runtime.load``, with ``spin=False``; ``load_options``
are passed through, so an option such as trusted signing keys reaches the loader unchanged), describes it in v2
metadata (see ``signature.py``), checks each request against the artifact before reading its data (``codec.py``)
and runs it through the dynamic batcher (``batching.py``) or, with batching off, straight on a worker thread. Anything aotc
refuses (an ``AotcError``: unknown input, wrong dtype or rank, a dim outside its range or guard, a bad token id)
becomes ``InvalidInput``, HTTP 400 / gRPC INVALID_ARGUMENT, carrying aotc's message on one line; anything else
is an ``InternalError`` (HTTP 500 / gRPC INTERNAL) naming the model and the request, logged with its traceback,
and the server goes on serving. The Ray Serve deployment (``ray_serve.py``) is this class too. An artifact that keeps
state across calls (a decoder's KV cache) is served by sequence instead of batched: one Session per ``sequence_id``
(``sequences.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
from prometheus_client import Counter, Histogram

from aotc.errors import AotcError
from aotc.serve import codec
from aotc.serve._sdk import InferOutput, InferRequest, InferResponse, InvalidInput, Model
from aotc.serve.batching import BatchAxes, Batcher, Feeds, Outputs
from aotc.serve.sequences import Sequences, sequence_params
from aotc.serve.signature import Signature

log = logging.getLogger("kserve.aotc")  # under the SDK's logger: its format, level and handlers

MODEL_CALLS = Counter("aotc_model_calls", "Calls of the model (a batch counts once)", ["model"])
BATCH_ROWS = Histogram(
    "aotc_batch_rows", "Rows along the batch dim per model call", ["model"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256)
)

_request_numbers = itertools.count(1)


class InternalError(RuntimeError):
    """A request failed inside the server for a reason other than its inputs (HTTP 500, gRPC INTERNAL)."""


def one_line(e: BaseException) -> str:
    """aotc's message on one line (a refusal by a multi-variant artifact lists one line per variant)."""
    return " ".join(line.strip() for line in str(e).splitlines() if line.strip())


class AotcModel(Model):
    """An artifact served under ``name``. ``max_batch`` caps the rows of one batched call (None: the batch dim's
    maximum; 1: batching off); with ``adaptive_batch`` a batch takes at most the size that has served rows of its
    shape fastest (``batch_size.py``); ``batch_timeout_ms`` is how long an idle model waits for a batch to fill;
    ``batch_dim`` names the batch dim when the first dynamic dim of the inputs is not it."""

    def __init__(
        self,
        name: str,
        path: str | os.PathLike[str],
        *,
        device: str | None = None,
        max_batch: int | None = None,
        batch_timeout_ms: float = 0.0,
        batch_dim: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        adaptive_batch: bool = True,
        max_sequences: int = 64,
        sequence_idle_s: float = 600.0,
    ) -> None:
        super().__init__(name)
        self.max_sequences = max_sequences
        self.sequence_idle_s = sequence_idle_s
        self.sequences: Sequences | None = None  # a stateful artifact's live sessions
        self.path = os.fspath(path)
        self.device = device
        self.max_batch_option = max_batch
        self.adaptive_batch = adaptive_batch
        self.batch_timeout_ms = batch_timeout_ms
        self.batch_dim = batch_dim
        self.load_options = dict(load_options or {})
        self.exe: Any = None
        self.signature: Signature | None = None
        self.axes: BatchAxes | None = None
        self.max_batch = 1
        self._batcher: Batcher | None = None
        self.response_parameters: dict[str, Any] | None = None  # added to every response (Ray: the replica)

    # A model crosses process boundaries (KServe's --workers processes, Ray replicas) as its settings and loads
    # its artifact again there; an Executable holds mapped memory and device state that must not be copied.
    def __getstate__(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "device": self.device,
            "max_batch": self.max_batch_option,
            "batch_timeout_ms": self.batch_timeout_ms,
            "batch_dim": self.batch_dim,
            "load_options": self.load_options,
            "adaptive_batch": self.adaptive_batch,
            "max_sequences": self.max_sequences,
            "sequence_idle_s": self.sequence_idle_s,
            "loaded": self.ready,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        loaded = state.pop("loaded")
        AotcModel.__init__(self, **state)
        if loaded:
            self.load()

    # -- loading -----------------------------------------------------------------------------------------------
    def load(self) -> bool:
        from aotc.runtime import load

        # spin=False: onnxruntime's threads would spin on their cores after each call, time that in a server belongs
        # to decoding the next requests (a load option may still ask for it).
        exe = load(self.path, device=self.device, **({"spin": False} | self.load_options))
        sig = Signature.of(exe, self.batch_dim)
        self.exe, self.signature, self.axes = exe, sig, BatchAxes.of(sig)
        self.max_batch = 1 if exe.stateful else self._max_batch(sig)
        if exe.stateful:
            self.sequences = Sequences(
                exe.session, self.name, max_sequences=self.max_sequences, idle_timeout_s=self.sequence_idle_s
            )
        if self.axes is not None and self.max_batch > 1:
            self._batcher = Batcher(
                self._call,
                self.axes,
                max_batch=self.max_batch,
                timeout_s=self.batch_timeout_ms / 1e3,
                check=exe.check,
                adaptive=self.adaptive_batch,
            )
        else:
            self._batcher = None
        self.ready = True
        batching = (
            f"one session per sequence_id (at most {self.max_sequences} live, {self.sequence_idle_s:g} s idle)"
            if self.sequences is not None
            else f"batching up to {self.max_batch} along {sig.batch.name!r}"
            + (" (the size measured fastest per request shape)" if self.adaptive_batch else "")
            if self._batcher and sig.batch
            else (f"batching off ({sig.batch_note})" if sig.batch_note else "batching off")
        )
        log.info("loaded %r from %s on %s (pid %d): %s", self.name, self.path, exe.device, os.getpid(), batching)
        return True

    def _max_batch(self, sig: Signature) -> int:
        if sig.batch is None:
            return 1
        want = sig.batch.max if self.max_batch_option is None else self.max_batch_option
        return max(1, min(want, sig.batch.max))

    def stop(self) -> None:
        self.ready = False
        if self.sequences is not None:
            self.sequences.close()
        if self.exe is not None:
            self.exe.close()

    # -- metadata ----------------------------------------------------------------------------------------------
    def get_input_types(self) -> list[dict[str, Any]]:
        return [_plain(t.metadata()) for t in self._sig.inputs]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [_plain(t.metadata()) for t in self._sig.outputs]

    def metadata(self) -> dict[str, Any]:
        """The v2 model metadata, with each tensor's dims and the model's dim ranges as parameters."""
        sig = self._sig
        params = sig.parameters() | {
            "max_batch_size": self.max_batch if self._batcher else 0,
            "device": self.exe.device,
        }
        return {
            "name": self.name,
            "versions": ["1"],
            "platform": "aotc",
            "inputs": [t.metadata() for t in sig.inputs],
            "outputs": [t.metadata() for t in sig.outputs],
            "parameters": params,
        }

    @property
    def _sig(self) -> Signature:
        if self.signature is None:
            raise InternalError(f"model {self.name!r} is not loaded")
        return self.signature

    # -- inference ---------------------------------------------------------------------------------------------
    async def predict(  # type: ignore[override]
        self, payload: InferRequest, headers: dict[str, str] | None = None, response_headers: Any = None
    ) -> InferResponse:
        if not isinstance(payload, InferRequest):
            raise InvalidInput(f"model {self.name!r} takes v2 inference requests (POST /v2/models/{self.name}/infer)")
        try:
            feeds = codec.feeds(self._sig, self.exe.check, payload.inputs)
            if payload.request_outputs:
                codec.check_outputs(self._sig, [o.name for o in payload.request_outputs])
            if self.sequences is not None:
                outputs = await self.run_in_sequence(payload.parameters, feeds)
            else:
                outputs = await self.run(feeds)
        except AotcError as e:
            raise InvalidInput(one_line(e)) from None
        except (InvalidInput, asyncio.CancelledError):
            raise
        except Exception as e:
            rid = payload.id or (headers or {}).get("x-request-id") or f"#{next(_request_numbers)} (no id)"
            log.exception("model %r failed on request %s", self.name, rid)
            raise InternalError(
                f"model {self.name!r} failed on request {rid}: {type(e).__name__}: {one_line(e)}"
            ) from None
        return self.response(payload, outputs)

    async def run(self, feeds: Feeds) -> Outputs:
        """The model's outputs for checked feeds: through the batcher, or alone on a worker thread."""
        if self._batcher is not None:
            return await self._batcher(feeds)
        return await asyncio.get_running_loop().run_in_executor(None, self._call, feeds)

    async def run_in_sequence(self, parameters: Any, feeds: Feeds) -> Outputs:
        """A stateful model's outputs: the call runs in the session of the request's sequence (sequences.py)."""
        assert self.sequences is not None
        params = sequence_params(parameters, self.name)
        MODEL_CALLS.labels(self.name).inc()
        return await self.sequences.run(params, lambda session: session.run(feeds))

    def _call(self, feeds: Feeds) -> Outputs:
        MODEL_CALLS.labels(self.name).inc()
        if self.axes is not None:
            BATCH_ROWS.labels(self.name).observe(self.axes.rows(feeds))
        return self.exe.run(feeds)

    def response(
        self, payload: InferRequest, outputs: Outputs, parameters: dict[str, Any] | None = None
    ) -> InferResponse:
        wanted = {o.name for o in payload.request_outputs} if payload.request_outputs else None
        tensors = [
            _Output(t.name, list(a.shape), t.datatype, data=np.asarray(a))
            for t, a in zip(self._sig.outputs, outputs)
            if wanted is None or t.name in wanted
        ]
        if payload.from_grpc:  # encoded here: the SDK's to_grpc() can't take numpy data with raw outputs
            for t in tensors:
                t.set_data_from_numpy(t.data, binary_data=payload.use_binary_outputs or t.datatype in ("FP16", "BF16"))
        return InferResponse(
            response_id=payload.id or str(uuid.uuid4()),  # the SDK's REST response needs an id
            model_name=self.name,
            infer_outputs=tensors,
            parameters=parameters or self.response_parameters,
            use_binary_outputs=payload.use_binary_outputs,
            requested_outputs=payload.request_outputs,
        )


def _plain(meta: dict[str, Any]) -> dict[str, Any]:
    """Metadata as the SDK's gRPC and pydantic models take it: name, datatype and shape only."""
    return {k: meta[k] for k in ("name", "datatype", "shape")}


class _Output(InferOutput):
    """An output tensor encoded without per-element Python calls, and with BF16 as binary data."""

    def set_data_from_numpy(self, output_tensor: np.ndarray, binary_data: bool = True) -> None:
        params = dict(self._parameters or {})
        if binary_data:
            self._data = None
            self._raw_data = np.ascontiguousarray(output_tensor).tobytes()
            params["binary_data_size"] = len(self._raw_data)
        else:
            if self._datatype in ("FP16", "BF16"):
                raise InvalidInput(
                    f"output {self.name!r} is {self._datatype}, which the v2 protocol sends as binary data only: "
                    'ask for it with "parameters": {"binary_data": true}'
                )
            self._raw_data = None
            self._data = output_tensor.ravel().tolist()
            params.pop("binary_data_size", None)
        self._parameters = params or None
