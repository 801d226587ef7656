"""The one module that imports KServe's Python SDK (``pip install 'aotc[serve]'``); the rest of aotc.serve takes
its names from here.

Importing ``kserve`` imports ``kserve.model_server``, which parses ``sys.argv`` at import time: the import runs
with ``sys.argv`` cut to the program name, so that aotc's own options (``--workers``, ``--port``) never reach it.
"""

from __future__ import annotations

import sys

_argv = sys.argv
sys.argv = _argv[:1]
try:
    import kserve.model_server as model_server
    from kserve import Model
    from kserve.errors import InvalidInput, ModelNotFound
    from kserve.model import BaseKServeModel
    from kserve.protocol.dataplane import DataPlane
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
    from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor
    from kserve.protocol.grpc.server import GRPCServer
    from kserve.protocol.grpc.servicer import InferenceServicer
    from kserve.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse, RequestedOutput
    from kserve.protocol.rest.multiprocess.server import RESTServerMultiProcess, RESTServerProcess
    from kserve.protocol.rest.server import RESTServer
finally:
    sys.argv = _argv

__all__ = [
    "BaseKServeModel",
    "DataPlane",
    "ExceptionToStatusInterceptor",
    "GRPCServer",
    "InferInput",
    "InferOutput",
    "InferRequest",
    "InferResponse",
    "InferenceServicer",
    "InvalidInput",
    "Model",
    "ModelNotFound",
    "RESTServer",
    "RESTServerMultiProcess",
    "RESTServerProcess",
    "RequestedOutput",
    "grpc_predict_v2_pb2_grpc",
    "model_server",
]
