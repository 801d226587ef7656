"""KernelBuilder: writes one Triton kernel, computing values through fused views and pointwise producers.

A template (pointwise, reduction, matmul, conv) decides the loop structure and the tiles; the builder turns
"the value %v at this per-dim index" into Triton statements. A value computed inside the kernel (its node is
in ``inline``) is expanded from its producer: views and sources become index arithmetic, elementwise ops
become expressions, gathers become bounds-checked indexed loads. Any other value is loaded from its buffer.
Statements are cached per (value, index, mask) inside the current block scope, so a value used twice is
computed once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.index import IndexSpace, by_strides, divisions, flatten, is_index_var
from aotc.ir.ops import ELEMENTWISE, Op
from aotc.ir.schedule import Size
from aotc.ir.symbolic import SymExpr, add, mul, sym, to_sexpr
from aotc.ir.symbolic_values import substitute
from aotc.ir.types import Node, Shape, Value
from aotc.kernels import index_text as ix
from aotc.kernels import strided_views, view_rules
from aotc.kernels.kernel_writer import KernelWriter
from aotc.kernels.pointwise_ops import TL_DTYPE, cast, elementwise, is_literal, literal

LINE = 132  # a load or store longer than this binds its offset (and then its mask) to a name of its own
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


class KernelBuilder(KernelWriter):
    """One kernel being generated. ``inline`` holds the ids of values this kernel computes itself;
    ``producers`` maps every value id to (node index, node)."""

    def __init__(
        self,
        graph: Graph,
        inline: Collection[int],
        producers: Mapping[int, tuple[int, Node]],
        flags: FlagSlots | None = None,
    ) -> None:
        super().__init__(graph, producers)
        self.inline = frozenset(inline)
        self.flags = flags or FlagSlots()
        self._view_stores: dict[int, list[tuple[Value, tuple[Node, ...]]]] = {}
        self._discard: set[int] = set()
        self.space = IndexSpace(graph.ranges, graph.multiples)
        self._atoms: dict[tuple[str, int | SymExpr, bool], SymExpr] = {}
        self._atom_text: dict[str, str] = {}
        # values a template reads elsewhere: value id -> (index -> the value and index the element comes from)
        self.redirects: dict[int, Callable[[Index], tuple[Value, Index]]] = {}

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
        if value.id in self.redirects:
            base, at = self.redirects[value.id](idx)
            return self.compute(base, at, mask, env, other)
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

    def stores_alone(self, value: Value) -> bool:
        """Whether ``store(value)`` writes ``value``'s own buffer and nothing else (no view output stored beside it,
        not discarded): what a template's tensor-descriptor store of it must be (``descriptor_store``)."""
        return not self._view_stores.get(value.id) and value.id not in self._discard

    def descriptor_store(
        self, value: Value, desc: str, at: str, var: str, region: Sequence[IndexItem], mask: str | None
    ) -> None:
        """``desc.store(at, var)``: tile ``var`` of ``value`` through tensor descriptor ``desc``, which the template
        made over ``value``'s buffer (``output_arg``). ``region`` (per-dim template variables, in range where
        ``mask`` keeps a lane) is what the box is clipped to: it counts toward the pointer's extents as the masked
        ``store`` would. Only for a value that ``stores_alone``."""
        if not self.stores_alone(value):
            raise UnsupportedError(f"a descriptor store of {value}: its store writes views of it too, or nothing")
        ptr = self.output_arg(value)
        idx = self._index(value, region)
        _, offset = self._offset_at(value, idx)
        self.reach.access(ptr, offset, mask, self._unsimplified(value, idx))
        self._stored.setdefault(var, ptr)
        self.line(f"{desc}.store({at}, {var})")

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
        self._stored.setdefault(var, ptr)
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

    def descriptor_base(
        self,
        value: Value,
        origin: Sequence[IndexItem],
        region: Sequence[IndexItem],
        mask: str | None,
        store: bool = False,
    ) -> tuple[str, str]:
        """The pointer arg of the buffer under ``value`` (itself, or the buffer its views read: a strided view,
        kernels/strided_views.py) and the offset text of ``value``'s element at ``origin`` in it, for a tensor
        descriptor whose box loads are clipped to ``region`` (per-dim template variables, in range where
        ``mask`` keeps a lane). The region, not the origin, counts toward the pointer's extents: it is what the
        descriptor's loads can touch, and an origin alone would claim an element of an empty value.
        ``store``: the descriptor's boxes store ``value``, a value this kernel computes, into its own buffer."""
        if store:
            memory, chain = value, ()
            self.output_arg(value)
        else:
            found = strided_views.view_chain(self, value)
            if isinstance(found, str):
                raise UnsupportedError(f"a tensor descriptor needs {value} in memory or a view of it: {found}")
            memory, chain = found
            if memory.id not in self.reads:
                self.reads.append(memory.id)
            if self._role and self._role[-1] not in self._roles.setdefault(memory.id, []):
                self._roles[memory.id].append(self._role[-1])
        for n in chain:  # the views are this kernel's too: their index math is in the descriptor's base
            self.nodes.add(self.producers[n.outputs[0].id][0])
        ptr = self.pointer_arg(memory)
        base, _ = self._offset_at(memory, strided_views.source(self, chain, self._index(value, origin)))
        full = strided_views.source(self, chain, self._index(value, region))
        _, at = self._offset_at(memory, full)
        self.reach.access(ptr, at, mask, self._unsimplified(memory, full))
        return ptr, base

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
            return self._loads(ptr, f"tl.load({ptr} + {ix.paren(off)})")
        if not _variables(index):  # one element for every lane: a tile pointer keeps the mask's shape
            off = ix.add(off, f"tl.zeros_like({mask}).to(tl.int32)")
        off, shown = self._spread(head, off, mask, f", other={other})")
        self.reach.access(ptr, at, mask, alt, self._site(value, ptr, off))
        return self._loads(ptr, f"tl.load({ptr} + {ix.paren(off)}, mask={shown}, other={other})")

    def _loads(self, ptr: str, load: str) -> str:
        """``load`` bound to a temporary that ``finish`` names after pointer ``ptr`` (``bias = tl.load(bias_ptr...``)."""
        name = self.let("v", load)
        self._loaded[name] = ptr
        return name

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


def _variables(e: int | SymExpr | Sequence[int | SymExpr]) -> set[str]:
    """The index variables ``e`` reads."""
    items = e if isinstance(e, (list, tuple)) else [e]
    return {n for x in items if isinstance(x, SymExpr) for n in x.free_symbols() if is_index_var(n)}


def numel(shape: Shape) -> Size:
    out: Size = 1
    for d in shape:
        out = mul(out, d)
    return out
