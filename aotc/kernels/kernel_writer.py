"""KernelWriter: the text of one Triton kernel: its statements and fresh names, block scopes, parameters, and
the finished ``Kernel`` record (pointers named by role and the values loaded or stored through them after
them, unread sizes dropped, out-of-range accesses clamped).

``emit.KernelBuilder`` extends it with the graph's values: what a template asks for at an index becomes the
statements written here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from aotc.errors import ShapeError
from aotc.ir.graph import Graph
from aotc.ir.launch import POINTER_TYPE
from aotc.ir.schedule import GRID_NAMES, Arg, ArgKind, Extents, IndexCheck, Kernel, Size
from aotc.ir.symbolic import SymExpr, sym, to_sexpr
from aotc.ir.symbolic_values import bounds, divisor, evaluate, substitute
from aotc.ir.templates import KernelKind
from aotc.ir.types import Node, Shape, Value
from aotc.kernels import index_text as ix
from aotc.kernels import naming
from aotc.kernels.reach import Reach, without

INT32_MAX = 2**31 - 1
IDENT = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
# Names the templates use as they are, plus Python and Triton names a size argument must not shadow.
_RESERVED = frozenset(
    "pid offs mask xoffs xmask roffs rmask r0 flags_ptr BLOCK XBLOCK RBLOCK tl triton range float int min max"
    " abs len sum None True False and or not in is if for while def return lambda grid_x grid_y grid_z".split()
)


@dataclass
class _Scope:
    cache: dict[tuple, str] = field(default_factory=dict)  # values computed here, by (value, index, mask)
    defs: dict[str, int | SymExpr] = field(default_factory=dict)  # index variables bound here, by name
    held: dict[int | SymExpr, str] = field(default_factory=dict)  # the same, by expression


class KernelWriter:
    """The statements and parameters of one kernel being generated; ``producers`` maps every value id to
    (node index, node)."""

    def __init__(self, graph: Graph, producers: Mapping[int, tuple[int, Node]]) -> None:
        self.graph = graph
        self.producers = producers
        self.args: list[Arg] = []
        self.checks: list[IndexCheck] = []
        self.nodes: set[int] = set()
        self.reads: list[int] = []
        self.writes: list[int] = []
        self._lines: list[str] = []
        self._depth = 1
        self._names: dict[str, int] = {}
        self._taken: set[str] = set(_RESERVED)
        self._guards: dict[str, frozenset[str]] = {}
        self._deps: dict[str, frozenset[str]] = {}
        self._arg_names: dict[tuple, str] = {}
        self._roles: dict[int, list[str]] = {}  # value id -> what the template reads it as (``reading_as``)
        self._role: list[str] = []
        self._bound: dict[str, str] = {}  # a name ``let`` bound -> its expression
        self._scopes: list[_Scope] = [_Scope()]
        self._ranges = graph.ranges
        self._multiples = graph.multiples
        self._index_lets: dict[str, int] = {}  # name -> its line
        # temporaries ``finish`` names after a pointer (``_name_values``): loads by the pointer they read, stored
        # values by the pointer they are first stored through
        self._loaded: dict[str, str] = {}
        self._stored: dict[str, str] = {}
        # final pointer names to give instead (a target's variant of a shared kernel takes that kernel's names)
        self.pointer_renames: Mapping[str, str] = {}
        # what the template's variables hold and every load and store's offset, for the kernel's Extents
        self.reach = Reach()

    # -- statements and names ------------------------------------------------------------------
    def line(self, text: str) -> None:
        self._lines.append("    " * self._depth + text)

    def fresh(self, stem: str) -> str:
        n = self._names.get(stem, 0)
        while f"{stem}{n}" in self._taken:
            n += 1
        self._names[stem] = n + 1
        self._taken.add(f"{stem}{n}")
        return f"{stem}{n}"

    def reserve(self, *names: str) -> None:
        """Keeps a template's fixed names (``acc``, ``offs``) from size arguments and fresh names."""
        self._taken.update(names)

    def let(self, stem: str, expr: str) -> str:
        """Binds ``expr`` to a fresh name (literals and plain names are returned as they are)."""
        if ix.is_int(expr) or ix.is_name(expr):
            return expr
        name = self.fresh(stem)
        self.line(f"{name} = {expr}")
        self._deps[name] = self._roots(expr)
        self._bound[name] = expr
        return name

    def is_tile(self, text: str) -> bool:
        """Whether ``text`` (a name ``let`` bound, through the names its expression reads) is a 2-D tile along both
        axes: it reads a variable placed on axis 0 (``offs_m[:, None]``) and one on axis 1 (``offs_k[None, :]``),
        so broadcasting gives it the full (BLOCK, BLOCK) shape and ``tl.broadcast_to`` would change nothing."""
        seen: set[str] = set()
        todo = [text]
        rows = cols = False
        while todo:
            t = todo.pop()
            rows, cols = rows or "[:, None]" in t, cols or "[None, :]" in t
            for n in IDENT.findall(t):
                if n in self._bound and n not in seen:
                    seen.add(n)
                    todo.append(self._bound[n])
        return rows and cols

    def rename(self, name: str, to: str) -> bool:
        """Gives the value ``let`` bound to ``name`` the template's name ``to`` (``q = tl.load(...)``) where that is
        safe: ``name`` is a value (no index variable), ``to`` is reserved by the template and not yet written."""
        if name not in self._bound or name in self._index_lets or self.reach.mentions(name):
            return False
        if any(to in IDENT.findall(t) for t in self._lines):
            return False
        self._lines = [ix.rename(t, {name: to}) for t in self._lines]
        self._loaded.pop(name, None)
        self._stored.pop(name, None)
        self._bound[to] = self._bound.pop(name)
        self._deps[to] = self._deps.pop(name)
        for scope in self._scopes:
            scope.cache = {k: to if v == name else v for k, v in scope.cache.items()}
        return True

    @contextlib.contextmanager
    def reading_as(self, role: str) -> Iterator[None]:
        """Loads from memory inside name their pointers by ``role`` (``q``, ``k``, ``v``: one buffer read in
        several roles is ``qkv_ptr``), unless it is a weight or a graph input, which keep their own names."""
        self._role.append(role)
        try:
            yield
        finally:
            self._role.pop()

    def guard(self, term: str, *roots: str) -> None:
        """Declares that mask term ``term`` only bounds the template variables ``roots``: a load whose address
        does not depend on them drops the term (a bias read under a 2-D tile mask loads one row, not a tile).
        Variables bound with ``let`` are tracked; any other name counts as depending on everything."""
        self._guards[term] = frozenset(roots)

    def _roots(self, expr: str) -> frozenset[str]:
        out: set[str] = set()
        for name in ix.names(expr):
            if name in self._deps:
                out |= self._deps[name]
            elif any(name in r for r in self._guards.values()):
                out.add(name)
            elif name not in self._arg_set():
                out.add("?")  # assigned by a template line: unknown
        return frozenset(out)

    def _arg_set(self) -> set[str]:
        return {a.name for a in self.args} | {"tl", "float", "BLOCK", "XBLOCK", "RBLOCK"}

    def _trim(self, mask: str, off: str) -> str | None:
        """``mask`` without the guard terms whose variables ``off`` does not depend on."""
        deps = self._roots(off)
        kept = [t for t in ix.and_terms(mask) if t not in self._guards or "?" in deps or deps & self._guards[t]]
        return " & ".join(ix.paren(t) for t in kept) if kept else None

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[None]:
        """``header:`` followed by an indented body; values computed inside stay inside."""
        self.line(f"{header}:")
        self._depth += 1
        self._scopes.append(_Scope())
        try:
            yield
        finally:
            self._scopes.pop()
            self._depth -= 1

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Like ``block`` with no header: values computed inside are computed again when needed after it (a
        recurrent template's step, so no load stays live across every step)."""
        self._scopes.append(_Scope())
        try:
            yield
        finally:
            self._scopes.pop()

    # -- arguments ------------------------------------------------------------------------------
    def wide(self, expr: Size) -> bool:
        """Whether ``expr`` may exceed int32 for some binding of the symbols."""
        lo, hi = bounds(expr, self._ranges, self._multiples)
        return hi > INT32_MAX or lo < -INT32_MAX

    def _unique(self, stem: str, compound: bool = False) -> str:
        """``stem``, or ``stem1``, ``stem2``...: the first that no name of the kernel holds (nor, for a size that is
        not one dim, a dim of the graph: an arg named after a dim passes that dim)."""
        taken = self._taken | (self._ranges.keys() if compound else set())
        name, n = stem, 0
        while name in taken:
            n += 1
            name = f"{stem}{n}"
        self._taken.add(name)
        return name

    def size_arg(self, expr: int | SymExpr, stem: str = "size") -> str:
        """Text for ``expr``: a literal, or an int argument named after its symbol, else by its role ``stem``
        (``n_elements``, ``M``)."""
        if isinstance(expr, int):
            return str(expr)
        key = ("size", to_sexpr(expr))
        if key not in self._arg_names:
            name = self._unique(expr.symbol_name if expr.is_symbol() else stem, not expr.is_symbol())
            self._arg_names[key] = name
            self.args.append(Arg(name, "i64" if self.wide(expr) else "i32", ArgKind.SIZE, size=expr))
        return self._arg_names[key]

    def arg(self, expr: Size) -> Size:
        """``expr`` over the kernel's own names (aotc/kernels/reach.py): an int, or its size arg's name. Only for
        sizes the kernel's text passes already (``size_arg``)."""
        return expr if isinstance(expr, int) else sym(self.size_arg(expr))

    def pointer_arg(self, value: Value) -> str:
        """The pointer argument of ``value``'s storage: a placeholder (``in_ptr0``) until ``finish`` names it by
        role (``_pointer_names``)."""
        key = ("ptr", value.id)
        if key not in self._arg_names:
            name = self.fresh("in_ptr" if value.id not in self.writes else "out_ptr")
            self._arg_names[key] = name
            self.args.append(Arg(name, POINTER_TYPE[value.type.dtype], ArgKind.BUFFER, value=value.id))
        return self._arg_names[key]

    def output_arg(self, value: Value) -> str:
        if value.id not in self.writes:
            self.writes.append(value.id)
        return self.pointer_arg(value)

    def flag_arg(self) -> str:
        key = ("flag",)
        if key not in self._arg_names:
            self._arg_names[key] = "flags_ptr"
            self.args.append(Arg("flags_ptr", "*i32", ArgKind.FLAG))
        return "flags_ptr"

    def dims(self, shape: Shape) -> list[str]:
        """Size text per dim for row-major offsets and unravelling, which never read the outermost size
        (so a symbolic outermost dim adds no argument)."""
        return [
            str(d) if k == 0 and isinstance(d, int) else "" if k == 0 else self.size_arg(d) for k, d in enumerate(shape)
        ]

    # -- the finished kernel ----------------------------------------------------------------------
    def source(self, name: str, constexprs: Sequence[tuple[str, int]], nodes: Sequence[int] = ()) -> str:
        """The kernel module: the imports, a comment naming the graph nodes it computes, the function (pointers,
        then sizes, then constexprs)."""
        params = [a.name for a in self.args] + [f"{c}: tl.constexpr" for c, _ in constexprs]
        head = ["import triton", "import triton.language as tl", "", "", *naming.header(name, self.graph, nodes)]
        head += ["@triton.jit", f"def {name}("] + [f"    {p}," for p in params] + ["):"]
        return "\n".join(head + _live(self._lines, self._index_lets)) + "\n"

    def _name_pointers(self) -> None:
        """Pointer placeholders (``in_ptr0``) renamed by role (aotc/kernels/naming.py), or as ``pointer_renames``
        says, in the text and the accesses."""
        holders = {a.name for a in self.args if a.kind is ArgKind.BUFFER}
        pointers = [(a.name, a.value, a.name.startswith("out_ptr")) for a in self.args if a.kind is ArgKind.BUFFER]
        taken = (self._taken - holders) | self._ranges.keys()
        mapping = naming.pointer_names(self.graph, self.producers, pointers, self._roles, taken)
        mapping = {k: self.pointer_renames.get(v, v) for k, v in mapping.items()}
        mapping = {k: v for k, v in mapping.items() if k != v}
        if not mapping:
            return
        self._taken.update(mapping.values())
        self._lines = [ix.rename(t, mapping) for t in self._lines]
        self.args = [dataclasses.replace(a, name=mapping.get(a.name, a.name)) for a in self.args]
        self._arg_names = {k: mapping.get(v, v) for k, v in self._arg_names.items()}
        self._loaded = {k: mapping.get(v, v) for k, v in self._loaded.items()}
        self._stored = {k: mapping.get(v, v) for k, v in self._stored.items()}
        self.reach.rename(mapping)

    def _name_values(self, constexprs: Sequence[tuple[str, int]]) -> None:
        """The builder's temporaries renamed by what they hold (aotc/kernels/naming.py ``value_names``): each load
        after its pointer (``bias = tl.load(bias_ptr + ...)``), each temporary the kernel stores after the pointer
        it is first stored through (``out``); other values keep ``t0``, ``t1``... Run once the pointers are named."""
        present = set(IDENT.findall("\n".join(self._lines)))
        values = [(n, p) for n, p in self._loaded.items() if n in present]
        values += [
            (n, p)
            for n, p in self._stored.items()
            if n in present and n not in self._loaded and n in self._bound and n not in self._index_lets
        ]
        if not values:
            return
        taken = present | self._taken | {a.name for a in self.args} | {c for c, _ in constexprs}
        mapping = naming.value_names(values, taken)
        self._taken.update(mapping.values())
        self._lines = [ix.rename(t, mapping) for t in self._lines]
        self.reach.rename(mapping)

    def _clamp_unbounded(self, constexprs: Sequence[tuple[str, int]], grid: tuple[Size, Size, Size]) -> bool:
        """Clamps into its value each load and store whose derived offsets fall outside it at the symbols' least
        or greatest binding (the plan checks would refuse the launch): interval arithmetic loses how the digits
        of a rolled, regrouped index fit together (Swin's shifted windows), and ``tl.minimum(tl.maximum(off, 0),
        numel - 1)`` changes nothing where the index math is right while keeping any lane inside its value
        whatever a file passes. Returns whether it clamped any."""
        lows_highs = self.reach.per_access(self.args, constexprs, grid, self._ranges, self._multiples)
        passed: dict[str, Size] = {a.name: a.size for a in self.args if a.kind is ArgKind.SIZE}
        passed.update(constexprs)
        passed.update(zip(GRID_NAMES, grid))
        lo_env = {n: r[0] for n, r in self._ranges.items()}
        hi_env = {n: r[1] for n, r in self._ranges.items()}
        clamped = False
        for k, (lo, hi) in enumerate(lows_highs):
            site = self.reach.accesses[k][4]
            if site is None:
                continue
            text, n = site
            try:
                glo, ghi = substitute(lo, passed), substitute(hi, passed)
                inside = all(
                    evaluate(glo, env) >= 0 and evaluate(ghi, env) < evaluate(n, env) for env in (lo_env, hi_env)
                )
            except ShapeError:
                inside = False
            if inside:
                continue
            pointer, _, offset = text.partition(" + ")
            top = self.size_arg(n, pointer.removesuffix("_ptr") + "_numel")
            clamp = f"{pointer} + tl.minimum(tl.maximum({offset}, 0), {top} - 1)"
            written = re.compile(re.escape(text) + r"(?!\w)")
            lines = [written.sub(lambda _, c=clamp: c, line) for line in self._lines]
            if lines == self._lines:  # not written as recorded: its extents stay as derived
                continue
            self._lines = lines
            self.reach.clamp(k, n if isinstance(n, int) else sym(top))
            clamped = True
        return clamped

    def _order_args(self) -> None:
        """Pointers first (read, then written, then the error flags), then sizes."""
        rank = {ArgKind.BUFFER: 0, ArgKind.FLAG: 2, ArgKind.SIZE: 3}
        self.args = sorted(
            self.args, key=lambda a: rank[a.kind] + (a.kind is ArgKind.BUFFER and a.value in self.writes)
        )

    def _drop_unread(self, extents: Extents) -> Extents:
        """Drops the size args no line reads (a dim a row-major offset named before it simplified away), from the
        args and the extents (``reach.without``)."""
        read = set(IDENT.findall("\n".join(self._lines)))
        unread = {a.name for a in self.args if a.kind is ArgKind.SIZE and a.name not in read}
        self.args, extents = without(self.args, extents, unread)
        return extents

    def finish(
        self,
        name: str,
        kind: KernelKind,
        grid: tuple[Size, Size, Size],
        constexprs: Sequence[tuple[str, int]] = (),
        num_warps: int = 4,
        num_stages: int = 2,
        extra_nodes: Collection[int] = (),
    ) -> Kernel:
        nodes = tuple(sorted(self.nodes | set(extra_nodes)))
        fused = tuple(self.graph.nodes[i].op.value for i in nodes)
        self._lines, self._index_lets = _live(self._lines, self._index_lets), {}
        self._name_pointers()
        self._name_values(constexprs)
        self._clamp_unbounded(constexprs, grid)
        self._order_args()
        extents = self._drop_unread(self.reach.extents(self.args, constexprs, grid, self._ranges, self._multiples))
        return Kernel(
            name=name,
            kind=kind,
            nodes=nodes,
            inputs=tuple(self.reads),
            outputs=tuple(self.writes),
            args=tuple(self.args),
            grid=grid,
            source=self.source(name, constexprs, nodes),
            constexprs=tuple(constexprs),
            num_warps=num_warps,
            num_stages=num_stages,
            divisible=self.divisible_args(),
            checks=tuple(self.checks),
            fused=fused,
            extents=extents,
        )

    def divisible_args(self) -> tuple[int, ...]:
        """Size args every binding makes a multiple of 16 (pointers are 16-aligned by the arena and loader)."""
        out = []
        for k, a in enumerate(self.args):
            if a.kind is ArgKind.SIZE and _multiple_of_16(a.size, self._multiples):
                out.append(k)
            elif a.kind in (ArgKind.BUFFER, ArgKind.FLAG):
                out.append(k)
        return tuple(out)


def _live(lines: list[str], lets: Mapping[str, int]) -> list[str]:
    """``lines`` without the index lets no other line reads (a dim index the simplified offsets never use)."""
    dead: set[int] = set()
    while True:
        unread = {
            i
            for name, i in lets.items()
            if i not in dead
            and not any(
                re.search(rf"(?<![\w.]){name}(?!\w)", t) for k, t in enumerate(lines) if k != i and k not in dead
            )
        }
        if not unread:
            return [t for k, t in enumerate(lines) if k not in dead]
        dead |= unread


def _multiple_of_16(e: Size, multiples: Mapping[str, int]) -> bool:
    return (e % 16 == 0 and e != 0) if isinstance(e, int) else divisor(e, multiples) % 16 == 0
