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
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.index import IndexSpace, by_strides, divisions, flatten, is_index_var, to_triton
from aotc.ir.ops import ELEMENTWISE, Op
from aotc.ir.schedule import Arg, ArgKind, IndexCheck, Kernel, KernelKind, Size
from aotc.ir.symbolic import SymExpr, bounds, divisor, mul, sym, to_sexpr
from aotc.ir.types import Node, Shape, Value
from aotc.kernels import index_text as ix
from aotc.kernels import view_index
from aotc.kernels.pointwise_ops import POINTER_TYPE, TL_DTYPE, cast, elementwise, is_literal, literal

INT32_MAX = 2**31 - 1
# Names the templates use as they are, plus Python and Triton names a size argument must not shadow.
_RESERVED = frozenset(
    "pid offs mask xoffs xmask roffs rmask r0 flags_ptr BLOCK XBLOCK RBLOCK tl triton range float int min max"
    " abs len sum None True False and or not in is if for while def return lambda".split()
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
        self._scopes: list[_Scope] = [_Scope()]
        self._ranges = graph.ranges
        self._multiples = graph.multiples
        self.space = IndexSpace(graph.ranges, graph.multiples)
        self._atoms: dict[tuple[str, int | SymExpr], SymExpr] = {}
        self._atom_text: dict[str, str] = {}
        self._index_lets: dict[str, int] = {}  # name -> its line

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
        return name

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

    def size_arg(self, expr: int | SymExpr, stem: str = "size") -> str:
        """Text for ``expr``: a literal, or an int argument (named after the symbol, else ``stem``)."""
        if isinstance(expr, int):
            return str(expr)
        key = ("size", to_sexpr(expr))
        if key not in self._arg_names:
            stem = expr.symbol_name if expr.is_symbol() else stem
            if expr.is_symbol() and stem not in self._taken:
                name = stem
                self._taken.add(name)
            else:
                name = self.fresh(stem + "_")
            self._arg_names[key] = name
            self.args.append(Arg(name, "i64" if self.wide(expr) else "i32", ArgKind.SIZE, size=expr))
        return self._arg_names[key]

    def pointer_arg(self, value: Value) -> str:
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
    def index_var(self, text: str, extent: Size) -> int | SymExpr:
        """Template text ``text`` as an index expression: a variable over ``[0, extent)``, a fact that need only
        hold where the masks of its loads and stores keep a lane. A name bound by ``let_index`` gives its
        expression back, a literal its int."""
        if ix.is_int(text):
            return int(text)
        for scope in reversed(self._scopes):
            if text in scope.defs:
                return scope.defs[text]
        key = (text, extent)
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
        return to_triton(e, _Names(self), self.space, self._held(), wide)

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
                out_index = view_index.forward(self, n, out_index)
            self.store(output, out_index, var, mask)
        if value.id in self._discard:
            return
        ptr = self.output_arg(value)
        off = self._offset(value, idx)
        if mask is not None and not _variables(idx):
            off = ix.add(off, f"tl.zeros_like({mask}).to(tl.int32)")  # a tile pointer for a tile of values
        args = f"{ptr} + {ix.paren(off)}, {var}"
        self.line(f"tl.store({args}, mask={mask})" if mask else f"tl.store({args})")

    def offset(self, value: Value, index: Sequence[IndexItem]) -> str:
        """Row-major element offset, simplified over the index ranges and printed dim by dim (Horner form);
        int64 arithmetic when the buffer may hold more than 2**31 elements."""
        return self._offset(value, self._index(value, index))

    def _offset(self, value: Value, index: Index) -> str:
        shape = value.type.shape
        # an index is in range wherever the mask keeps a lane, so a dim of size 1 is read at 0
        flat = self.simplify(flatten([0 if ix.is_one(d) else i for i, d in zip(index, shape)], shape))
        wide = self.wide(numel(shape))
        off = ix.row_major([self.index_text(p, wide) for p in by_strides(flat, shape)], self.dims(shape))
        # A variable simplified away still shapes the tile: ``x * 0`` keeps the pointer as wide as the index
        # (a template's tl.dot needs its full tile), and the mask terms that guard it (folded when compiled).
        lost = sorted(_variables(index) - _variables(flat))
        return ix.add(off, " + ".join(f"{ix.paren(self._atom_text[v])} * 0" for v in lost)) if lost else off

    def _load_memory(self, value: Value, index: Index, mask: str | None, other: str) -> str:
        if value.id not in self.reads:
            self.reads.append(value.id)
        ptr = self.pointer_arg(value)
        off = self._offset(value, index)
        if not value.type.dtype.is_float:
            other = "0"
        if mask is not None:
            mask = self._trim(mask, off)
        if all(isinstance(i, int) for i in index) or mask is None:
            return self.let("v", f"tl.load({ptr} + {ix.paren(off)})")
        if not _variables(index):  # one element for every lane: a tile pointer keeps the mask's shape
            off = ix.add(off, f"tl.zeros_like({mask}).to(tl.int32)")
        return self.let("v", f"tl.load({ptr} + {ix.paren(off)}, mask={mask}, other={other})")

    # -- one node -------------------------------------------------------------------------------
    def _node(self, node: Node, value: Value, index: Index, mask: str | None, env: Mapping[int, str]) -> str:
        op = node.op
        out_shape = value.type.shape
        if op in ELEMENTWISE:
            args = [
                self.compute(x, view_index.broadcast_index(x.type.shape, out_shape, index), mask, env)
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
        rule = view_index.RULES.get(op)
        if rule is not None:
            return rule(self, node, index, mask, env)
        raise UnsupportedError(f"kernel builder cannot inline {op.value} (node {node})")

    # -- the finished kernel ----------------------------------------------------------------------
    def source(self, name: str, constexprs: Sequence[tuple[str, int]]) -> str:
        params = [a.name for a in self.args] + [f"{c}: tl.constexpr" for c, _ in constexprs]
        head = ["import triton", "import triton.language as tl", "", "", "@triton.jit", f"def {name}("]
        head += [f"    {p}," for p in params] + ["):"]
        return "\n".join(head + _live(self._lines, self._index_lets)) + "\n"

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
        return Kernel(
            name=name,
            kind=kind,
            nodes=nodes,
            inputs=tuple(self.reads),
            outputs=tuple(self.writes),
            args=tuple(self.args),
            grid=grid,
            source=self.source(name, constexprs),
            constexprs=tuple(constexprs),
            num_warps=num_warps,
            num_stages=num_stages,
            divisible=self.divisible_args(),
            checks=tuple(self.checks),
            fused=fused,
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
