"""The tables every graph of an artifact shares (strings, tensor types, attr values, attr sets), decoded
once each and checked entry by entry, plus the small checked readers the decoder uses everywhere."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aotc.artifact.generated.ValueKind import ValueKind
from aotc.artifact.layout import DTYPES_BY_CODE, MAX_ATTR_DEPTH
from aotc.errors import ArtifactError, ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.symbolic import SymExpr, to_sexpr
from aotc.ir.symbolic_parse import parse
from aotc.ir.types import Attrs, TensorType

# Canonical expressions are short; a cap keeps a hostile file from making the parser do heavy work.
MAX_SEXPR_CHARS = 4096
_PAREN = re.compile(r"\(\s*([^\s()]*)|\)")
_DOUBLE = struct.Struct("<d")
_ZERO_DOUBLE = _DOUBLE.pack(0.0)

Counter = Callable[[int, str], int]


@dataclass(frozen=True)
class Tables:
    strings: list[str]
    types: list[TensorType]
    attr_values: list[Any]
    attr_sets: list[Attrs]
    # what each entry refers to, as stored: a type's dim strings; an attr value's string (-1: none) and
    # tuple items; an attr set's name strings and values. canonical.py checks the tables' order with them.
    type_dims: list[list[int]] = field(default_factory=list)
    value_refs: list[tuple[int, list[int]]] = field(default_factory=list)
    set_refs: list[tuple[list[int], list[int]]] = field(default_factory=list)


def decode_tables(root: Any, count: Counter) -> Tables:
    """The shared tables of the FlatBuffer ``root`` (an Artifact); ``count`` bounds each vector length.
    The writer interns every entry, so each table holding an entry twice is refused."""
    strings = [text(root.Strings(i), f"string {i}") for i in range(count(root.StringsLength(), "strings"))]
    _unique(strings, "string table", repr)
    exprs = _Exprs(strings)
    types = [exprs.tensor_type(root.Types(i), f"type {i}") for i in range(count(root.TypesLength(), "types"))]
    _unique(types, "type table", str)
    value_refs: list[tuple[int, list[int]]] = []
    values = _attr_values(root, exprs, count, value_refs)
    set_refs: list[tuple[list[int], list[int]]] = []
    sets = [
        _attr_set(root.AttrSets(i), strings, values, f"attr set {i}", set_refs)
        for i in range(count(root.AttrSetsLength(), "attr sets"))
    ]
    _unique(
        [(tuple(n), tuple(v)) for n, v in set_refs], "attr set table", lambda k: f"attrs {[strings[i] for i in k[0]]}"
    )
    return Tables(strings, types, values, sets, exprs.type_dims, value_refs, set_refs)


def _unique(entries: list[Any], table: str, show: Callable[[Any], str]) -> None:
    if len(set(entries)) == len(entries):
        return
    first: dict[Any, int] = {}
    for i, e in enumerate(entries):
        if first.setdefault(e, i) != i:
            raise ArtifactError(f"{table} holds {show(e)} twice (entries {first[e]} and {i})")


class _Exprs:
    """Parses each distinct string once, however many dims and attrs refer to it."""

    def __init__(self, strings: list[str]) -> None:
        self.strings = strings
        self._parsed: dict[int, int | SymExpr] = {}
        self.type_dims: list[list[int]] = []

    def __call__(self, index: int, what: str) -> int | SymExpr:
        e = self._parsed.get(index)
        if e is None:
            e = self._parsed[index] = expr(string_at(self.strings, index, what), what)
        return e

    def tensor_type(self, t: Any, what: str) -> TensorType:
        if t is None:
            raise ArtifactError(f"{what} is missing")
        shape = []
        dims = column(t.ShapeAsNumpy(), np.uint32).tolist()
        for index in dims:
            d = self(index, f"{what} shape")
            if isinstance(d, int) and d < 0:
                raise ArtifactError(f"{what} shape: negative dim {d}")
            shape.append(d)
        self.type_dims.append(dims)
        return TensorType(dtype(t.Dtype(), what), tuple(shape))


def _attr_values(root: Any, exprs: _Exprs, count: Counter, refs: list[tuple[int, list[int]]]) -> list[Any]:
    """Entries in order; a tuple refers only to earlier entries, so each is built from finished ones.
    Each entry sets exactly the fields its kind uses (the writer leaves the others at their defaults),
    so a kind changed under a field that stays set is caught rather than read as another value."""
    values: list[Any] = []
    levels: list[int] = []  # how deep each entry's tuples nest
    keys: dict[tuple[int, Any], int] = {}  # the writer's interning key: kind and value (a float by its bits)
    for i in range(count(root.AttrValuesLength(), "attr values")):
        v = root.AttrValues(i)
        what = f"attr value {i}"
        if v is None:
            raise ArtifactError(f"{what} is missing")
        kind, level, string, items = v.Kind(), 0, -1, []
        fields = _KIND_FIELDS.get(kind)
        if fields is None:
            raise ArtifactError(f"{what} has unknown value kind {kind}")
        stray = _stray_fields(v, fields)
        if stray:
            raise ArtifactError(f"{what}: kind {_KIND_NAMES[kind]} also sets {stray}")
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
            string = int(v.StrValue())
            x = string_at(exprs.strings, string, what)
        elif kind == ValueKind.Dtype:
            x = dtype(v.IntValue(), what)
        elif kind == ValueKind.Sym:
            string = int(v.StrValue())
            x = exprs(string, what)
            if not isinstance(x, SymExpr):
                raise ArtifactError(f"{what}: symbolic value {x} has no symbols")
        else:  # Tuple
            items = column(v.ItemsAsNumpy(), np.uint32).tolist()
            if any(j >= i for j in items):
                raise ArtifactError(f"{what}: a tuple may only hold earlier attr values, not {max(items)}")
            level = 1 + max((levels[j] for j in items), default=0)
            if level > MAX_ATTR_DEPTH:
                raise ArtifactError(f"{what}: tuples nest deeper than {MAX_ATTR_DEPTH} levels")
            x = tuple([values[j] for j in items])
        if kind == ValueKind.Float:
            key: tuple[int, Any] = (kind, _DOUBLE.pack(x))
        elif kind == ValueKind.Tuple:
            key = (kind, tuple(items))
        else:
            key = (kind, string if string >= 0 else x)
        if keys.setdefault(key, i) != i:
            raise ArtifactError(f"attr values {keys[key]} and {i} hold the same value {x!r}")
        values.append(x)
        levels.append(level)
        refs.append((string, items))
    return values


_KIND_NAMES = {v: k for k, v in vars(ValueKind).items() if not k.startswith("_")}
# The fields each kind sets; every other field must hold its default (items: absent).
_KIND_FIELDS: dict[int, frozenset[str]] = {
    ValueKind.Null: frozenset(),
    ValueKind.Int: frozenset({"int_value"}),
    ValueKind.Float: frozenset({"float_value"}),
    ValueKind.Bool: frozenset({"int_value"}),
    ValueKind.Str: frozenset({"str_value"}),
    ValueKind.Dtype: frozenset({"int_value"}),
    ValueKind.Sym: frozenset({"str_value"}),
    ValueKind.Tuple: frozenset({"items"}),
}


def _stray_fields(v: Any, fields: frozenset[str]) -> list[str]:
    stray = []
    if "int_value" not in fields and v.IntValue() != 0:
        stray.append("int_value")
    # by its bits: -0.0 and NaN are stray too
    if "float_value" not in fields and _DOUBLE.pack(v.FloatValue()) != _ZERO_DOUBLE:
        stray.append("float_value")
    if "str_value" not in fields and v.StrValue() != 0:
        stray.append("str_value")
    if ("items" in fields) == v.ItemsIsNone():
        stray.append("items" if "items" not in fields else "no items")
    return stray


def _attr_set(
    s: Any, strings: list[str], values: list[Any], what: str, out_refs: list[tuple[list[int], list[int]]]
) -> Attrs:
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
    if keys != sorted(keys):
        raise ArtifactError(f"{what} names its attrs out of order: {keys}")
    refs_l = refs.tolist()
    out_refs.append((names.tolist(), refs_l))
    return Attrs(dict(zip(keys, [values[j] for j in refs_l])))


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
        e = parse(s)
    except ShapeError as e:
        raise ArtifactError(f"{what}: {e}") from None
    # One text per expression, the writer's: a file the reader accepts is one the writer writes byte for byte.
    if to_sexpr(e) != s:
        raise ArtifactError(f"{what}: expression {s[:80]!r} is not written as the writer writes it ({to_sexpr(e)!r})")
    return e


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
