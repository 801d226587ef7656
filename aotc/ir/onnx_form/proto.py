"""The ONNX messages aotc writes, encoded in protobuf's wire format by hand, so that writing a model needs neither
the onnx package nor protobuf (the slim runtime builds its onnxruntime model with this).

Only the fields aotc writes are here, with their numbers from onnx.proto (ModelProto, GraphProto, NodeProto,
AttributeProto, TensorProto, ValueInfoProto and the types they nest). The wire format is a sequence of fields,
each a key ``field_number << 3 | wire_type`` then a varint (wire type 0), a length-prefixed byte string or
nested message (2), or four little-endian bytes (5). Repeated numbers are written packed (one length-prefixed run),
which every protobuf parser reads for proto2 files as well.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from aotc.errors import UnsupportedError

_VARINT, _LENGTH, _FIXED32 = 0, 2, 5
# AttributeProto.AttributeType
_FLOAT, _INT, _STRING, _FLOATS, _INTS = 1, 2, 3, 6, 7
# TensorProto.DataLocation
_EXTERNAL = 1

AttrValue = int | float | str | Sequence[int] | Sequence[float]


class Message:
    """One message being written: its encoded fields as chunks (weights stay the caller's buffers until the
    model is joined once, in ``tobytes``)."""

    __slots__ = ("chunks", "size")

    def __init__(self) -> None:
        self.chunks: list[bytes | memoryview] = []
        self.size = 0

    def _put(self, chunk: bytes | memoryview) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)

    def int(self, field: int, value: int) -> None:
        self._put(_varint(field << 3 | _VARINT) + _varint(value))

    def float(self, field: int, value: float) -> None:
        self._put(_varint(field << 3 | _FIXED32) + struct.pack("<f", value))

    def bytes(self, field: int, data: bytes | memoryview) -> None:
        self._put(_varint(field << 3 | _LENGTH) + _varint(len(data)))
        self._put(data)

    def str(self, field: int, text: str) -> None:
        self.bytes(field, text.encode())

    def ints(self, field: int, values: Iterable[int]) -> None:
        self.bytes(field, b"".join(_varint(v) for v in values))

    def floats(self, field: int, values: Sequence[float]) -> None:
        self.bytes(field, struct.pack(f"<{len(values)}f", *values))

    def message(self, field: int, sub: Message) -> None:
        self._put(_varint(field << 3 | _LENGTH) + _varint(sub.size))
        self.chunks.extend(sub.chunks)
        self.size += sub.size

    def tobytes(self) -> bytes:
        return b"".join(self.chunks)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 is its two's complement: ten bytes
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tensor(name: str, array: np.ndarray, elem_type: int, external: tuple[str, int] | None = None) -> Message:
    """A TensorProto of ``array``'s bytes (little-endian, as raw_data), or, with ``external`` (file, offset),
    a reference to them in an external data file."""
    m = Message()
    m.ints(1, array.shape)  # dims
    m.int(2, elem_type)  # data_type
    m.str(8, name)
    data = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    if external is None:
        m.bytes(9, data)  # raw_data
        return m
    location, offset = external
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
        m.message(13, _entry(key, value))  # external_data
    m.int(14, _EXTERNAL)  # data_location
    return m


def tensor_reference(name: str, shape: Sequence[int], elem_type: int, location: str, length: int) -> Message:
    """A TensorProto with no data, naming ``length`` bytes at offset 0 of external data ``location``: for a caller
    that supplies the tensor itself when it builds the session (onnxruntime's add_external_initializers)."""
    m = Message()
    m.ints(1, shape)
    m.int(2, elem_type)
    m.str(8, name)
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        m.message(13, _entry(key, value))
    m.int(14, _EXTERNAL)
    return m


def value_info(name: str, elem_type: int, dims: Sequence[int | str]) -> Message:
    """A ValueInfoProto of a tensor; an int dim is a dim_value, a str one a dim_param. The shape is written even
    when empty: a present, empty shape is a scalar, an absent one an unknown rank."""
    shape = Message()
    for d in dims:
        dim = Message()
        if isinstance(d, int):
            dim.int(1, d)  # dim_value
        else:
            dim.str(2, d)  # dim_param
        shape.message(1, dim)
    tensor_type = Message()
    tensor_type.int(1, elem_type)
    tensor_type.message(2, shape)
    type_proto = Message()
    type_proto.message(1, tensor_type)
    m = Message()
    m.str(1, name)
    m.message(2, type_proto)
    return m


def node(
    op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: str, attrs: Mapping[str, AttrValue]
) -> Message:
    m = Message()
    for i in inputs:
        m.str(1, i)
    for o in outputs:
        m.str(2, o)
    m.str(3, name)
    m.str(4, op_type)
    for key, value in attrs.items():
        m.message(5, _attribute(key, value, op_type))
    return m


def _attribute(name: str, value: AttrValue, op_type: str) -> Message:
    m = Message()
    m.str(1, name)
    if isinstance(value, (bool, int, np.integer)):
        m.int(3, int(value))
        m.int(20, _INT)
    elif isinstance(value, (float, np.floating)):
        m.float(2, float(value))
        m.int(20, _FLOAT)
    elif isinstance(value, str):
        m.str(4, value)
        m.int(20, _STRING)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in value):
        m.ints(8, [int(v) for v in value])  # an empty list is an empty INTS
        m.int(20, _INTS)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, np.number)) for v in value):
        m.floats(7, [float(v) for v in value])
        m.int(20, _FLOATS)
    else:
        raise UnsupportedError(
            f"attribute {name!r} of {op_type} is {value!r}; aotc writes ints, floats, strings and lists of numbers"
        )
    return m


def graph(
    name: str,
    nodes: Sequence[Message],
    inputs: Sequence[Message],
    outputs: Sequence[Message],
    initializers: Sequence[Message],
) -> Message:
    m = Message()
    for n in nodes:
        m.message(1, n)
    m.str(2, name)
    for t in initializers:
        m.message(5, t)
    for i in inputs:
        m.message(11, i)
    for o in outputs:
        m.message(12, o)
    return m


def model(
    body: Message, *, ir_version: int, opset: int, producer: tuple[str, str], metadata: Mapping[str, str]
) -> Message:
    """A ModelProto of ``body`` (a graph) importing the default domain at ``opset``."""
    m = Message()
    m.int(1, ir_version)
    m.str(2, producer[0])
    m.str(3, producer[1])
    m.message(7, body)
    opset_id = Message()
    opset_id.str(1, "")
    opset_id.int(2, opset)
    m.message(8, opset_id)
    for key, value in metadata.items():
        m.message(14, _entry(key, value))
    return m


def _entry(key: str, value: str) -> Message:
    """A StringStringEntryProto (metadata_props, external_data)."""
    m = Message()
    m.str(1, key)
    m.str(2, value)
    return m
