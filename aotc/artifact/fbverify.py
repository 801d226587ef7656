"""Structural verification of a FlatBuffer against schema.fbs, before any generated accessor reads it.

Python's flatbuffers package reads whatever offsets it finds; this module is the C++ ``Verifier`` for the
artifact, driven by the schema's tables (fbschema.py). It checks that:

- every table, vtable, vector and string lies inside the buffer and is aligned for what it holds;
- every vtable is a sane size (even, at least 4 bytes, no field the schema does not know) and every
  present field fits inside its table, aligned, without overlapping another field of that table;
- every string ends with its NUL terminator;
- required fields are present, and so is every scalar field the table's vtable has a slot for (the
  writer forces defaults; a vtable shorter than the schema's table is a file from before a field);
- no two objects (tables, vectors, strings) overlap or are the same object reached twice: the writer
  never shares anything but vtables, so a shared or overlapping object can only be damage;
- every byte belongs to an object or is alignment padding: zero, and less than 8 bytes at a time;
- tables nest no deeper than MAX_DEPTH and the buffer holds no more than MAX_OBJECTS objects.

Failures raise ArtifactError naming the table and field (``Artifact.variants[0].graph.node_ops``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from itertools import pairwise

from aotc.artifact.fbschema import SCALARS, FieldDef, Schema, artifact_schema
from aotc.artifact.pacing import pace
from aotc.errors import ArtifactError

MAX_DEPTH = 64
MAX_OBJECTS = 1_000_000
# The largest scalar, so the most padding the builder puts between two objects is MAX_ALIGN - 1 bytes.
MAX_ALIGN = 8

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")

# (position, size, what) of each integer the verifier read, and of each string's characters (what ends in
# " text"): how the mutation tests find every field.
SlotSink = Callable[[int, int, str], None]


def verify_flatbuffer(buf: bytes, schema: Schema | None = None, on_slot: SlotSink | None = None) -> int:
    """Check ``buf`` (a whole FlatBuffer) against ``schema`` (schema.fbs by default); returns the number
    of objects it holds. ``on_slot`` sees each offset, length, vtable entry and scalar field."""
    v = _Verifier(buf, schema or artifact_schema(), on_slot)
    v.root()
    return v.objects


# Where the verifier is, built cheaply and spelled out only for a message: a table name, or
# (parent, ".field") or (parent, index).
Where = str | tuple


def spell(where: Where) -> str:
    parts: list[str] = []
    while isinstance(where, tuple):
        parent, step = where
        parts.append(f"[{step}]" if isinstance(step, int) else step)
        where = parent
    return where + "".join(reversed(parts))


class _Verifier:
    def __init__(self, buf: bytes, schema: Schema, on_slot: SlotSink | None) -> None:
        self.buf = buf
        self.n = len(buf)
        self.schema = schema
        self.on_slot = on_slot
        self.objects = 0
        # start -> end of every table, vector and string; vtables apart, as tables may share one
        self.spans: dict[int, int] = {}
        self.vtables: dict[int, int] = {}
        # (vtable, table type, table position mod 8) -> (table size, the fields present, with their
        # offsets): tables that share a vtable are laid out alike, so each layout is checked once
        self.layouts: dict[tuple[int, str, int], tuple[int, list[tuple[int, FieldDef]]]] = {}
        # the same key -> the byte ranges of such a table that no field covers (padding, must be zero)
        self.gaps: dict[tuple[int, str, int], list[tuple[int, int]]] = {}

    def fail(self, where: Where, msg: str) -> ArtifactError:
        return ArtifactError(f"FlatBuffer is malformed: {spell(where)}: {msg}")

    def slot(self, pos: int, size: int, where: Where, what: str = "") -> None:
        if self.on_slot is not None:
            self.on_slot(pos, size, spell(where) + what)

    def u32(self, pos: int, where: Where) -> int:
        if pos < 0 or pos + 4 > self.n:
            raise self.fail(where, f"offset at {pos} is outside the {self.n}-byte buffer")
        if pos % 4:
            raise self.fail(where, f"offset at {pos} is not 4-byte aligned")
        return _U32.unpack_from(self.buf, pos)[0]

    def root(self) -> None:
        name = self.schema.root
        self.slot(0, 4, "root offset")
        self.table(self.u32(0, name), name, name, 0)
        self.check_layout()

    def claim(self, start: int, end: int, where: Where) -> None:
        self.objects += 1
        if not self.objects % 512:
            pace()  # see aotc/artifact/pacing.py
        if self.objects > MAX_OBJECTS:
            raise self.fail(where, f"more than {MAX_OBJECTS} objects")
        if start in self.spans:
            raise self.fail(where, f"the object at {start} is referenced a second time")
        self.spans[start] = end

    def table(self, pos: int, tname: str, where: Where, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise self.fail(where, f"tables nest deeper than {MAX_DEPTH} levels")
        buf, n = self.buf, self.n
        if pos % 4 or pos + 4 > n:
            raise self.fail(where, f"table at {pos} is misaligned or outside the {n}-byte buffer")
        vt = pos - _I32.unpack_from(buf, pos)[0]
        key = (vt, tname, pos % 8)
        layout = self.layouts.get(key)
        if layout is None:
            layout = self.layouts[key] = self.layout(pos, vt, tname, where)
            self.gaps[key] = _gaps(*layout)
        t_size, present = layout
        if pos + t_size > n:
            raise self.fail(where, f"table size {t_size} at {pos} runs past the buffer")
        for a, b in self.gaps[key]:
            if any(buf[pos + a : pos + b]):
                raise self.fail(where, f"the padding at table offset {a} is not zero")
        self.claim(pos, pos + t_size, where)
        if self.on_slot is not None:
            self.table_slots(pos, vt, tname, where)
        for off, f in present:
            if f.kind != "scalar":
                at = pos + off
                fwhere = (where, "." + f.name)
                target = at + _U32.unpack_from(buf, at)[0]
                if f.kind == "string":
                    self.string(target, fwhere)
                elif f.kind == "table":
                    self.table(target, f.table, fwhere, depth + 1)
                else:
                    self.vector(target, f, fwhere, depth)

    def layout(self, pos: int, vt: int, tname: str, where: Where) -> tuple[int, list[tuple[int, FieldDef]]]:
        """Check a vtable for a table of type ``tname`` at ``pos``: its size, and each field's presence,
        bounds, alignment and overlap. Returns the table size and the fields present."""
        buf, n = self.buf, self.n
        fields = self.schema.tables[tname]
        if vt < 0 or vt % 2 or vt + 4 > n:
            raise self.fail(where, f"vtable at {vt} is misaligned or outside the buffer")
        vt_size, t_size = _U16.unpack_from(buf, vt)[0], _U16.unpack_from(buf, vt + 2)[0]
        if vt_size < 4 or vt_size % 2 or vt + vt_size > n:
            raise self.fail(where, f"vtable size {vt_size} at {vt} is invalid")
        if t_size < 4:
            raise self.fail(where, f"table size {t_size} at {pos} is too small")
        if self.vtables.setdefault(vt, vt + vt_size) != vt + vt_size:
            raise self.fail(where, f"vtable at {vt} is read with two sizes")
        n_slots = (vt_size - 4) // 2
        for k in range(len(fields), n_slots):
            if _U16.unpack_from(buf, vt + 4 + 2 * k)[0]:
                raise self.fail(where, f"field {k} is not in the schema of table {tname}")
        present: list[tuple[int, FieldDef]] = []
        for k, f in enumerate(fields):
            off = _U16.unpack_from(buf, vt + 4 + 2 * k)[0] if k < n_slots else 0
            if not off:
                if f.required:
                    raise self.fail((where, "." + f.name), "required field is missing")
                # The writer forces defaults, so a scalar it knew of is always stored; one read as its
                # default because its slot was zeroed would be a silently different value. (A slot past
                # the vtable's end is a field added after the file was written: absent, legitimately.)
                if f.kind == "scalar" and k < n_slots:
                    raise self.fail((where, "." + f.name), "scalar field is absent (the writer stores every scalar)")
                continue
            size = f.size
            if off < 4 or off + size > t_size:
                raise self.fail(
                    (where, "." + f.name),
                    f"field at table offset {off} ({size} bytes) is outside the {t_size}-byte table",
                )
            if (pos + off) % size:
                raise self.fail((where, "." + f.name), f"field at {pos + off} is not {size}-byte aligned")
            present.append((off, f))
        present.sort(key=lambda p: p[0])
        for (a, fa), (b, fb) in pairwise(present):
            if b < a + fa.size:
                raise self.fail(where, f"fields {fa.name} and {fb.name} overlap")
        return t_size, present

    def table_slots(self, pos: int, vt: int, tname: str, where: Where) -> None:
        """Report the table's own integers (for the mutation tests)."""
        self.slot(pos, 4, where, " vtable offset")
        self.slot(vt, 2, where, " vtable size")
        self.slot(vt + 2, 2, where, " table size")
        n_slots = (_U16.unpack_from(self.buf, vt)[0] - 4) // 2
        for k, f in enumerate(self.schema.tables[tname]):
            if k < n_slots:
                self.slot(vt + 4 + 2 * k, 2, (where, "." + f.name), " vtable entry")
                off = _U16.unpack_from(self.buf, vt + 4 + 2 * k)[0]
                if off:
                    self.slot(pos + off, f.size, (where, "." + f.name), "" if f.kind == "scalar" else " offset")

    def vector_span(self, pos: int, elem_size: int, where: Where, extra: int = 0) -> int:
        """The element count of the vector at ``pos``, checked to fit (plus ``extra`` trailing bytes)."""
        length = self.u32(pos, where)
        self.slot(pos, 4, where, " length")
        end = pos + 4 + length * elem_size + extra
        if end > self.n:
            raise self.fail(where, f"{length} elements of {elem_size} bytes at {pos} run past the buffer")
        if elem_size > 4 and (pos + 4) % elem_size:
            raise self.fail(where, f"elements at {pos + 4} are not {elem_size}-byte aligned")
        self.claim(pos, end, where)
        return length

    def string(self, pos: int, where: Where) -> None:
        length = self.vector_span(pos, 1, where, extra=1)
        if self.buf[pos + 4 + length] != 0:
            raise self.fail(where, "string is not NUL-terminated")
        if self.on_slot is not None and length:
            self.slot(pos + 4, length, where, " text")  # the characters (the mutation tests edit them too)

    def vector(self, pos: int, f: FieldDef, where: Where, depth: int) -> None:
        if f.elem == "scalar":
            size = SCALARS[f.scalar][0]
            length = self.vector_span(pos, size, where)
            if self.on_slot is not None:
                for i in range(length):
                    self.slot(pos + 4 + i * size, size, (where, i))
            return
        length = self.vector_span(pos, 4, where)
        buf = self.buf
        if f.elem == "string" and self.on_slot is None:
            self.strings(pos, length, where)
            return
        for i in range(length):
            at = pos + 4 + 4 * i
            self.slot(at, 4, (where, i), " offset")
            target = at + _U32.unpack_from(buf, at)[0]
            if f.elem == "string":
                self.string(target, (where, i))
            else:
                self.table(target, f.table, (where, i), depth + 1)

    def strings(self, pos: int, length: int, where: Where) -> None:
        """The strings of the vector at ``pos``, as ``string`` checks each, in one loop: a string vector is the most
        common object (every column of names and expressions). Any string this loop does not find sound is
        checked again by ``string``, which raises the error that names what is wrong with it."""
        buf, n, spans, unpack = self.buf, self.n, self.spans, _U32.unpack_from
        for at in range(pos + 4, pos + 4 + 4 * length, 4):
            target = at + unpack(buf, at)[0]
            end = target + 4
            if target % 4 or end > n or (end := end + unpack(buf, target)[0]) >= n or buf[end] or target in spans:
                self.string(target, (where, (at - pos - 4) // 4))
                raise AssertionError("string() accepted what the loop refused")  # pragma: no cover
            self.objects += 1
            if not self.objects % 512:
                pace()
            spans[target] = end + 1
        if self.objects > MAX_OBJECTS:
            raise self.fail(where, f"more than {MAX_OBJECTS} objects")

    def check_layout(self) -> None:
        """Objects and vtables are disjoint (vtables may be shared, but only whole), and nothing lies
        between them but alignment padding (fewer than MAX_ALIGN zero bytes): an object nothing refers
        to any more (a vector shortened, a field cut off) is damage the writer never leaves."""
        spans = sorted([(0, 4), *self.spans.items(), *self.vtables.items()])
        spans.append((self.n, self.n))
        for (a, a_end), (b, _) in pairwise(spans):
            if b < a_end:
                raise self.fail(self.schema.root, f"the objects at {a} and {b} overlap")
            if b - a_end >= MAX_ALIGN or any(self.buf[a_end:b]):
                raise self.fail(self.schema.root, f"the {b - a_end} bytes at {a_end} belong to no object")


def _gaps(t_size: int, present: list[tuple[int, FieldDef]]) -> list[tuple[int, int]]:
    """The bytes of a table (after its vtable offset) that no present field covers: the builder's
    alignment padding, zero in every file it writes."""
    out, pos = [], 4
    for off, f in present:
        if off > pos:
            out.append((pos, off))
        pos = max(pos, off + f.size)
    if t_size > pos:
        out.append((pos, t_size))
    return out
