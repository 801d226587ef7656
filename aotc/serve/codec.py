"""Request tensors -> checked numpy feeds, and the v2 binary tensor extension's request framing.

A request is checked against the artifact before any of its data is read or allocated: names, datatypes and
shapes go through ``Executable.check`` as zero-stride stand-ins, so a shape of ``[10**12, 32]`` is refused with
the runtime's own message (``input 'x' dim 0 (batch) = 1000000000000 is outside [1, 1024]``) and costs nothing.
Only then is each tensor read: binary data as a view of the request body (``np.frombuffer``, no copy), JSON data
converted strictly (no float truncated into an integer input, no integer wrapped into a narrower one).
Imports numpy and orjson only (the KServe SDK brings orjson); a refusal raises ``RequestError``, an
``AotcError``, which the server turns into HTTP 400 / gRPC INVALID_ARGUMENT.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aotc.errors import AotcError
from aotc.serve.signature import NUMPY_DTYPE, Signature

# Past numpy's own limit on array rank; the runtime's rank check gives the message for anything in between.
_MAX_RANK = 64
# JSON value kinds accepted per target dtype kind: no float into an int input, nothing but booleans into a bool one.
_ACCEPTED_KINDS = {"f": "iuf", "i": "iu", "u": "iu", "b": "b", "V": "iuf"}
_KIND_NAMES = {"f": "float", "i": "integer", "u": "integer", "b": "boolean", "U": "string", "S": "string", "O": "mixed"}


class RequestError(AotcError):
    """A request refused before the model runs: malformed, or not what the model takes."""


@dataclass
class RawTensor:
    """A request input as it arrived: binary data (``raw``, a slice of the body) or JSON values (``data``)."""

    name: str
    datatype: str
    shape: list[int]
    data: Any = None
    raw: Any = None
    parameters: dict[str, Any] = field(default_factory=dict)


def feeds(sig: Signature, check: Callable[[Mapping[str, np.ndarray]], None], tensors: Sequence[Any]) -> dict[str, Any]:
    """Numpy arrays by input name from request tensors (``RawTensor`` or the SDK's ``InferInput``), each checked
    against the model first: ``check`` is ``Executable.check``, given stand-ins of the requested dtypes and shapes."""
    declared: dict[str, tuple[Any, tuple[int, ...], np.dtype]] = {}
    for t in tensors:
        name = str(t.name)
        if name in declared:
            raise RequestError(f"input {name!r} is given twice")
        declared[name] = (t, _shape(name, t.shape), _dtype(sig, name, str(t.datatype)))
    check({n: _standin(n, shape, dtype) for n, (_, shape, dtype) in declared.items()})
    return {n: _array(n, t, shape, dtype) for n, (t, shape, dtype) in declared.items()}


def check_outputs(sig: Signature, names: Sequence[str]) -> None:
    have = [t.name for t in sig.outputs]
    unknown = [n for n in names if n not in have]
    if unknown:
        raise RequestError(
            f"unknown output(s) {', '.join(map(repr, unknown))}; the model's outputs are {', '.join(have)}"
        )


def _shape(name: str, shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, (list, tuple)) or not all(type(d) is int for d in shape):
        raise RequestError(f"input {name!r} has shape {shape!r}; a shape is a list of integers")
    if len(shape) > _MAX_RANK:
        raise RequestError(f"input {name!r} has rank {len(shape)}, more than any model takes")
    if any(d < 0 for d in shape):
        raise RequestError(f"input {name!r} has shape {list(shape)}; dims can't be negative")
    return tuple(shape)


def _dtype(sig: Signature, name: str, datatype: str) -> np.dtype:
    """The numpy dtype a request's datatype stands for; the runtime's dtype check judges it against the model."""
    want = sig.input(name)
    if want is not None and datatype == want.datatype:
        return want.dtype  # BF16 included: the model's own bfloat16 dtype
    dtype = NUMPY_DTYPE.get(datatype)
    if dtype is None:
        expected = f", expected {want.datatype}" if want is not None else ""
        raise RequestError(f"input {name!r} has datatype {datatype!r}, which aotc does not take{expected}")
    return dtype


def _standin(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    try:
        return np.broadcast_to(np.zeros((), dtype), shape)
    except ValueError:  # more elements than an array can index: numpy refuses even a zero-stride view
        raise RequestError(f"input {name!r} has shape {list(shape)}, too large for any array") from None


def _array(name: str, t: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    count = math.prod(shape)
    raw = t.raw if isinstance(t, RawTensor) else getattr(t, "_raw_data", None)
    if raw is not None:
        size = len(memoryview(raw).cast("B"))
        if size != count * dtype.itemsize:
            raise RequestError(
                f"input {name!r} has {size} bytes of binary data, expected {count * dtype.itemsize} "
                f"for shape {list(shape)} of {t.datatype}"
            )
        arr = np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)
        return arr if arr.flags.aligned else arr.copy()  # a slice of the body may start at any offset
    if t.data is None:
        raise RequestError(f"input {name!r} has no data: give 'data', or 'binary_data_size' with the binary extension")
    if dtype.kind in "fV" and dtype.itemsize == 2:
        raise RequestError(f"input {name!r} is {t.datatype}, which the v2 protocol sends as binary data only")
    try:
        values = np.asarray(t.data)
    except (ValueError, TypeError) as e:  # ragged nesting, mixed objects
        raise RequestError(f"input {name!r} has data that is not a {t.datatype} tensor ({e})") from None
    if values.size and values.dtype.kind not in _ACCEPTED_KINDS.get(dtype.kind, ""):
        kind = _KIND_NAMES.get(values.dtype.kind, values.dtype.name)
        raise RequestError(f"input {name!r} has {kind} values, which {t.datatype} does not take")
    if values.size != count:
        raise RequestError(f"input {name!r} has {values.size} values, expected {count} for shape {list(shape)}")
    if dtype.kind in "iu" and values.size and values.dtype != dtype:
        info = np.iinfo(dtype)
        if values.min() < info.min or values.max() > info.max:
            raise RequestError(f"input {name!r} has values outside the range of {t.datatype}")
    return values.astype(dtype, copy=False).reshape(shape)


# -- the binary tensor extension --------------------------------------------------------------------------------


@dataclass
class Request:
    """A v2 inference request read from a REST body (JSON header plus binary tensors)."""

    id: str | None
    inputs: list[RawTensor]
    outputs: list[tuple[str, dict[str, Any]]] | None
    parameters: dict[str, Any]


def parse_request(body: bytes, json_length: int | None) -> Request:
    """Split a REST body into its JSON header and the binary tensors after it, each a view of ``body``."""
    import orjson

    if json_length is None:
        json_length = len(body)
    if not 0 <= json_length <= len(body):
        raise RequestError(f"Inference-Header-Content-Length is {json_length}, but the body has {len(body)} bytes")
    view = memoryview(body)
    try:
        header = orjson.loads(view[:json_length])
    except orjson.JSONDecodeError as e:
        raise RequestError(f"the request is not valid JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get("inputs"), list):
        raise RequestError("the request has no 'inputs' list")
    offset, inputs = json_length, []
    for item in header["inputs"]:
        t = _raw_tensor(item)
        size = t.parameters.get("binary_data_size")
        if size is not None:
            if type(size) is not int or size < 0 or offset + size > len(body):
                raise RequestError(f"input {t.name!r} has binary_data_size {size!r}, past the end of the body")
            if t.data is not None:
                raise RequestError(f"input {t.name!r} has both 'data' and binary_data_size")
            t.raw = view[offset : offset + size]
            offset += size
        inputs.append(t)
    if offset != len(body):
        raise RequestError(f"the request body has {len(body) - offset} bytes that no input's binary_data_size covers")
    outputs = header.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, list) or not all(isinstance(o, dict) and "name" in o for o in outputs):
            raise RequestError("'outputs' must be a list of objects with a 'name'")
        outputs = [(str(o["name"]), _params(o.get("parameters"), f"output {o['name']!r}")) for o in outputs]
    rid = header.get("id")
    return Request(None if rid is None else str(rid), inputs, outputs, _params(header.get("parameters"), "request"))


def _raw_tensor(item: Any) -> RawTensor:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise RequestError("each input must be an object with a 'name'")
    name = item["name"]
    datatype = item.get("datatype")
    if not isinstance(datatype, str):
        raise RequestError(f"input {name!r} has no 'datatype'")
    if "shape" not in item:
        raise RequestError(f"input {name!r} has no 'shape'")
    return RawTensor(
        name, datatype.upper(), item["shape"], item.get("data"), None, _params(item.get("parameters"), name)
    )


def _params(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError(f"the parameters of {what} must be an object")
    return value
