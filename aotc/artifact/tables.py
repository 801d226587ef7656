"""The tables every graph of an artifact shares (strings, tensor types, attr values, attr sets), decoded
once each and checked entry by entry, plus the small checked readers the decoder uses everywhere."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.artifact.generated.ValueKind import ValueKind
from aotc.artifact.layout import DTYPES_BY_CODE, MAX_ATTR_DEPTH
from aotc.errors import ArtifactError, ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.symbolic import SymExpr, parse
from aotc.ir.types import Attrs, TensorType

# Canonical expressions are short; a cap keeps a hostile file from making the parser do heavy work.
MAX_SEXPR_CHARS = 4096
_PAREN = re.compile(r"\(\s*([^\s()]*)|\)")

Counter = Callable[[int, str], int]


@dataclass(frozen=True)
class Tables:
    strings: list[str]
    types: list[TensorType]
    attr_values: list[Any]
    attr_sets: list[Attrs]


def decode_tables(root: Any, count: Counter) -> Tables:
    """The shared tables of the FlatBuffer ``root`` (an Artifact); ``count`` bounds each vector length."""
    strings = [text(root.Strings(i), f"string {i}") for i in range(count(root.StringsLength(), "strings"))]
    exprs = _Exprs(strings)
    types = [exprs.tensor_type(root.Types(i), f"type {i}") for i in range(count(root.TypesLength(), "types"))]
    values = _attr_values(root, exprs, count)
    sets = [
        _attr_set(root.AttrSets(i), strings, values, f"attr set {i}")
        for i in range(count(root.AttrSetsLength(), "attr sets"))
    ]
    return Tables(strings, types, values, sets)


class _Exprs:
    """Parses each distinct string once, however many dims and attrs refer to it."""

    def __init__(self, strings: list[str]) -> None:
        self.strings = strings
        self._parsed: dict[int, int | SymExpr] = {}

    def __call__(self, index: int, what: str) -> int | SymExpr:
        e = self._parsed.get(index)
        if e is None:
            e = self._parsed[index] = expr(string_at(self.strings, index, what), what)
        return e

    def tensor_type(self, t: Any, what: str) -> TensorType:
        if t is None:
            raise ArtifactError(f"{what} is missing")
        shape = []
        for index in column(t.ShapeAsNumpy(), np.uint32).tolist():
            d = self(index, f"{what} shape")
            if isinstance(d, int) and d < 0:
                raise ArtifactError(f"{what} shape: negative dim {d}")
            shape.append(d)
        return TensorType(dtype(t.Dtype(), what), tuple(shape))


def _attr_values(root: Any, exprs: _Exprs, count: Counter) -> list[Any]:
    """Entries in order; a tuple refers only to earlier entries, so each is built from finished ones."""
    values: list[Any] = []
    levels: list[int] = []  # how deep each entry's tuples nest
    for i in range(count(root.AttrValuesLength(), "attr values")):
        v = root.AttrValues(i)
        what = f"attr value {i}"
        if v is None:
            raise ArtifactError(f"{what} is missing")
        kind, level = v.Kind(), 0
        if kind == ValueKind.Null:
            x: Any = None
        elif kind == ValueKind.Int:
            x = int(v.IntValue())
        elif kind == ValueKind.Float:
            x = float(v.FloatValue())
        elif kind == ValueKind.Bool:
            b = int(v.IntValue())
            if b not in (0, 1):
                raise ArtifactError(f"{what}: bool stored as {b}")
            x = b == 1
        elif kind == ValueKind.Str:
            x = string_at(exprs.strings, int(v.StrValue()), what)
        elif kind == ValueKind.Dtype:
            x = dtype(v.IntValue(), what)
        elif kind == ValueKind.Sym:
            x = exprs(int(v.StrValue()), what)
            if not isinstance(x, SymExpr):
                raise ArtifactError(f"{what}: symbolic value {x} has no symbols")
        elif kind == ValueKind.Tuple:
            items = column(v.ItemsAsNumpy(), np.uint32).tolist()
            if any(j >= i for j in items):
                raise ArtifactError(f"{what}: a tuple may only hold earlier attr values, not {max(items)}")
            level = 1 + max((levels[j] for j in items), default=0)
            if level > MAX_ATTR_DEPTH:
                raise ArtifactError(f"{what}: tuples nest deeper than {MAX_ATTR_DEPTH} levels")
            x = tuple([values[j] for j in items])
        else:
            raise ArtifactError(f"{what} has unknown value kind {kind}")
        values.append(x)
        levels.append(level)
    return values


def _attr_set(s: Any, strings: list[str], values: list[Any], what: str) -> Attrs:
    if s is None:
        raise ArtifactError(f"{what} is missing")
    names = column(s.NamesAsNumpy(), np.uint32)
    refs = column(s.ValuesAsNumpy(), np.uint32)
    if len(names) != len(refs):
        raise ArtifactError(f"{what} has {len(names)} names but {len(refs)} values")
    check_indices(names, len(strings), f"{what} name", "string")
    check_indices(refs, len(values), f"{what} value", "attr value")
    keys = [strings[k] for k in names.tolist()]
    if len(set(keys)) != len(keys):
        raise ArtifactError(f"{what} names an attr twice: {sorted(keys)}")
    return Attrs(dict(zip(keys, [values[j] for j in refs.tolist()])))


# -- small readers -------------------------------------------------------------------------------


def column(raw: Any, dt: type[np.generic]) -> np.ndarray:
    """A scalar vector as a numpy array (the generated ``...AsNumpy()`` returns 0 for an absent vector)."""
    return raw if isinstance(raw, np.ndarray) else np.zeros(0, dtype=dt)


def check_indices(idx: np.ndarray, n: int, what: str, table: str) -> None:
    """Every entry of an unsigned index column is below ``n``, the length of the table it indexes."""
    if len(idx) and int(idx.max()) >= n:
        i = int(np.argmax(idx >= n))
        raise ArtifactError(f"{what} {i}: {table} index {int(idx[i])} is out of range (the table has {n})")


def string_at(strings: list[str], index: int, what: str) -> str:
    if not 0 <= index < len(strings):
        raise ArtifactError(f"{what}: string index {index} is out of range (the table has {len(strings)})")
    return strings[index]


def text(raw: bytes | None, what: str) -> str:
    if raw is None:
        raise ArtifactError(f"{what} is missing")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ArtifactError(f"{what} is not valid UTF-8") from None


def dtype(code: int, what: str) -> DType:
    try:
        return DTYPES_BY_CODE[int(code)]
    except KeyError:
        raise ArtifactError(f"{what} has unknown dtype code {code}") from None


def expr(s: str, what: str) -> int | SymExpr:
    """A symbolic integer from its s-expression."""
    if len(s) > MAX_SEXPR_CHARS:
        raise ArtifactError(f"{what}: expression of {len(s)} characters is too long")
    if _has_product_of_sums(s):
        raise ArtifactError(f"{what}: expression {s[:80]!r} is not in canonical form (a product of sums)")
    try:
        return parse(s)
    except ShapeError as e:
        raise ArtifactError(f"{what}: {e}") from None


def _has_product_of_sums(s: str) -> bool:
    """Canonical expressions are sums of products; expanding a product of sums could take very long."""
    stack: list[str] = []
    for m in _PAREN.finditer(s):
        if m.group(0) == ")":
            if stack:
                stack.pop()
            continue
        if m.group(1) == "+" and stack and stack[-1] == "*":
            return True
        stack.append(m.group(1))
    return False
