"""The tables of schema.fbs as data, read from the schema file itself, for the structural verifier.

Parsing the one schema file (rather than restating its tables here) keeps a schema change one edit: add
a field or a table to schema.fbs and the verifier checks it. Only the constructs the schema uses are
understood (tables, enums, scalars, strings, vectors, the ``required`` attribute); anything else raises
at import, so a schema that grows a struct or a union makes this module grow with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

# FlatBuffers scalar type names -> (size in bytes, struct format).
SCALARS: dict[str, tuple[int, str]] = {
    "bool": (1, "B"),
    "byte": (1, "b"),
    "ubyte": (1, "B"),
    "int8": (1, "b"),
    "uint8": (1, "B"),
    "short": (2, "h"),
    "ushort": (2, "H"),
    "int16": (2, "h"),
    "uint16": (2, "H"),
    "int": (4, "i"),
    "uint": (4, "I"),
    "int32": (4, "i"),
    "uint32": (4, "I"),
    "float": (4, "f"),
    "float32": (4, "f"),
    "long": (8, "q"),
    "ulong": (8, "Q"),
    "int64": (8, "q"),
    "uint64": (8, "Q"),
    "double": (8, "d"),
    "float64": (8, "d"),
}


@dataclass(frozen=True)
class FieldDef:
    """One table field. ``kind`` is "scalar", "string", "table" or "vector"; a vector's elements are
    ``elem`` ("scalar", "string" or "table"). ``scalar`` names the scalar type (an enum's underlying
    type), ``table`` the table type of a table field or a vector of tables."""

    name: str
    kind: str
    scalar: str = ""
    elem: str = ""
    table: str = ""
    required: bool = False

    @property
    def size(self) -> int:
        """Bytes the field takes inside its table: the scalar, or a 4-byte offset."""
        return SCALARS[self.scalar][0] if self.kind == "scalar" else 4


@dataclass(frozen=True)
class Schema:
    tables: dict[str, tuple[FieldDef, ...]]
    root: str


_COMMENT = re.compile(r"//[^\n]*")
_DECL = re.compile(r"\b(table|struct|union|enum)\s+(\w+)\s*(?::\s*(\w+))?\s*\{([^}]*)\}", re.S)
_FIELD = re.compile(r"^(\w+)\s*:\s*(\[\s*\w+\s*\]|\w+)\s*(?:=\s*[^;(]+?)?\s*(?:\(([^)]*)\))?\s*$")


def parse_schema(text: str) -> Schema:
    """The tables of a FlatBuffers schema; raises ValueError on constructs this verifier doesn't know."""
    text = _COMMENT.sub("", text)
    enums: dict[str, str] = {}
    bodies: dict[str, str] = {}
    for kind, name, base, body in _DECL.findall(text):
        if kind == "enum":
            if base not in SCALARS:
                raise ValueError(f"enum {name} has underlying type {base!r}")
            enums[name] = base
        elif kind == "table":
            bodies[name] = body
        else:
            raise ValueError(f"schema declares a {kind} ({name}), which the structural verifier does not handle")
    root = re.search(r"\broot_type\s+(\w+)\s*;", text)
    if root is None or root.group(1) not in bodies:
        raise ValueError("schema has no root_type table")
    tables = {name: tuple(_field(f, enums, bodies, name) for f in _statements(body)) for name, body in bodies.items()}
    return Schema(tables, root.group(1))


def _statements(body: str) -> list[str]:
    return [s.strip() for s in body.split(";") if s.strip()]


def _field(decl: str, enums: dict[str, str], tables: dict[str, str], table: str) -> FieldDef:
    m = _FIELD.match(decl)
    if m is None:
        raise ValueError(f"table {table}: cannot parse field {decl!r}")
    name, ty, attrs = m.group(1), m.group(2), m.group(3) or ""
    flags = {a.split(":")[0].strip() for a in attrs.split(",") if a.strip()}
    if flags - {"required"}:
        raise ValueError(f"table {table} field {name}: attributes {sorted(flags - {'required'})} are not handled")
    required = "required" in flags
    if ty.startswith("["):
        inner = ty[1:-1].strip()
        elem = _type_kind(inner, enums, tables, f"{table}.{name}")
        scalar = enums.get(inner, inner) if elem == "scalar" else ""
        return FieldDef(name, "vector", scalar, elem, inner if elem == "table" else "", required)
    kind = _type_kind(ty, enums, tables, f"{table}.{name}")
    if kind == "scalar":
        if required:
            raise ValueError(f"table {table} field {name}: a scalar cannot be required")
        return FieldDef(name, "scalar", enums.get(ty, ty))
    return FieldDef(name, kind, table=ty if kind == "table" else "", required=required)


def _type_kind(ty: str, enums: dict[str, str], tables: dict[str, str], where: str) -> str:
    if ty in SCALARS or ty in enums:
        return "scalar"
    if ty == "string":
        return "string"
    if ty in tables:
        return "table"
    raise ValueError(f"{where}: unknown type {ty!r}")


@cache
def artifact_schema() -> Schema:
    """schema.fbs, shipped beside this module, parsed once."""
    return parse_schema(resources.files("aotc.artifact").joinpath("schema.fbs").read_text(encoding="utf-8"))
