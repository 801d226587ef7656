"""``aotc serve``: KServe's ModelServer with the changes aotc needs, and nothing home-made besides.

KServe's Python SDK gives the Open Inference Protocol (v2) over REST and gRPC, Prometheus metrics at /metrics,
multi-process REST workers and graceful shutdown. On top of it, aotc:

* binds the REST and gRPC servers to ``host`` (the SDK binds every interface; aotc binds 127.0.0.1 unless told);
* refuses a REST body larger than ``max_body_bytes`` with 413 before reading it (gRPC: the same limit as the
  channel's maximum message size);
* reads binary tensors as views of the body (the SDK turns them into Python lists and back) and checks the
  request's framing (``codec.parse_request``);
* answers ``GET /v2/models/{name}`` with the model's full metadata, tensor and model parameters included (the
  SDK's response model keeps name, datatype and shape only);
* maps a malformed request to 400 (FastAPI's default is 422) and an ``InternalError`` to 500 with its message;
* writes no line per request unless asked (``access_log``; the SDK writes uvicorn's), and leaves out the SDK's
  per-request timing middleware, whose log lines aotc silences.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, ORJSONResponse

from aotc.serve import codec
from aotc.serve._sdk import (
    BaseKServeModel,
    DataPlane,
    ExceptionToStatusInterceptor,
    GRPCServer,
    InferenceServicer,
    InferInput,
    InferRequest,
    InvalidInput,
    RequestedOutput,
    RESTServer,
    grpc_predict_v2_pb2_grpc,
)
from aotc.serve._sdk import model_server as _ms
from aotc.serve.model import InternalError
from aotc.serve.workers import Workers

log = logging.getLogger("kserve.aotc")  # under the SDK's logger: its format, level and handlers

DEFAULT_MAX_BODY_BYTES = 64 << 20  # as Triton Inference Server's --http-max-input-size


# -- requests --------------------------------------------------------------------------------------------------
class _DataPlane(DataPlane):
    def decode_inference_request(self, body: Any, headers: dict[str, str], model_name: str) -> InferRequest:
        if not isinstance(body, (bytes, bytearray)):
            return super().decode_inference_request(body, headers, model_name)
        length = headers.get("inference-header-content-length")
        try:
            json_length = None if length is None else int(length)
            req = codec.parse_request(body, json_length)
        except ValueError:
            raise InvalidInput(f"Inference-Header-Content-Length {length!r} is not an integer") from None
        except codec.RequestError as e:
            raise InvalidInput(str(e)) from None
        inputs = []
        for t in req.inputs:
            item = InferInput(t.name, t.shape, t.datatype, data=t.data, parameters=t.parameters)
            item._raw_data = t.raw  # a view of the body, read with np.frombuffer
            inputs.append(item)
        outputs = None if req.outputs is None else [RequestedOutput(n, p) for n, p in req.outputs]
        return InferRequest(
            model_name, inputs, request_id=req.id, parameters=req.parameters or None, request_outputs=outputs
        )


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is refused with 413 before it is read."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_bytes:
                return await self._refuse(send, length.decode(errors="replace"))
            return await self.app(scope, receive, send)
        # No length given (chunked): read up to the limit here, then hand the body on in one piece.
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._refuse(send, f"more than {self.max_bytes}")
            more = message.get("more_body", False)
        body, sent = b"".join(chunks), False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any, size: str) -> None:
        message = (
            f"the request body ({size} bytes) is larger than this server takes ({self.max_bytes} bytes; --max-body-mb)"
        )
        payload = json.dumps({"error": message}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


async def _invalid_input(_request: Request, exc: Exception) -> JSONResponse:
    log.warning("400: %s", exc)
    return JSONResponse(status_code=400, content={"error": str(exc)})


async def _malformed(_request: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    parts = [f"{'.'.join(str(p) for p in e.get('loc', ())[1:])}: {e.get('msg', '')}" for e in errors[:5]]
    message = "malformed request: " + ("; ".join(parts) or str(exc))
    log.warning("400: %s", message)
    return JSONResponse(status_code=400, content={"error": message})


async def _internal(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=500, content={"error": str(exc)})


# -- servers ---------------------------------------------------------------------------------------------------
class _RESTServer(RESTServer):
    def __init__(self, *args: Any, host: str, max_body_bytes: int, access_log: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config.host = host
        self.access_log, self.max_body_bytes = access_log, max_body_bytes

    def create_application(self) -> None:
        super().create_application()
        if not self.access_log:
            # uvicorn writes a request's access line only while "uvicorn.access" has a handler (it asks per
            # connection); this runs in each serving process after the SDK has configured its logging.
            access = logging.getLogger("uvicorn.access")
            access.handlers, access.propagate = [], False

    def _register_endpoints(self, app: FastAPI) -> None:
        dataplane = self.dataplane

        async def model_metadata(model_name: str) -> Any:
            model = dataplane.get_model_from_registry(model_name)
            describe = getattr(model, "metadata", None)
            if describe is None:
                return await dataplane.model_metadata(model_name)
            meta = describe()
            return ORJSONResponse(await meta if inspect.isawaitable(meta) else meta)

        # Ahead of the SDK's route for the same path, whose response model drops the parameters.
        app.add_api_route("/v2/models/{model_name}", model_metadata, methods=["GET"])
        super()._register_endpoints(app)

    def _add_exception_handlers(self, app: FastAPI) -> None:
        super()._add_exception_handlers(app)
        app.add_exception_handler(InvalidInput, _invalid_input)
        app.add_exception_handler(RequestValidationError, _malformed)
        app.add_exception_handler(InternalError, _internal)

    def _add_middlewares(self, app: FastAPI) -> None:
        # Not the SDK's: its TimingMiddleware times each request's CPU for a log line that configure_logging()
        # silences (kserve.trace), ~6% of the server's CPU per request; its access-log format middleware is for an
        # option aotc does not take.
        app.add_middleware(BodyLimit, max_bytes=self.max_body_bytes)


class _GRPCServer(GRPCServer):
    def __init__(self, *args: Any, host: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._host = host

    async def start(self, max_workers: int) -> None:
        from concurrent import futures

        from grpc import aio

        self._server = aio.server(
            futures.ThreadPoolExecutor(max_workers=max_workers),
            interceptors=(ExceptionToStatusInterceptor(),),
            options=[
                ("grpc.max_send_message_length", self._kwargs["grpc_max_send_message_length"]),
                ("grpc.max_receive_message_length", self._kwargs["grpc_max_receive_message_length"]),
            ],
        )
        servicer = InferenceServicer(self._data_plane, self._model_repository_extension)
        grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, self._server)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._server.add_insecure_port(f"{host}:{self._port}")
        log.info("gRPC server on %s:%d", host, self._port)
        await self._server.start()
        await self._server.wait_for_termination()


class AotcModelServer(_ms.ModelServer):
    """KServe's ModelServer bound to ``host``, with the request handling above."""

    def __init__(self, *, host: str, max_body_bytes: int, access_log: bool = False, **kwargs: Any) -> None:
        super().__init__(enable_latency_logging=False, **kwargs)
        self.host, self.max_body_bytes, self.access_log = host, max_body_bytes, access_log
        self.dataplane = _DataPlane(model_registry=self.registered_models)

    def start(self, models: list[BaseKServeModel]) -> None:  # type: ignore[override]
        self._register_and_check_atleast_one_model_is_ready(models)
        rest = dict(
            app=_ms.FASTAPI_APP_IMPORT_STRING,
            data_plane=self.dataplane,
            model_repository_extension=self.model_repository_extension,
            http_port=self.http_port,
            workers=self.workers,
            grace_period=self.grace_period,
            event_loop=self.event_loop,
            timeout_keep_alive=self.timeout_keep_alive,
        )
        server = _RESTServer(host=self.host, max_body_bytes=self.max_body_bytes, access_log=self.access_log, **rest)
        if self.workers > 1:
            multi = Workers(**rest)
            multi._rest_server = server
            self._rest_multiprocess_server = multi
            self.servers.append(multi.start())
        else:
            self._rest_server = server
            self.servers.append(server.start())
        if self.enable_grpc:
            limits = vars(_ms.args) | {
                "grpc_max_send_message_length": max(self.max_body_bytes, _ms.args.grpc_max_send_message_length),
                "grpc_max_receive_message_length": self.max_body_bytes,
            }
            self._grpc_server = _GRPCServer(
                self.grpc_port,
                self.dataplane,
                self.model_repository_extension,
                kwargs=limits,
                grace_period=self.grace_period,
                host=self.host,
            )
            self.servers.append(self._grpc_server.start(self.max_threads))
        loop = _new_event_loop(self.event_loop)
        asyncio.set_event_loop(loop)
        self.setup_event_loop()  # the SDK's exception handler and worker threads, on this loop
        self.register_signal_handler()
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    """uvloop unless told "asyncio" (uvicorn's "auto" choice; the SDK's own start runs the stdlib loop)."""
    if kind != "asyncio":
        with contextlib.suppress(ImportError):
            import uvloop

            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def configure_logging() -> None:
    """The SDK's log format for aotc's lines too (logger ``kserve.aotc``), without its per-request timing lines."""
    from kserve.logging import configure_logging as configure

    configure()
    logging.getLogger("kserve.trace").setLevel(logging.WARNING)


def serve(
    models: Sequence[BaseKServeModel],
    *,
    host: str = "127.0.0.1",
    http_port: int = 8080,
    grpc_port: int | None = 8081,
    workers: int = 1,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    access_log: bool = False,
) -> None:
    """Serve ``models`` (loaded) until SIGINT or SIGTERM; ``access_log``: a log line per HTTP request."""
    server = AotcModelServer(
        host=host,
        max_body_bytes=max_body_bytes,
        access_log=access_log,
        http_port=http_port,
        grpc_port=grpc_port or 0,
        enable_grpc=grpc_port is not None,
        workers=workers,
    )
    log.info("serving %s on http://%s:%d", ", ".join(m.name for m in models), host, http_port)
    server.start(list(models))
