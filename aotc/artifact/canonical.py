"""The shared tables (strings, types, attr values, attr sets) hold exactly what the writer's Interner puts
there, in its order: each entry first used where the writer would first have interned it, and every
entry used.

The writer interns while it walks the graphs (variants, then the source graph): per node its op name,
its output types (a type's dim strings before the type), its attr set (per attr, in name order, the
name and then the value; a tuple's items and a value's string before the value) and its location; after
a graph's nodes, its input types. Checking the same walk makes every reference in the file redundant
with the tables' order: a reference changed to another valid entry leaves an entry out of order or
unused, which the reader refuses, instead of decoding as a slightly different model.
"""

from __future__ import annotations

from collections.abc import Sequence

from aotc.artifact.tables import Tables
from aotc.errors import ArtifactError

_NAMES = ("strings", "types", "attr values", "attr sets")
_STR, _TYPE, _VALUE, _SET = range(4)


class InterningOrder:
    def __init__(self, tables: Tables) -> None:
        self.t = tables
        self.seen = [
            [False] * len(tables.strings),
            [False] * len(tables.types),
            [False] * len(tables.attr_values),
            [False] * len(tables.attr_sets),
        ]
        self.next = [0, 0, 0, 0]

    def _first(self, table: int, i: int) -> None:
        if i != self.next[table]:
            raise ArtifactError(
                f"the {_NAMES[table]} table is not in the order the writer makes: entry {i} is first used where "
                f"entry {self.next[table]} should be"
            )
        self.seen[table][i] = True
        self.next[table] += 1

    def string(self, i: int) -> None:
        if not self.seen[_STR][i]:
            self._first(_STR, i)

    def type(self, k: int) -> None:
        if not self.seen[_TYPE][k]:
            for d in self.t.type_dims[k]:
                self.string(d)
            self._first(_TYPE, k)

    def value(self, j: int) -> None:
        if not self.seen[_VALUE][j]:
            string, items = self.t.value_refs[j]
            for item in items:
                self.value(item)
            if string >= 0:
                self.string(string)
            self._first(_VALUE, j)

    def attr_set(self, s: int) -> None:
        if not self.seen[_SET][s]:
            names, values = self.t.set_refs[s]
            for name, value in zip(names, values):
                self.string(name)
                self.value(value)
            self._first(_SET, s)

    def graph(
        self,
        ops: Sequence[int],
        out_ends: Sequence[int],
        out_types: Sequence[int],
        attrs: Sequence[int],
        locs: Sequence[int],
        in_types: Sequence[int],
    ) -> None:
        """One graph's references, in the writer's order (node columns already range-checked)."""
        seen_str, seen_type, seen_set = self.seen[_STR], self.seen[_TYPE], self.seen[_SET]
        p = 0
        for op, q, attr_set, loc in zip(ops, out_ends, attrs, locs):
            if not seen_str[op]:
                self.string(op)
            for ty in out_types[p:q]:
                if not seen_type[ty]:
                    self.type(ty)
            if not seen_set[attr_set]:
                self.attr_set(attr_set)
            if not seen_str[loc]:
                self.string(loc)
            p = q
        for ty in in_types:
            self.type(ty)

    def finish(self) -> None:
        """Every entry was used."""
        for table, n in enumerate(self.next):
            if n != len(self.seen[table]):
                raise ArtifactError(f"{_NAMES[table]} entry {n} is not used by any graph")
