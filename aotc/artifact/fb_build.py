"""FlatBuffer building blocks both encoders use (``encode.py``: graphs, ``plan_encode.py``: launch plans):
strings checked to be text, vectors of int64 ids and vectors of tables. What cannot be stored raises
``ArtifactError`` (``what`` names the field, where the caller knows it)."""

from __future__ import annotations

from collections.abc import Sequence

import flatbuffers
import numpy as np

from aotc.errors import ArtifactError


def string(b: flatbuffers.Builder, s: str, what: str | None = None) -> int:
    where = f"{what}: " if what else ""
    if not isinstance(s, str):
        raise ArtifactError(f"{where}expected a string, got {type(s).__name__}")
    try:
        return b.CreateString(s.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise ArtifactError(f"{where}{s[:40]!r} is not valid unicode ({e})") from None


def strings(b: flatbuffers.Builder, items: Sequence[str]) -> int:
    return table_vector(b, [string(b, s) for s in items])


def longs(b: flatbuffers.Builder, xs: Sequence[int], what: str | None = None) -> int:
    """A vector of int64 (value ids, constexpr values)."""
    try:
        arr = np.array(list(xs), dtype=np.int64)
    except OverflowError:
        raise ArtifactError(f"{what + ': ' if what else ''}a value id does not fit in 64 bits") from None
    return b.CreateNumpyVector(arr)


def table_vector(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()
