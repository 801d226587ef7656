"""Input specifications: ``Dim`` (a named dynamic dimension) and ``TensorSpec`` (shape + dtype).

Every problem with a spec raises ``ShapeError``, the same error ``dtype_of`` raises for a bad dtype name, naming
the user's ``file:line`` that made the spec (a model file's ``Dim("seq", min=10, max=2)``).
"""

from __future__ import annotations

import keyword
import os
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

from aotc.errors import ShapeError
from aotc.frontend.source_paths import source_path
from aotc.ir.dtypes import DType, dtype_of

DEFAULT_MAX = 2**31 - 1

# Preferred hint quotients: primes rarely equal a real static size (heads, head_dim, channels,
# powers of two), so a dynamic dim is unlikely to be mistaken for one while tracing. Primes above 16
# come first; the small odd ones serve narrow ranges.
_HINT_FACTORS = (17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 13, 11, 7, 5, 3)


# aotc and its CLI (cli/ beside it in a source tree), installed packages and the standard library: not where a
# user writes a spec
_AOTC = Path(__file__).resolve().parents[1]
_NOT_USER = tuple(f"{p}{os.sep}" for p in (_AOTC, _AOTC.parent / "cli")) + tuple(
    f"{Path(sysconfig.get_paths()[k]).resolve()}{os.sep}" for k in ("stdlib", "purelib", "platlib")
)


def spec_error(msg: str) -> ShapeError:
    """``msg`` as a ShapeError naming the innermost frame of the user's code that made the spec, if one made it
    (an importer's own Dims, made from a CLI's ``--dim``, name none)."""
    f = sys._getframe(1)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if not path.startswith(_NOT_USER) and not f.f_code.co_filename.startswith("<"):
            return ShapeError(f"{source_path(path)}:{f.f_lineno}: {msg}")
        f = f.f_back
    return ShapeError(msg)


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise spec_error(f"{what} must be an int, got {value!r}")
    return value


class Dim:
    """A named dynamic dimension with an inclusive range ``[min, max]`` and an optional divisor.

    ``max`` defaults to 2**31 - 1. Every input dim that uses the same Dim (or an equal one:
    same name and settings) is the same symbol.

    ``hint`` is the value tracing uses to answer questions Python asks about the dim
    (``if x.shape[1] > 128``); each answer becomes a guard. Without a hint, tracing
    uses the first of ``multiple_of * p`` that lies in the range, for p in the primes
    17, 19, ..., 97 and then 13, 11, 7, 5, 3 (primes rarely equal a real static size),
    else the smallest multiple of ``multiple_of`` in the range that is at least 2,
    else ``min`` (only when the range holds nothing but 0 and 1).
    Dims of one trace that have no explicit hint get distinct hints where their
    ranges allow, so two different dims never look equal by accident.
    """

    __slots__ = ("hint", "max", "min", "multiple_of", "name")

    def __init__(
        self,
        name: str,
        min: int = 1,
        max: int = DEFAULT_MAX,
        multiple_of: int = 1,
        hint: int | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name in ("min", "max"):
            raise spec_error(f"Dim name must be a Python identifier, got {name!r}")
        lo, hi, mult = (
            _int(min, f"Dim {name!r} min"),
            _int(max, f"Dim {name!r} max"),
            _int(multiple_of, f"Dim {name!r} multiple_of"),
        )
        if not 0 <= lo <= hi:
            raise spec_error(f"Dim {name!r} needs 0 <= min <= max, got min={lo}, max={hi}")
        if mult < 1:
            raise spec_error(f"Dim {name!r} multiple_of must be >= 1, got {mult}")
        if _first_multiple(lo, mult) > hi:
            raise spec_error(f"Dim {name!r}: no multiple of {mult} lies in [{lo}, {hi}]")
        self.name, self.min, self.max, self.multiple_of = name, lo, hi, mult
        if hint is not None:
            hint = _int(hint, f"Dim {name!r} hint")
            if not lo <= hint <= hi or hint % mult:
                raise spec_error(f"Dim {name!r} hint {hint} must be a multiple of {mult} in [{lo}, {hi}]")
            if hint in (0, 1) and any(v not in (0, 1) for v in self._candidates()):
                raise spec_error(f"Dim {name!r} hint {hint}: 0 and 1 are special sizes; pick a hint >= 2")
        self.hint = hint

    def _candidates(self) -> Iterator[int]:
        """Hint values in order of preference (see the class docstring)."""
        m = self.multiple_of
        for p in _HINT_FACTORS:
            if self.min <= m * p <= self.max:
                yield m * p
        v = _first_multiple(max(self.min, 2), m)
        while v <= self.max:
            yield v
            v += m
        if self.max <= 1:
            yield from (v for v in (self.min, self.max) if v % m == 0)

    def default_hint(self, taken: Iterable[int] = ()) -> int:
        """The hint tracing uses: ``hint`` if given, else the first candidate not in ``taken``."""
        if self.hint is not None:
            return self.hint
        used = set(taken)
        first = None
        for i, v in enumerate(self._candidates()):
            first = v if first is None else first
            if v not in used or i > 10_000:
                return v
        assert first is not None  # the constructor proved a multiple lies in the range
        return first

    def key(self) -> tuple[str, int, int, int, int | None]:
        return (self.name, self.min, self.max, self.multiple_of, self.hint)

    def __repr__(self) -> str:
        extra = (f", multiple_of={self.multiple_of}" if self.multiple_of != 1 else "") + (
            f", hint={self.hint}" if self.hint is not None else ""
        )
        return f"Dim({self.name!r}, min={self.min}, max={self.max}{extra})"


def _first_multiple(lo: int, m: int) -> int:
    return -(-lo // m) * m


class TensorSpec:
    """The shape (ints and ``Dim``s) and dtype (a DType or its name) of one model input."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape: Iterable[int | Dim], dtype: DType | str = DType.float32) -> None:
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
            raise spec_error(f"TensorSpec shape must be a tuple of ints and Dims, got {shape!r}")
        dims = tuple(shape)
        for i, d in enumerate(dims):
            if isinstance(d, Dim):
                continue
            if isinstance(d, bool) or not isinstance(d, int) or d < 0:
                raise spec_error(f"TensorSpec shape entry {i} must be an int >= 0 or a Dim, got {d!r}")
        self.shape: tuple[int | Dim, ...] = dims
        try:
            self.dtype: DType = dtype_of(dtype)
        except ShapeError as e:
            raise spec_error(f"TensorSpec dtype: {e}") from None

    def dims(self) -> list[Dim]:
        return [d for d in self.shape if isinstance(d, Dim)]

    def __repr__(self) -> str:
        inner = ", ".join(d.name if isinstance(d, Dim) else str(d) for d in self.shape)
        return f"TensorSpec(({inner}{',' if len(self.shape) == 1 else ''}), {self.dtype.value!r})"
