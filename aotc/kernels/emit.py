"""KernelBuilder: writes one Triton kernel, computing values through fused views and pointwise producers.

A template (pointwise, reduction, matmul, conv) decides the loop structure and the tiles; the builder turns
"the value %v at this per-dim index" into Triton statements. A value computed inside the kernel (its node is
in ``inline``) is expanded from its producer: views and sources become index arithmetic, elementwise ops
become expressions, gathers become bounds-checked indexed loads. Any other value is loaded from its buffer.
Statements are cached per (value, index, mask) inside the current block scope, so a value used twice is
computed once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from aotc.errors import ShapeError, UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.index import IndexSpace, by_strides, divisions, flatten, is_index_var
from aotc.ir.launch import POINTER_TYPE
from aotc.ir.ops import ELEMENTWISE, Op
from aotc.ir.schedule import GRID_NAMES, Arg, ArgKind, Extents, IndexCheck, Kernel, KernelKind, Size
from aotc.ir.symbolic import SymExpr, add, mul, sym, to_sexpr
from aotc.ir.symbolic_values import bounds, divisor, evaluate, substitute
from aotc.ir.types import Node, Shape, Value
from aotc.kernels import index_text as ix
from aotc.kernels import naming, view_rules
from aotc.kernels.pointwise_ops import TL_DTYPE, cast, elementwise, is_literal, literal
from aotc.kernels.reach import Reach, without

INT32_MAX = 2**31 - 1
LINE = 132  # a load or store longer than this binds its offset (and then its mask) to a name of its own
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
# Names the templates use as they are, plus Python and Triton names a size argument must not shadow.
_RESERVED = frozenset(
    "pid offs mask xoffs xmask roffs rmask r0 flags_ptr BLOCK XBLOCK RBLOCK tl triton range float int min max"
    " abs len sum None True False and or not in is if for while def return lambda grid_x grid_y grid_z".split()
)
# A per-dim index: Triton text from a template, or an index expression (see ``index_var``).
IndexItem = str | int | SymExpr
Index = tuple[int | SymExpr, ...]


@dataclass
class FlagSlots:
    """Hands out the error-flag slots of one schedule (one per bounds-checked gather)."""

    count: int = 0

    def take(self) -> int:
        self.count += 1
        return self.count - 1


@dataclass
class _Scope:
    cache: dict[tuple, str] = field(default_factory=dict)
    defs: dict[str, int | SymExpr] = field(default_factory=dict)  # index variables bound here, by name
    held: dict[int | SymExpr, str] = field(default_factory=dict)  # the same, by expression


class KernelBuilder:
    """One kernel being generated. ``inline`` holds the ids of values this kernel computes itself;
    ``producers`` maps every value id to (node index, node)."""

    def __init__(
        self,
        graph: Graph,
        inline: Collection[int],
        producers: Mapping[int, tuple[int, Node]],
        flags: FlagSlots | None = None,
    ) -> None:
        self.graph = graph
        self.inline = frozenset(inline)
        self.producers = producers
        self.flags = flags or FlagSlots()
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
        self._view_stores: dict[int, list[tuple[Value, tuple[Node, ...]]]] = {}
        self._discard: set[int] = set()
        self._deps: dict[str, frozenset[str]] = {}
        self._arg_names: dict[tuple, str] = {}
        self._roles: dict[int, list[str]] = {}  # value id -> what the template reads it as (``reading_as``)
        self._role: list[str] = []
        self._bound: dict[str, str] = {}  # a name ``let`` bound -> its expression
        self._scopes: list[_Scope] = [_Scope()]
        self._ranges = graph.ranges
        self._multiples = graph.multiples
        self.space = IndexSpace(graph.ranges, graph.multiples)
        self._atoms: dict[tuple[str, int | SymExpr, bool], SymExpr] = {}
        self._atom_text: dict[str, str] = {}
        self._index_lets: dict[str, int] = {}  # name -> its line
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
            for n in _IDENT.findall(t):
                if n in self._bound and n not in seen:
                    seen.add(n)
                    todo.append(self._bound[n])
        return rows and cols

    def rename(self, name: str, to: str) -> bool:
        """Gives the value ``let`` bound to ``name`` the template's name ``to`` (``q = tl.load(...)``) where that is
        safe: ``name`` is a value (no index variable), ``to`` is reserved by the template and not yet written."""
        if name not in self._bound or name in self._index_lets or self.reach.mentions(name):
            return False
        if any(to in _IDENT.findall(t) for t in self._lines):
            return False
        self._lines = [ix.rename(t, {name: to}) for t in self._lines]
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

    def names_of(self, e: int | SymExpr) -> int | SymExpr:
        """Index expression ``e`` as its printed text computes it, over the kernel's own names: each symbol its
        size arg, each index variable its template variable's placeholder."""
        if isinstance(e, int):
            return e
        env: dict[str, int | SymExpr] = {}
        for name in e.free_symbols():
            if is_index_var(name):
                env[name] = self.reach.var(self._atom_text[name])
            else:
                env[name] = sym(self.size_arg(sym(name)))
        return substitute(e, env)

    def _names_passed(self, e: int | SymExpr) -> int | SymExpr | None:
        """``names_of(e)`` when ``e`` or every symbol of it is a size arg already (None: it would add an arg)."""
        if isinstance(e, SymExpr) and not (e.free_symbols() & self.space.extents.keys()):
            whole = self._arg_names.get(("size", to_sexpr(e)))
            if whole is not None:
                return sym(whole)
        if not isinstance(e, int):
            for name in e.free_symbols():
                if not is_index_var(name) and ("size", to_sexpr(sym(name))) not in self._arg_names:
                    return None
        return self.names_of(e)

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

    # -- index expressions --------------------------------------------------------------------------
    def index_var(self, text: str, extent: Size, opaque: bool = False) -> int | SymExpr:
        """Template text ``text`` as an index expression: a variable over ``[0, extent)``, a fact that need only
        hold where the masks of its loads and stores keep a lane. A name bound by ``let_index`` gives its
        expression back (unless ``opaque``: a variable whose range a mask, not its expression, decides), a
        literal its int. What the text holds over the kernel's names is the template's to declare (``reach``)."""
        if ix.is_int(text):
            return int(text)
        for scope in reversed(self._scopes if not opaque else ()):
            if text in scope.defs:
                return scope.defs[text]
        key = (text, extent, opaque)
        var = self._atoms.get(key)
        if var is None:  # one variable per extent: the same text may index dims of other sizes elsewhere
            var = self.space.var(f"v{len(self._atoms)}", extent)
            self._atoms[key] = var
            self._atom_text[var.symbol_name] = text
        return var

    def let_index(self, stem: str, e: int | SymExpr) -> str:
        """Binds index expression ``e`` to a fresh name; later index math that contains ``e`` reads the name."""
        e = self.simplify(e)
        text = self.index_text(e)
        name = self.let(stem, text)
        if name != text:  # a line was written: ``source`` drops it again if nothing reads the name
            self._index_lets[name] = len(self._lines) - 1
        if ix.is_name(name) and not isinstance(e, int):
            self._scopes[-1].defs[name] = e
            self._scopes[-1].held[e] = name
        return name

    def simplify(self, e: int | SymExpr) -> int | SymExpr:
        """``e`` simplified over the index ranges. Merging the digits of an unravelled index back saves the
        ``//`` and ``%`` that split it, unless variables already hold the digits: then it takes the merged
        form only if that needs no more divisions than the digits it replaces."""
        merged = self.space.simplify(e)
        held = self._held()
        if not held:
            return merged
        plain = self.space.simplify(e, merge=False)
        return plain if divisions(plain, held) < divisions(merged, held) else merged

    def index_text(self, e: int | SymExpr, wide: bool = False) -> str:
        """Triton text for index expression ``e``: symbols become size arguments, variables their text."""
        return ix.to_triton(e, _Names(self), self.space, self._held(), wide)

    def _held(self) -> dict[int | SymExpr, str]:
        return {k: v for scope in self._scopes for k, v in scope.held.items()}

    def _index(self, value: Value, index: Sequence[IndexItem]) -> Index:
        shape = value.type.shape
        return tuple(self.index_var(i, shape[k]) if isinstance(i, str) else i for k, i in enumerate(index))

    # -- values ---------------------------------------------------------------------------------
    def load(self, value: Value, index: Sequence[IndexItem], mask: str | None, other: str = "0.0") -> str:
        """``value`` at ``index``: loaded from memory, or computed through this kernel's fused producers."""
        var = self.compute(value, index, mask, {}, other)
        tiles = [i for i in index if isinstance(i, str) and not ix.is_int(i)]
        if is_literal(var) and tiles:
            # a template wants a tile (tl.dot takes no scalar): broadcast the constant over the index
            zero = " + ".join(f"{ix.paren(i)} * 0" for i in tiles)
            var = self.let("t", f"({zero}).to({TL_DTYPE[value.type.dtype]}) + {var}")
        return var

    def compute(
        self, value: Value, index: Sequence[IndexItem], mask: str | None, env: Mapping[int, str], other: str = "0.0"
    ) -> str:
        """Like ``load``; values in ``env`` are taken as already computed at ``index``. A text index entry is
        a template's variable, in range for ``value``'s dim wherever ``mask`` keeps a lane."""
        if value.id in env:
            return env[value.id]
        idx = self._index(value, index)
        key = (value.id, idx, mask)
        for scope in reversed(self._scopes):
            if key in scope.cache:
                return scope.cache[key]
        if value.id in self.inline:
            ni, node = self.producers[value.id]
            self.nodes.add(ni)
            var = self._node(node, value, idx, mask, env)
        else:
            var = self._load_memory(value, idx, mask, other)
        self._scopes[-1].cache[key] = var
        return var

    def store_view(self, base: Value, output: Value, chain: Sequence[Node]) -> None:
        """Whenever ``base`` is stored, also store ``output`` = the permute/flip/reshape ``chain`` of it, at the
        index the views move each element to (a graph output that is a transpose is written, not copied)."""
        self._view_stores.setdefault(base.id, []).append((output, tuple(chain)))
        for n in chain:
            self.nodes.add(self.producers[n.outputs[0].id][0])

    def discard(self, value: Value) -> None:
        """``store(value)`` then writes only its view outputs (nothing else reads ``value`` itself)."""
        self._discard.add(value.id)

    def store(self, value: Value, index: Sequence[IndexItem], var: str, mask: str | None) -> None:
        idx = self._index(value, index)
        for output, chain in self._view_stores.get(value.id, ()):
            out_index: list[int | SymExpr] = list(idx)
            for n in chain:
                out_index = view_rules.forward(self, n, out_index)
            self.store(output, out_index, var, mask)
        if value.id in self._discard:
            return
        ptr = self.output_arg(value)
        off, at = self._offset_at(value, idx)
        if mask is not None and not _variables(idx):
            off = ix.add(off, f"tl.zeros_like({mask}).to(tl.int32)")  # a tile pointer for a tile of values
        off, shown = self._spread(f"tl.store({ptr} + ", off, mask, f", {var})")
        self.reach.access(ptr, at, mask, self._unsimplified(value, idx), self._site(value, ptr, off))
        args = f"{ptr} + {ix.paren(off)}, {var}"
        self.line(f"tl.store({args}, mask={shown})" if mask else f"tl.store({args})")

    def _spread(self, head: str, off: str, mask: str | None, tail: str) -> tuple[str, str | None]:
        """The offset and mask of a load or store written ``head + off + mask + tail``, each bound to a name of its
        own (``off0``, ``mask0``) while the statement would run past ``LINE``."""

        def width(o: str, m: str | None) -> int:
            return len("    " * self._depth + head + ix.paren(o) + (f", mask={m}" if m else "") + tail)

        if width(off, mask) <= LINE:
            return off, mask
        off = self.let("off", off)
        if mask is not None and width(off, mask) > LINE:
            mask = self.let("mask", mask)
        return off, mask

    def offset(self, value: Value, index: Sequence[IndexItem], mask: str | None = None) -> str:
        """Row-major element offset, simplified over the index ranges and printed dim by dim (Horner form);
        int64 arithmetic when the buffer may hold more than 2**31 elements. The template's own load or store
        through it counts toward the pointer's extents, in-mask lanes only."""
        full = self._index(value, index)
        off, at = self._offset_at(value, full)
        self.reach.access(self._arg_names[("ptr", value.id)], at, mask, self._unsimplified(value, full))
        return off

    def _offset_at(self, value: Value, index: Index) -> tuple[str, int | SymExpr]:
        """The offset's text and the same offset over the kernel's own names (``names_of``)."""
        shape = value.type.shape
        # an index is in range wherever the mask keeps a lane, so a dim of size 1 is read at 0
        flat = self.simplify(flatten([0 if ix.is_one(d) else i for i, d in zip(index, shape)], shape))
        wide = self.wide(numel(shape))
        parts = by_strides(flat, shape)
        dims = self.dims(shape)
        off = ix.row_major([self.index_text(p, wide) for p in parts], dims)
        at: int | SymExpr = 0
        for k, (p, d) in enumerate(zip(parts, dims)):  # as row_major prints it, with the dims' own args
            at = add(mul(at, int(d) if ix.is_int(d) else sym(d)) if k else at, self.names_of(p))
        # A variable simplified away still shapes the tile: ``x * 0`` keeps the pointer as wide as the index
        # (a template's tl.dot needs its full tile), and the mask terms that guard it (folded when compiled).
        lost = sorted(_variables(index) - _variables(flat))
        if lost:
            off = ix.add(off, " + ".join(f"{ix.paren(self._atom_text[v])} * 0" for v in lost))
        return off, at

    def _unsimplified(self, value: Value, index: Index) -> tuple[Size, tuple[tuple[Size, Size], ...]] | None:
        """The offset as the per-dim indices give it before simplification, over the kernel's names, and what
        each index variable must hold for the printed offset to equal it (``Reach.access``); None where that
        would need a size arg the kernel does not pass."""
        shape = value.type.shape
        dims = self.dims(shape)
        at: int | SymExpr = 0
        for k, (i, d) in enumerate(zip(index, shape)):
            part = self._names_passed(0 if ix.is_one(d) else i)
            if part is None:
                return None
            at = add(mul(at, int(dims[k]) if ix.is_int(dims[k]) else sym(dims[k])) if k else at, part)
        within = []
        for v in sorted(_variables(index)):
            extent = self._names_passed(self.space.extents[v])
            if extent is None:
                return None
            within.append((self.reach.var(self._atom_text[v]), extent))
        return at, tuple(within)

    def _site(self, value: Value, ptr: str, off: str) -> tuple[str, Size]:
        """Where a load or store is written (its pointer's text) and its value's element count, for a clamp."""
        return f"{ptr} + {ix.paren(off)}", numel(value.type.shape)

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

    def _load_memory(self, value: Value, index: Index, mask: str | None, other: str) -> str:
        if value.id not in self.reads:
            self.reads.append(value.id)
        if self._role and self._role[-1] not in self._roles.setdefault(value.id, []):
            self._roles[value.id].append(self._role[-1])
        ptr = self.pointer_arg(value)
        off, at = self._offset_at(value, index)
        if not value.type.dtype.is_float:
            other = "0"
        if mask is not None:
            mask = self._trim(mask, off)
        alt = self._unsimplified(value, index)
        head = f"v0 = tl.load({ptr} + "  # the value's name aside
        if all(isinstance(i, int) for i in index) or mask is None:
            off, _ = self._spread(head, off, None, ")")
            self.reach.access(ptr, at, None, alt, self._site(value, ptr, off))
            return self.let("v", f"tl.load({ptr} + {ix.paren(off)})")
        if not _variables(index):  # one element for every lane: a tile pointer keeps the mask's shape
            off = ix.add(off, f"tl.zeros_like({mask}).to(tl.int32)")
        off, shown = self._spread(head, off, mask, f", other={other})")
        self.reach.access(ptr, at, mask, alt, self._site(value, ptr, off))
        return self.let("v", f"tl.load({ptr} + {ix.paren(off)}, mask={shown}, other={other})")

    # -- one node -------------------------------------------------------------------------------
    def _node(self, node: Node, value: Value, index: Index, mask: str | None, env: Mapping[int, str]) -> str:
        op = node.op
        out_shape = value.type.shape
        if op in ELEMENTWISE:
            args = [
                self.compute(x, view_rules.broadcast_index(x.type.shape, out_shape, index), mask, env)
                for x in node.inputs
            ]
            if op is Op.CAST:
                return self.let("t", cast(args[0], node.inputs[0].type.dtype, value.type.dtype))
            operand_dtype = node.inputs[-1].type.dtype
            return self.let("t", elementwise(op, args, operand_dtype, value.type.dtype, lambda e: self.let("t", e)))
        if op is Op.FULL:
            v = node.attrs["value"]
            if isinstance(v, SymExpr):
                return self.let("t", f"{self.size_arg(v)}.to({TL_DTYPE[value.type.dtype]})")
            return literal(v, value.type.dtype)
        if op is Op.IOTA:
            i = self.simplify(index[node.attrs.get("axis", 0) % len(out_shape)])
            if isinstance(i, int):
                return str(i)
            return self.let("t", cast(ix.paren(self.index_text(i)), DType.int32, value.type.dtype))
        rule = view_rules.RULES.get(op)
        if rule is not None:
            return rule(self, node, index, mask, env)
        raise UnsupportedError(f"kernel builder cannot inline {op.value} (node {node})")

    # -- the finished kernel ----------------------------------------------------------------------
    def source(self, name: str, constexprs: Sequence[tuple[str, int]], nodes: Sequence[int] = ()) -> str:
        """The kernel module: the imports, a comment naming the graph nodes it computes, the function (pointers,
        then sizes, then constexprs)."""
        params = [a.name for a in self.args] + [f"{c}: tl.constexpr" for c, _ in constexprs]
        head = ["import triton", "import triton.language as tl", "", "", *naming.header(name, self.graph, nodes)]
        head += ["@triton.jit", f"def {name}("] + [f"    {p}," for p in params] + ["):"]
        return "\n".join(head + _live(self._lines, self._index_lets)) + "\n"

    def _name_pointers(self) -> None:
        """Pointer placeholders (``in_ptr0``) renamed by role (aotc/kernels/naming.py), in the text and the accesses."""
        holders = {a.name for a in self.args if a.kind is ArgKind.BUFFER}
        pointers = [(a.name, a.value, a.name.startswith("out_ptr")) for a in self.args if a.kind is ArgKind.BUFFER]
        taken = (self._taken - holders) | self._ranges.keys()
        mapping = naming.pointer_names(self.graph, self.producers, pointers, self._roles, taken)
        mapping = {k: v for k, v in mapping.items() if k != v}
        if not mapping:
            return
        self._taken.update(mapping.values())
        self._lines = [ix.rename(t, mapping) for t in self._lines]
        self.args = [dataclasses.replace(a, name=mapping.get(a.name, a.name)) for a in self.args]
        self._arg_names = {k: mapping.get(v, v) for k, v in self._arg_names.items()}
        self.reach.rename(mapping)

    def _order_args(self) -> None:
        """Pointers first (read, then written, then the error flags), then sizes."""
        rank = {ArgKind.BUFFER: 0, ArgKind.FLAG: 2, ArgKind.SIZE: 3}
        self.args = sorted(
            self.args, key=lambda a: rank[a.kind] + (a.kind is ArgKind.BUFFER and a.value in self.writes)
        )

    def _drop_unread(self, extents: Extents) -> Extents:
        """Drops the size args no line reads (a dim a row-major offset named before it simplified away), from the
        args and the extents (``reach.without``)."""
        read = set(_IDENT.findall("\n".join(self._lines)))
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


class _Names(Mapping[str, str]):
    """Triton text of the names in an index expression: a variable's template text, a symbol's size argument
    (added on first use, so only the symbols an expression still holds after simplifying become arguments)."""

    def __init__(self, builder: KernelBuilder) -> None:
        self.builder = builder

    def __getitem__(self, name: str) -> str:
        if is_index_var(name):
            return self.builder._atom_text[name]
        return self.builder.size_arg(sym(name))

    def __iter__(self) -> Iterator[str]:
        return iter(self.builder._atom_text)

    def __len__(self) -> int:
        return len(self.builder._atom_text)


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


def _variables(e: int | SymExpr | Sequence[int | SymExpr]) -> set[str]:
    """The index variables ``e`` reads."""
    items = e if isinstance(e, (list, tuple)) else [e]
    return {n for x in items if isinstance(x, SymExpr) for n in x.free_symbols() if is_index_var(n)}


def _multiple_of_16(e: Size, multiples: Mapping[str, int]) -> bool:
    return (e % 16 == 0 and e != 0) if isinstance(e, int) else divisor(e, multiples) % 16 == 0


def numel(shape: Shape) -> Size:
    out: Size = 1
    for d in shape:
        out = mul(out, d)
    return out
