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
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops import ELEMENTWISE, Op
from aotc.ir.schedule import Arg, ArgKind, IndexCheck, Kernel, KernelKind, Size
from aotc.ir.symbolic import SymExpr, bounds, divisor, mul, to_sexpr
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
Index = tuple[str, ...]


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

    # -- values ---------------------------------------------------------------------------------
    def load(self, value: Value, index: Sequence[str], mask: str | None, other: str = "0.0") -> str:
        """``value`` at ``index``: loaded from memory, or computed through this kernel's fused producers."""
        var = self.compute(value, index, mask, {}, other)
        tiles = [i for i in index if not ix.is_int(i)]
        if is_literal(var) and tiles:
            # a template wants a tile (tl.dot takes no scalar): broadcast the constant over the index
            zero = " + ".join(f"{ix.paren(i)} * 0" for i in tiles)
            var = self.let("t", f"({zero}).to({TL_DTYPE[value.type.dtype]}) + {var}")
        return var

    def compute(
        self, value: Value, index: Sequence[str], mask: str | None, env: Mapping[int, str], other: str = "0.0"
    ) -> str:
        if value.id in env:
            return env[value.id]
        index = tuple(index)
        key = (value.id, index, mask)
        for scope in reversed(self._scopes):
            if key in scope.cache:
                return scope.cache[key]
        if value.id in self.inline:
            ni, node = self.producers[value.id]
            self.nodes.add(ni)
            var = self._node(node, value, index, mask, env)
        else:
            var = self._load_memory(value, index, mask, other)
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

    def store(self, value: Value, index: Sequence[str], var: str, mask: str | None) -> None:
        for output, chain in self._view_stores.get(value.id, ()):
            out_index = list(index)
            for n in chain:
                out_index = view_index.forward(self, n, out_index)
            self.store(output, out_index, var, mask)
        if value.id in self._discard:
            return
        ptr = self.output_arg(value)
        off = self.offset(value, index)
        if all(ix.is_int(i) for i in index) and mask is not None:
            off = ix.add(off, f"tl.zeros_like({mask}).to(tl.int32)")  # a tile pointer for a tile of values
        args = f"{ptr} + {ix.paren(off)}, {var}"
        self.line(f"tl.store({args}, mask={mask})" if mask else f"tl.store({args})")

    def offset(self, value: Value, index: Sequence[str]) -> str:
        """Row-major element offset; int64 arithmetic when the buffer may hold more than 2**31 elements."""
        index = list(index)
        if self.wide(numel(value.type.shape)):
            k = next((k for k, i in enumerate(index) if not ix.is_int(i)), None)
            if k is not None:
                index[k] = f"{ix.paren(index[k])}.to(tl.int64)"
        return ix.row_major(index, self.dims(value.type.shape))

    def _load_memory(self, value: Value, index: Index, mask: str | None, other: str) -> str:
        if value.id not in self.reads:
            self.reads.append(value.id)
        ptr = self.pointer_arg(value)
        off = self.offset(value, index)
        if not value.type.dtype.is_float:
            other = "0"
        if mask is not None:
            mask = self._trim(mask, off)
        if all(ix.is_int(i) for i in index) or mask is None:
            return self.let("v", f"tl.load({ptr} + {ix.paren(off)})")
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
            i = index[node.attrs.get("axis", 0) % len(out_shape)]
            if ix.is_int(i):
                return i
            return self.let("t", cast(ix.paren(i), DType.int32, value.type.dtype))
        rule = view_index.RULES.get(op)
        if rule is not None:
            return rule(self, node, index, mask, env)
        raise UnsupportedError(f"kernel builder cannot inline {op.value} (node {node})")

    # -- the finished kernel ----------------------------------------------------------------------
    def source(self, name: str, constexprs: Sequence[tuple[str, int]]) -> str:
        params = [a.name for a in self.args] + [f"{c}: tl.constexpr" for c, _ in constexprs]
        head = ["import triton", "import triton.language as tl", "", "", "@triton.jit", f"def {name}("]
        head += [f"    {p}," for p in params] + ["):"]
        return "\n".join(head + self._lines) + "\n"

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


def _multiple_of_16(e: Size, multiples: Mapping[str, int]) -> bool:
    return (e % 16 == 0 and e != 0) if isinstance(e, int) else divisor(e, multiples) % 16 == 0


def numel(shape: Shape) -> Size:
    out: Size = 1
    for d in shape:
        out = mul(out, d)
    return out
