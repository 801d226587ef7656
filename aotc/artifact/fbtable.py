"""The generated readers over a leaner ``Table``: the same reads, without the flatbuffers package's per-read checks.

flatc's Python accessors read through ``flatbuffers.table.Table``, whose every read checks that the offset is a
valid integer (``enforce_number``), wraps the buffer in a fresh memoryview and makes two more calls; reading a
GPT-2-size artifact does ~24,000 such reads, about a quarter of the time the reader spends decoding. The reader
only decodes a buffer after ``verify_flatbuffer`` has checked every offset, vtable, vector and string in it
(fbverify.py), so those per-read checks can never fail there. ``FastTable`` reads the same bytes the same way
(little-endian, the same vtable rule for fields a file's vtable does not reach) with one ``unpack_from`` each.

The generated modules look ``flatbuffers.table.Table`` up on the ``flatbuffers`` name of their own globals at
each ``Init``, so ``install`` points that name, in each generated module, at a view of the package whose
``table.Table`` is ``FastTable`` and whose every other attribute is the package's own: the builders the writer
uses are untouched, and flatc's output needs no editing after it is regenerated (REGENERATE.md).
"""

from __future__ import annotations

import importlib
import pkgutil
import struct
import types
from typing import Any

import flatbuffers
import flatbuffers.table
import numpy as np

_I32 = struct.Struct("<i").unpack_from
_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from


class FastTable(flatbuffers.table.Table):
    """``flatbuffers.table.Table`` for a verified buffer: each read is one ``unpack_from`` (method names are the
    package's, which the generated code calls)."""

    __slots__ = ()

    def Offset(self, vtableOffset: int) -> int:
        buf, pos = self.Bytes, self.Pos
        vtable = pos - _I32(buf, pos)[0]
        if vtableOffset < _U16(buf, vtable)[0]:
            return _U16(buf, vtable + vtableOffset)[0]
        return 0

    def Indirect(self, off: int) -> int:
        return off + _U32(self.Bytes, off)[0]

    def String(self, off: int) -> bytes:
        buf = self.Bytes
        off += _U32(buf, off)[0]
        return bytes(buf[off + 4 : off + 4 + _U32(buf, off)[0]])

    def VectorLen(self, off: int) -> int:
        buf = self.Bytes
        off += self.Pos
        return _U32(buf, off + _U32(buf, off)[0])[0]

    def Vector(self, off: int) -> int:
        off += self.Pos
        return off + _U32(self.Bytes, off)[0] + 4

    def Get(self, flags: Any, off: int) -> Any:
        return flags.py_type(flags.packer_type.unpack_from(self.Bytes, off)[0])

    def GetVectorAsNumpy(self, flags: Any, off: int) -> np.ndarray:
        buf = self.Bytes
        off += self.Pos
        start = off + _U32(buf, off)[0]
        return np.frombuffer(buf, dtype=_numpy_type(flags), count=_U32(buf, start)[0], offset=start + 4)


_NUMPY_TYPES: dict[Any, np.dtype] = {}


def _numpy_type(flags: Any) -> np.dtype:
    dt = _NUMPY_TYPES.get(flags)
    if dt is None:
        dt = _NUMPY_TYPES[flags] = np.dtype(flags.name).newbyteorder("<")
    return dt


def _package() -> types.ModuleType:
    """The flatbuffers package as the generated modules see it: its own attributes (copied, so each lookup stays a
    plain module attribute), with ``table.Table`` being FastTable."""
    view = types.ModuleType("flatbuffers")
    view.__dict__.update({k: v for k, v in vars(flatbuffers).items() if not k.startswith("__")})
    view.table = types.SimpleNamespace(Table=FastTable)
    return view


_PACKAGE = _package()


# By name: ``import aotc.artifact.generated as ...`` reads attributes of the packages while they are still being
# imported, which reaches aotc's lazy public attributes (the compiler's frontend) on the runtime's import path.
_GENERATED = "aotc.artifact.generated"


def install(fast: bool = True) -> None:
    """Point every generated module's ``flatbuffers`` at the view above, or back at the package (``fast=False``,
    for the test that compares the two readings); idempotent."""
    for info in pkgutil.iter_modules(importlib.import_module(_GENERATED).__path__):
        module = importlib.import_module(f"{_GENERATED}.{info.name}")
        if getattr(module, "flatbuffers", None) in (flatbuffers, _PACKAGE):
            module.flatbuffers = _PACKAGE if fast else flatbuffers
