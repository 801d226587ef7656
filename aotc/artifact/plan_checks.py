"""Checks on launch plans and kernel code that the writer (before it writes) and the reader (after it
decodes) share: a plan the writer accepts is exactly a plan the reader accepts.

Every expression parses as the graph's (no index variables), names only the variant's symbols and has
sound bounds (``ir.symbolic.bounds``: a divisor that may be <= 0 is refused). Per launch (and per
architecture variant of it):

- its nodes and what it reads: ``inputs`` are the values its nodes read from outside the launch, its
  ``outputs`` values its nodes compute (a scatter also reads what it updates in place);
- its buffer args: one per value it reads or writes, and an ``out_ptr`` arg exactly for each value it
  writes; no write reaches the storage of a graph input or weight, through views or not;
- dataflow order: every value it reads is an input, a weight, or written by an earlier launch;
- its size args: each is a dim the kernel's values give (a symbol, a product of some of one value's
  dims, a concat position or a node's symbolic attr, or the negative of one); an arg named after a dim
  passes that dim;
- its grid: each dim non-negative, within CUDA's limits (x < 2**31, y and z < 2**16) and within what its
  outputs need (the grid column of its template's row in aotc/ir/templates.py: what the template launches
  for the launch's nodes and block sizes);
- its index-check slots: distinct, and ``flags`` counts exactly the schedule's slots;
- (a bound plan: schema 6, and every plan the writer writes) its digest: ``aotc.ir.digest.launch_digest`` of the
  nodes it fuses (ops, attrs, types, how they connect), the graph's symbols, its code, args, grid, checks and
  extents, recomputed from the graph; a graph edited under kernels that do not follow it is refused;
- (bound) its extents (``Extents``, derived from the code's index math when it was generated): with what the
  launch passes substituted for its size args, constexprs and grid, each of those lies in the interval the
  extents assume, each fact they rest on holds, and each pointer's smallest element offset is >= 0 and its
  largest below its value's element count (a flag arg's: below ``flags``). A size arg swapped for another dim,
  a changed block size or a grid past the tiles its program ids decode into is refused here.

The memory plan: each buffer's offset is a multiple of 256 for every binding of the symbols (proved with
``ir.symbolic.divisor`` from the symbols' ``multiple_of``); its lifetime covers the launches that write and
read it; it holds exactly its value's bytes, lies inside the arena and overlaps no buffer live at the same
time; the arena ends where its last buffer does (give or take alignment), so a call allocates no more than
its buffers take. Views join storage acyclically, never with an arena buffer, and a view has its base's
bytes. The kernel code and its binaries are checked in ``code_checks``.

Facts about sizes (buffer sizes and offsets, grids, views) are proved over the symbols' whole ranges
(``ir.symbolic.prove_nonneg``), not only at their ends. A fact the symbolic layer cannot prove is
evaluated at two bindings, every symbol at its maximum and every symbol at its minimum (each rounded to its
``multiple_of``), and refused if it fails there; otherwise it is returned as a ``Fact`` that the runtime
checks once per shape, on every backend (aotc/runtime/plan_bounds.py). Guards may narrow the symbols
further; the ranges hold every binding a call can have.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from aotc.artifact.code_checks import FLAG_TYPE, SIZE_TYPES, fail
from aotc.errors import ArtifactError, ShapeError
from aotc.ir.digest import DIGEST_BYTES, DigestCache, launch_digest
from aotc.ir.graph import Graph
from aotc.ir.launch import POINTER_TYPE
from aotc.ir.ops import Op
from aotc.ir.schedule import (
    ALIGN,
    GRID_LIMITS,
    GRID_NAMES,
    ArgKind,
    Buffer,
    Extents,
    Kernel,
    Schedule,
    Size,
    grid_need,
    same_launch,
)
from aotc.ir.symbolic import SymExpr, add, mul, smax, smin, to_infix
from aotc.ir.symbolic_values import bounds, divisor, evaluate, prove_nonneg, reduce_quotients, substitute
from aotc.ir.types import Node, Shape, TensorType, Value

# The prefix codegen names a pointer it stores through (STYLE.md 7: parameters named by role).
OUT_PTR = "out_ptr"

GRAPH_FEATURES = ("graph",)
# "kernels": launch plans and kernel code; "binaries": cubins and PTX (absent when compiled with no targets)
KERNEL_FEATURES = ("kernels", "binaries")
# Named by files whose launches carry per-target variants (schema >= 4).
ARCH_VARIANTS = "arch_variants"
KNOWN_KERNEL_FEATURES = (*KERNEL_FEATURES, ARCH_VARIANTS)
_TARGET = re.compile(r"sm_[0-9]{2,3}")
_BUFFER, _SIZE, _FLAG, _SCATTER = ArgKind.BUFFER, ArgKind.SIZE, ArgKind.FLAG, Op.SCATTER  # enum lookups, once


def refuse(what: str, check: str, msg: str) -> ArtifactError:
    """A plan check that failed: ``what`` names the variant and the launch (index and kernel) or buffer."""
    return ArtifactError(f"{what}: {check} check failed: {msg}")


@dataclass(frozen=True, slots=True)
class Fact:
    """``expr >= 0`` must hold at every binding a call runs at. The symbolic layer could not prove it over the
    symbols' whole ranges (it holds at the two bindings checked at load), so the runtime checks it once per
    shape (aotc/runtime/plan_bounds.py)."""

    what: str  # the variant and the launch or buffer, as in a refusal
    check: str  # the check's name
    claim: str  # what must hold, for the message
    expr: Size
    launch: int = -1  # a grid fact: the launch, and the kernel code (the launch's own or an
    code: str = ""  # architecture variant's) whose grid it bounds; "" for a fact of every plan

    def refusal(self, env: Mapping[str, int], value: int) -> ArtifactError:
        return refuse(self.what, self.check, f"{self.claim} is false at {dict(env)} ({to_infix(self.expr)} = {value})")


@dataclass(frozen=True, slots=True)
class PlanFacts:
    """What a verified plan leaves to check per shape."""

    what: str = ""
    facts: tuple[Fact, ...] = ()
    # the arena's buffers when no two live at once were proved apart: swept per shape (``check_disjoint``)
    live: tuple[Buffer, ...] = ()


Claim = str | Callable[[], str]  # what a fact says, for messages; a callable is formatted only when needed


def _text(claim: Claim) -> str:
    return claim if isinstance(claim, str) else claim()


class _Memo:
    """Results per expression, found by identity: a decoded file parses each distinct text to one object (and
    its graphs share interned types), so repeated layers hit without hashing expression trees. Each entry
    keeps its key alive, so an id is never reused while it is cached."""

    def __init__(self, compute: Callable[[Size], object]) -> None:
        self.compute = compute
        self.table: dict[int, tuple[object, object]] = {}

    def __call__(self, e: Size) -> object:
        hit = self.table.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        v = self.compute(e)
        self.table[id(e)] = (e, v)
        return v


class Space:
    """A variant's symbols: their ranges, multiples and the two bindings the memory plan is checked at.
    Bounds, proofs and values at the two bindings are computed once per expression."""

    def __init__(self, graph: Graph) -> None:
        self.ranges = {s.name: (s.min, s.max) for s in graph.symbols}
        self.multiples = {s.name: s.multiple_of for s in graph.symbols}
        m = self.multiples
        self.at_max = {s.name: s.max // m[s.name] * m[s.name] for s in graph.symbols}
        self.at_min = {s.name: -(-s.min // m[s.name]) * m[s.name] for s in graph.symbols}
        self._bounds = _Memo(lambda e: bounds(e, self.ranges, self.multiples))
        self._at = _Memo(lambda e: (evaluate(e, self.at_max), evaluate(e, self.at_min)))
        self._proved = _Memo(self._prove)
        self._divisor = _Memo(lambda e: divisor(e, self.multiples))
        self._le: dict[tuple[int, int], tuple[Size, Size]] = {}

    def check(self, e: Size, what: str, nonneg: bool = False) -> tuple[int, int]:
        """``e``'s bounds; refuses unknown symbols, divisors that may be <= 0, and (``nonneg``) an expression
        whose lower bound is negative and which is negative at the symbols' max or min."""
        hit = self._bounds.table.get(id(e))
        if hit is not None and hit[0] is e:  # checked before
            lohi: tuple[int, int] = hit[1]  # type: ignore[assignment]
        elif isinstance(e, bool) or not isinstance(e, (int, SymExpr)):
            raise fail(what, f"expected an integer expression, got {type(e).__name__}")
        elif isinstance(e, int):
            lohi = (e, e)
        else:
            unknown = sorted(e.free_symbols() - self.ranges.keys())
            if unknown:
                raise fail(what, f"expression {e} uses symbols {unknown} the variant does not declare")
            try:
                lohi = self._bounds(e)  # type: ignore[assignment]
            except ShapeError as err:
                raise fail(what, f"expression {e}: {err}") from None
        if nonneg and lohi[0] < 0:
            # interval bounds are loose for some sound expressions (cdiv(b*(s+127)*8, 1024) - b): check the two
            # bindings the memory plan is checked at
            for env, v in zip(self.bindings(), self.at(e)):
                if v < 0:
                    raise fail(what, f"expression {e} is negative ({v}) at {dict(env)}")
        return lohi

    def bindings(self) -> tuple[Mapping[str, int], Mapping[str, int]]:
        return self.at_max, self.at_min

    def at(self, e: Size) -> tuple[int, int]:
        """``e`` at the symbols' max and at their min."""
        return (e, e) if isinstance(e, int) else self._at(e)  # type: ignore[return-value]

    def aligned(self, e: Size) -> bool:
        """Whether ``e`` is a multiple of ALIGN for every binding."""
        return (e if isinstance(e, int) else self._divisor(e)) % ALIGN == 0  # type: ignore[operator]

    def _prove(self, e: Size) -> bool:
        try:
            return prove_nonneg(e, self.ranges, self.multiples)
        except ShapeError:
            return False

    def proved(self, e: Size) -> bool:
        """Whether ``e >= 0`` for every binding in the ranges (False: not proved)."""
        return e >= 0 if isinstance(e, int) else self._proved(e)  # type: ignore[return-value]

    def require(
        self, e: Size, facts: list[Fact], what: str, check: str, claim: Claim, per_shape: bool = False, **where: object
    ) -> None:
        """``e >= 0`` for every binding: proved, else refused where it fails at the two bindings, else a Fact.
        ``per_shape``: a fact that may fail where the ranges are wide and hold at the shapes calls have (a grid
        within CUDA's limits) is left to the call without trying the two bindings."""
        if self.proved(e):
            return
        for env, v in zip(self.bindings(), self.at(e) if not per_shape else ()):
            if v < 0:
                raise refuse(what, check, f"{_text(claim)} is false: {to_infix(e)} is negative ({v}) at {dict(env)}")
        facts.append(Fact(what, check, _text(claim), e, **where))  # type: ignore[arg-type]

    def at_most(
        self, a: Size, b: Size, facts: list[Fact], what: str, check: str, claim: Claim, **where: object
    ) -> None:
        """``a <= b`` for every binding (see ``require``)."""
        if a is b:
            return
        key = (id(a), id(b))
        hit = self._le.get(key)
        if hit is not None and hit[0] is a and hit[1] is b:
            return
        if a != b:
            diff = add(b, mul(a, -1))
            self.require(diff, facts, what, check, claim, **where)
            if not self.proved(diff):
                return
        self._le[key] = (a, b)  # equal or proved: keeps both alive, so the ids stay theirs


class _Plan:
    """One variant's plan being checked: the graph's values, storage roots and the memo tables."""

    def __init__(self, graph: Graph, s: Schedule, what: str) -> None:
        self.graph, self.s, self.what = graph, s, what
        self.space = Space(graph)
        self.values: dict[int, Value] = {v.id: v for v in graph.inputs}
        self.consts: set[int] = set()
        for n in graph.nodes:
            for o in n.outputs:
                self.values[o.id] = o
            if n.op is Op.CONSTANT:
                self.consts.update(o.id for o in n.outputs)
        self.dtypes = {vid: v.type.dtype for vid, v in self.values.items()}
        self.inputs = {v.id for v in graph.inputs}
        self.outputs = {v.id for v in graph.outputs}
        self.facts: list[Fact] = []
        self.roots: dict[int, int] = {}  # a view's value -> the value whose storage it shares
        self._bytes: dict[int, tuple[TensorType, Size]] = {}
        self._needs: dict[tuple, tuple[str, tuple, tuple[Size, Size, Size]]] = {}
        self._sizes: dict[tuple, tuple[Size, bool]] = {}
        self._grids: dict[tuple, tuple[tuple, tuple]] = {}
        self.digests = DigestCache()
        self._extents: dict[tuple, tuple] = {}  # launches whose extents were proved, by identity of what they hold
        self._subst: dict[tuple, tuple] = {}
        self._numel: dict[int, tuple[TensorType, Size]] = {}

    def root(self, vid: int) -> int:
        return self.roots.get(vid, vid)

    def nbytes(self, vid: int) -> Size:
        t = self.values[vid].type
        hit = self._bytes.get(id(t))  # types are interned: by identity (the graph keeps them alive)
        if hit is not None and hit[0] is t:
            return hit[1]
        n: Size = t.dtype.itemsize
        for d in t.shape:
            n = mul(n, d)
        self._bytes[id(t)] = (t, n)
        return n

    def numel(self, vid: int) -> Size:
        t = self.values[vid].type
        hit = self._numel.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        n: Size = 1
        for d in t.shape:
            n = mul(n, d)
        self._numel[id(t)] = (t, n)
        return n


def check_schedule(graph: Graph, s: Schedule, what: str, bound: bool | None = None) -> PlanFacts:
    """Everything a variant's plan refers to exists in ``graph``; its launches read, write and run as the graph
    allows; its grids and memory plan are sound for every binding of the symbols. Returns what is left to
    check per shape, which ``plan_facts`` also gives the runtime for this graph and schedule.

    ``bound``: every launch carries a digest and extents, which are checked (the writer; files of schema 6);
    False: none is read (files of schema 3-5); None: as the plan says, all launches or none (plans made in
    this process)."""
    if bound is None:
        bound = any(k.digest or k.extents is not None for k in s.kernels)
    try:
        out = _check_schedule(graph, s, what, bound)
    except ShapeError as e:  # an expression the symbolic layer refuses to build or evaluate (far too large)
        raise fail(what, f"its sizes cannot be checked: {e}") from None
    _remember(graph, s, out)
    return out


def _check_schedule(graph: Graph, s: Schedule, what: str, bound: bool) -> PlanFacts:
    p = _Plan(graph, s, what)
    space = p.space
    if isinstance(s.flags, bool) or not isinstance(s.flags, int) or s.flags < 0:
        raise fail(what, f"flags must be a non-negative int, got {s.flags!r}")
    fixed = p.consts | p.inputs | p.outputs
    buffered: set[int] = set()
    for j, b in enumerate(s.buffers):
        bw = f"{what} buffer {j}"
        if b.value not in p.dtypes or b.value in fixed:
            raise fail(bw, f"value %{b.value} is not an intermediate of the graph")
        if b.value in buffered:
            raise fail(bw, f"value %{b.value} has two buffers")
        buffered.add(b.value)
        if not 0 <= b.first <= b.last < len(s.kernels):
            raise fail(bw, f"lifetime {b.first}..{b.last} is not within the {len(s.kernels)} launches")
        space.check(b.nbytes, f"{bw} nbytes", nonneg=True)
        space.check(b.offset, f"{bw} offset", nonneg=True)
        if not space.aligned(b.offset):
            raise fail(bw, f"offset {b.offset} is not provably a multiple of {ALIGN}")
    _check_views(p, buffered)
    read_only = {p.root(v) for v in p.consts | p.inputs}
    homes = buffered | {p.root(v) for v in p.outputs}
    slots: set[int] = set()
    written: set[int] = set()  # roots written by the launches so far
    first: dict[int, int] = {}  # value -> first launch writing it
    last: dict[int, int] = {}  # value -> last launch reading or writing it
    for i, k in enumerate(s.kernels):
        kw = f"{what} launch {i} ({k.name})"
        nodes = _check_launch(p, k, read_only, slots, kw)
        for vid in k.inputs:
            if p.root(vid) not in read_only and p.root(vid) not in written:
                raise refuse(kw, "dataflow order", f"it reads value %{vid} before any launch writes it")
            last[vid] = i
        for vid in k.outputs:
            if p.root(vid) not in homes:
                raise refuse(kw, "buffer args", f"it writes value %{vid}, which has no arena buffer nor output storage")
            written.add(p.root(vid))
            first.setdefault(vid, i)
            last[vid] = i
        _check_grids(p, i, k, nodes, kw)
        if bound:
            _check_binding(p, i, k, nodes, kw)
    if len(slots) != s.flags:  # the runtime sizes each call's flag array by it
        raise refuse(what, "flag slots", f"flags is {s.flags}, but its launches check {len(slots)} slots")
    for o in graph.outputs:
        if p.root(o.id) not in read_only and p.root(o.id) not in written:
            raise refuse(what, "dataflow order", f"graph output %{o.id} is written by no launch")
    space.check(s.arena_bytes, f"{what} arena_bytes", nonneg=True)
    space.require(s.arena_bytes, p.facts, what, "arena", "arena_bytes >= 0")
    live = _check_arena(p)
    for j, b in enumerate(s.buffers):
        if b.value not in first:
            raise refuse(f"{what} buffer {j}", "buffer lifetime", f"no launch writes its value %{b.value}")
        if b.first > first[b.value] or b.last < last[b.value]:
            raise refuse(
                f"{what} buffer {j}",
                "buffer lifetime",
                f"lifetime {b.first}..{b.last} does not cover launches {first[b.value]}..{last[b.value]}, "
                f"which write and read value %{b.value}",
            )
    if not all(isinstance(d, str) for d in s.declined):
        raise fail(what, "declined reasons must be strings")
    return PlanFacts(what, tuple(p.facts), live)


def _check_views(p: _Plan, buffered: set[int]) -> None:
    """Views join a graph output to the storage of another value: acyclic, never an arena buffer's, with
    the same bytes as their base."""
    views: set[int] = set()
    for j, v in enumerate(p.s.views):
        vw = f"{p.what} view {j}"
        if v.value not in p.outputs or v.value in views or v.value in buffered:
            raise fail(vw, f"value %{v.value} is not a graph output stored once")
        if v.base not in p.dtypes:
            raise fail(vw, f"base %{v.base} is not a value of the graph")
        views.add(v.value)
        p.roots[v.value] = v.base
    for j, v in enumerate(p.s.views):
        vw = f"{p.what} view {j}"
        root, path = v.value, {v.value}
        while root in p.roots:
            root = p.roots[root]
            if root in path:
                raise refuse(vw, "views", f"views form a cycle through value %{root}")
            path.add(root)
        if root in buffered:
            raise refuse(vw, "views", f"value %{v.value} would share the arena buffer of value %{root}")
        a, b = p.nbytes(v.value), p.nbytes(v.base)
        p.space.at_most(a, b, p.facts, vw, "views", f"value %{v.value} has at most the bytes of its base %{v.base}")
        p.space.at_most(b, a, p.facts, vw, "views", f"base %{v.base} has at most the bytes of value %{v.value}")
    for vid in list(p.roots):  # path-compress, so root() is one lookup
        r = vid
        while r in p.roots:
            r = p.roots[r]
        p.roots[vid] = r


def _check_launch(p: _Plan, k: Kernel, read_only: set[int], slots: set[int], what: str) -> _LaunchNodes:
    graph, space, dtypes = p.graph, p.space, p.dtypes
    n = len(graph.nodes)
    if any(not 0 <= i < n for i in k.nodes) or list(k.nodes) != sorted(set(k.nodes)):
        raise fail(what, f"nodes {list(k.nodes)[:8]} are not increasing indices below {n}")
    nodes = _LaunchNodes([graph.nodes[i] for i in k.nodes])
    if tuple(k.fused) != nodes.fused:
        raise fail(what, f"fused ops {list(k.fused)} are not those of its nodes {list(nodes.fused)}")
    for vid in (*k.inputs, *k.outputs):
        if vid not in dtypes:
            raise fail(what, f"reads or writes value %{vid}, which is not in the graph")
    for vid in k.outputs:
        if p.root(vid) in read_only:
            raise fail(what, f"writes value %{vid}, a graph input or constant (or a view of one)")
    nodes.check_reads(k, what)
    has_flag = False
    pointers: dict[int, str] = {}
    for j, a in enumerate(k.args):
        aw = f"{what} arg {j} ({a.name})"
        if a.kind is _BUFFER:
            if a.value not in dtypes:
                raise fail(aw, f"value %{a.value} is not in the graph")
            if a.type != POINTER_TYPE[dtypes[a.value]]:
                raise fail(aw, f"type {a.type} does not fit value %{a.value} of dtype {dtypes[a.value].value}")
            if a.size != 0:
                raise fail(aw, f"a buffer arg has size {a.size}")
            if a.value in pointers:
                raise refuse(aw, "buffer args", f"value %{a.value} is also passed as {pointers[a.value]}")
            pointers[a.value] = a.name
            writes = a.name.startswith(OUT_PTR)  # the kernel stores through it
            if a.value in k.outputs and not writes:
                raise refuse(aw, "buffer args", f"the launch writes value %{a.value}, but the kernel's arg is {a.name}")
            if a.value in k.inputs and writes and a.value not in k.outputs:
                raise refuse(
                    aw, "buffer args", f"the kernel stores through {a.name}, but the launch only reads %{a.value}"
                )
            if a.value not in k.inputs and a.value not in k.outputs:
                raise refuse(aw, "buffer args", f"value %{a.value} is neither read nor written by the launch")
        elif a.kind is _SIZE:
            if a.type not in SIZE_TYPES or a.value != -1:
                raise fail(aw, f"a size arg has type {a.type} and value {a.value}")
            space.check(a.size, aw)
            _check_size_arg(p, a.name, a.size, nodes, aw)
        elif a.kind is _FLAG:
            if a.type != FLAG_TYPE or a.value != -1 or a.size != 0:
                raise fail(aw, f"a flag arg must be {FLAG_TYPE} with no value or size")
            has_flag = True
        else:
            raise fail(aw, f"unknown arg kind {a.kind!r}")
    if pointers.keys() != {*k.inputs, *k.outputs}:
        missing = sorted({*k.inputs, *k.outputs} - pointers.keys())
        extra = sorted(pointers.keys() - {*k.inputs, *k.outputs})
        raise refuse(
            what, "buffer args", f"its buffer args miss values {missing} and pass values {extra} it does not use"
        )
    if len(k.grid) != 3:
        raise fail(what, f"grid has {len(k.grid)} dims, expected 3")
    for d, g in enumerate(k.grid):
        space.check(g, f"{what} grid[{d}]", nonneg=True)
    if bool(k.checks) != has_flag:
        raise fail(what, "a launch has a flag arg exactly when it has index checks")
    for c in k.checks:
        if not 0 <= c.slot < p.s.flags or c.slot in slots:
            raise fail(what, f"index check slot {c.slot} is taken or not below the schedule's {p.s.flags} flags")
        slots.add(c.slot)
        if not isinstance(c.input, str) or not isinstance(c.op, str):
            raise fail(what, "an index check's input and op must be strings")
        space.check(c.low, f"{what} check low")
        space.check(c.high, f"{what} check high")
    archs: set[str] = set()
    for v in k.variants:
        vw = f"{what} variant {v.arch!r}"
        if not isinstance(v.arch, str) or not _TARGET.fullmatch(v.arch) or v.arch in archs:
            raise fail(vw, "expected a target such as 'sm_90', once per launch")
        archs.add(v.arch)
        if v.kernel.variants or not same_launch(k, v.kernel):
            raise fail(vw, "its kernel does not take the launch's args, nodes, reads, writes and checks")
        if len(v.kernel.grid) != 3:
            raise fail(vw, f"grid has {len(v.kernel.grid)} dims, expected 3")
        for d, g in enumerate(v.kernel.grid):
            space.check(g, f"{vw} grid[{d}]", nonneg=True)
    return nodes


class _LaunchNodes:
    """The nodes a launch computes, walked once: their ops, the values they compute and read, and (for the
    size args and the grid) the identity of every op, attr set and type they hold."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.fused = tuple(node.op.value for node in nodes)
        self.produced = {o.id for node in nodes for o in node.outputs}
        self.consumed = {x.id for node in nodes for x in node.inputs}
        scatters = [node for node in nodes if node.op is _SCATTER]
        self.scatter_in = {x.id for node in scatters for x in node.inputs}
        self.scatter_out = {o.id for node in scatters for o in node.outputs}
        self._held: tuple[int, ...] | None = None

    def held(self) -> tuple[int, ...]:
        """Each node's op, attr set and the types of its inputs and outputs, by identity (the reader interns
        types and attr sets; the graph keeps them alive): all that a size arg's dims and a grid's need are
        taken from, so launches of repeated layers share those results."""
        if self._held is None:
            held: list[int] = []
            for node in self.nodes:
                held += (id(node.op), id(node.attrs), len(node.inputs))
                held += [id(v.type) for v in node.inputs]
                held += [id(v.type) for v in node.outputs]
            self._held = tuple(held)
        return self._held

    def check_reads(self, k: Kernel, what: str) -> None:
        """``inputs`` are the values its nodes read that none of them computes, once each; ``outputs`` values
        its nodes compute. A scatter reads what it updates in place, and its copy launch reads none of the
        ids and updates its node takes."""
        outside = self.consumed - self.produced
        ins, outs = set(k.inputs), set(k.outputs)
        if len(ins) != len(k.inputs) or len(outs) != len(k.outputs):
            raise refuse(what, "node reads", "a value is listed twice among its inputs or outputs")
        if not ins <= outside | self.scatter_out:
            raise refuse(
                what, "node reads", f"it reads values {sorted(ins - outside - self.scatter_out)} its nodes do not"
            )
        if not outside - self.scatter_in <= ins:
            raise refuse(
                what, "node reads", f"its nodes read values {sorted(outside - self.scatter_in - ins)} it does not"
            )
        if not outs <= self.produced:
            raise refuse(
                what, "node reads", f"it writes values {sorted(outs - self.produced)} its nodes do not compute"
            )

    def sizes(self) -> tuple[list[Shape], list[Size]]:
        """The shapes of the values its nodes read and write; its concat positions and symbolic attrs."""
        shapes: dict[int, Shape] = {}
        extra: list[Size] = []
        for node in self.nodes:
            for v in (*node.inputs, *node.outputs):
                shapes.setdefault(id(v.type), v.type.shape)
            if node.op is Op.CONCAT:
                axis = node.attrs.get("axis", 0) % max(1, node.outputs[0].type.rank)
                pos: Size = 0
                for x in node.inputs:
                    pos = add(pos, x.type.shape[axis])
                    extra.append(pos)
            for a in node.attrs.values():
                extra.extend(x for x in (a if isinstance(a, tuple) else (a,)) if isinstance(x, SymExpr))
        return list(shapes.values()), extra


# -- size args -----------------------------------------------------------------------------------

MAX_RANK_SUBSETS = 12  # dims of one value whose sub-products a size arg is matched against


def _check_size_arg(p: _Plan, name: str, e: Size, nodes: _LaunchNodes, what: str) -> None:
    """A size arg is a dim the kernel's values give (see the module docstring). This binds the arg to the
    launch's shapes; whether each pointer's largest offset stays inside its buffer is the kernel's index
    math, which is not checked here."""
    if name in p.space.ranges and not (isinstance(e, SymExpr) and e.is_symbol() and e.symbol_name == name):
        raise refuse(what, "size args", f"an arg named after dim {name!r} passes {to_infix(e)}")
    if isinstance(e, SymExpr) and e.is_symbol():
        return  # a declared symbol (Space.check): index math reads dims by name
    key = (id(e), *nodes.held())
    hit = p._sizes.get(key)
    if hit is None:  # the entry keeps e alive; the graph keeps the types and attrs
        hit = p._sizes[key] = (e, _known_size(p, e, *nodes.sizes()))
    if not hit[1]:
        raise refuse(what, "size args", f"{to_infix(e)} is no dim, product of dims or position of the kernel's values")


def _known_size(p: _Plan, e: Size, shapes: Iterable[Shape], extra: Sequence[Size]) -> bool:
    """Whether ``e`` (or ``-e``) is 0, 1, one of ``extra`` or a product of some dims of one of ``shapes``. The
    products are matched by value at the two bindings first, and only then built and compared."""
    neg = mul(e, -1)
    if e in (0, 1) or any(x in (e, neg) for x in extra):
        return True
    want = p.space.at(e)
    targets = {want, (-want[0], -want[1])}
    for shape in shapes:
        dims = [d for d in shape if d != 1][:MAX_RANK_SUBSETS]
        vals = [p.space.at(d) for d in dims]
        for mask in range(1, 1 << len(dims)):
            hi = lo = 1
            for i, (a, b) in enumerate(vals):
                if mask >> i & 1:
                    hi, lo = hi * a, lo * b
            if (hi, lo) in targets:  # the same value at both bindings: compare the expressions
                prod: Size = 1
                for i, d in enumerate(dims):
                    if mask >> i & 1:
                        prod = mul(prod, d)
                if prod in (e, neg):
                    return True
    return False


# -- grids ---------------------------------------------------------------------------------------


def _check_grids(p: _Plan, i: int, k: Kernel, nodes: _LaunchNodes, what: str) -> None:
    """Each grid dim (the launch's and each architecture variant's) is >= 0, within CUDA's limits and within
    what its outputs need (``grid_need``: its template's row, aotc/ir/templates.py)."""
    outs = tuple(id(p.values[v].type) for v in k.outputs)
    for kernel, kw in ((k, what), *((v.kernel, f"{what} variant {v.arch!r}") for v in k.variants)):
        # the need depends on the code (kind, block sizes, source) and on the nodes' ops, attrs and types
        key = (id(kernel.source), id(kernel.constexprs), kernel.kind, *outs, *nodes.held())
        hit = p._needs.get(key)
        if hit is None or hit[0] is not kernel.source or hit[1] is not kernel.constexprs:
            try:
                need = grid_need(p.graph, kernel)
            except ValueError as e:
                raise refuse(kw, "grid", str(e)) from None
            hit = p._needs[key] = (kernel.source, kernel.constexprs, need)
        need = hit[2]
        key = (id(need), *map(id, kernel.grid))
        seen = p._grids.get(key)
        if seen is not None and seen[0] is need and all(a is b for a, b in zip(seen[1], kernel.grid)):
            continue  # the same grid and need as an earlier launch, where every fact was proved
        known = len(p.facts)
        where = {"launch": i, "code": kernel.name}
        for d, (g, top, most) in enumerate(zip(kernel.grid, GRID_LIMITS, need)):
            p.space.require(g, p.facts, kw, "grid", lambda d=d: f"grid[{d}] >= 0", **where)
            if p.space.check(g, kw)[1] > top:
                claim = lambda d=d, g=g, top=top: f"grid[{d}] = {to_infix(g)} <= {top}, CUDA's limit"  # noqa: E731
                p.space.require(add(top, mul(g, -1)), p.facts, kw, "grid", claim, per_shape=True, **where)
            claim = lambda d=d, g=g, most=most: (  # noqa: E731
                f"grid[{d}] = {to_infix(g)} <= {to_infix(most)}, what its outputs need"
            )
            p.space.at_most(g, most, p.facts, kw, "grid", claim, **where)
        if len(p.facts) == known:
            p._grids[key] = (need, kernel.grid)  # keeps both alive, so the ids stay theirs


# -- the launch bound to its nodes, and what its code touches ----------------------------------------

_HEX = frozenset("0123456789abcdef")


def _check_binding(p: _Plan, i: int, k: Kernel, nodes: _LaunchNodes, what: str) -> None:
    """The launch's digest (and each architecture variant's) is that of its nodes and code, and its extents
    stay inside what it passes them."""
    for kernel, kw in ((k, what), *((v.kernel, f"{what} variant {v.arch!r}") for v in k.variants)):
        d = kernel.digest
        if not isinstance(d, str) or len(d) != 2 * DIGEST_BYTES or not _HEX.issuperset(d):
            raise fail(kw, f"digest {str(d)[:40]!r} is not {2 * DIGEST_BYTES} lowercase hex digits")
        if not isinstance(kernel.extents, Extents):
            raise fail(kw, "it has no extents")
        try:
            want = launch_digest(p.graph, kernel, nodes.nodes, p.digests)
        except (TypeError, ValueError) as e:
            raise fail(kw, f"its digest cannot be computed: {e}") from None
        if d != want:
            raise refuse(
                kw,
                "digest",
                f"its digest {d} is not {want}, that of the nodes it computes and its code: the graph or the "
                "launch changed after the compiler bound them",
            )
        _check_extents(p, i, kernel, kw)


def _check_extents(p: _Plan, i: int, k: Kernel, what: str) -> None:
    """What the launch passes for its code's names lies in the intervals its extents assume, the facts they rest
    on hold, and each pointer's offsets stay inside its value (a flag arg's inside the schedule's flags)."""
    x: Extents = k.extents  # type: ignore[assignment]
    if len(x.lows) != len(k.args) or len(x.highs) != len(k.args):
        raise fail(what, f"its extents give {len(x.lows)}/{len(x.highs)} offsets for its {len(k.args)} args")
    env: dict[str, Size] = {a.name: a.size for a in k.args if a.kind is _SIZE}
    env.update(k.constexprs)
    for name, g in zip(GRID_NAMES, k.grid):
        if name in env:
            raise fail(what, f"a size arg or constexpr is named {name!r}, which its extents call the grid")
        env[name] = g
    targets = tuple(
        (p.values[a.value].type if a.kind is _BUFFER else p.s.flags) if a.kind is not _SIZE else None for a in k.args
    )
    key = (id(x), *map(id, env.values()), *map(id, targets), *env)
    seen = p._extents.get(key)
    if seen is not None and seen[0] is x:
        return  # another launch of the same code, passed the same objects, proved with nothing left per shape
    known = len(p.facts)
    space, where = p.space, {"launch": i, "code": k.name}
    if [n for n, _, _ in x.ranges] != list(env):
        raise refuse(
            what,
            "extent",
            f"its extents assume names {[n for n, _, _ in x.ranges][:12]}, not those it passes {list(env)[:12]}",
        )
    for name, lo, hi in x.ranges:
        e = env[name]
        elo, ehi = space.check(e, f"{what} {name}")
        if lo <= elo and ehi <= hi:
            continue
        claim = lambda name=name, e=e, lo=lo, hi=hi: (  # noqa: E731
            f"{name} = {to_infix(e)} is in [{lo}, {hi}], where the code's extents were derived"
        )
        space.require(add(e, -lo), p.facts, what, "extent", claim, **where)
        space.require(add(hi, mul(e, -1)), p.facts, what, "extent", claim, **where)
    for r in x.requires:
        claim = lambda r=r: f"{to_infix(r)} >= 0, which its index math rests on"  # noqa: E731
        space.require(_substituted(p, r, env, key, what), p.facts, what, "extent", claim, **where)
    for a, lo, hi, target in zip(k.args, x.lows, x.highs, targets):
        if a.kind is _SIZE or (lo == 0 and hi == -1):
            if a.kind is _SIZE and (lo, hi) != (0, -1):
                raise fail(what, f"its extents give size arg {a.name} offsets {lo}..{hi}")
            continue
        top = p.numel(a.value) if a.kind is _BUFFER else target
        into = f"value %{a.value}" if a.kind is _BUFFER else "the flags"
        least, most = _substituted(p, lo, env, key, what), _substituted(p, hi, env, key, what)
        claim = lambda a=a, lo=least: f"arg {a.name} reaches offset {to_infix(lo)} >= 0"  # noqa: E731
        space.require(least, p.facts, what, "extent", claim, **where)
        claim = lambda a=a, hi=most, top=top, into=into: (  # noqa: E731
            f"arg {a.name} reaches offset {to_infix(hi)} < the {to_infix(top)} elements of {into}"
        )
        space.require(add(add(top, -1), mul(most, -1)), p.facts, what, "extent", claim, **where)
    if len(p.facts) == known:
        p._extents[key] = (x, tuple(env.values()), targets)  # keeps every key object alive


def _settled(space: Space, e: Size) -> Size:
    """``e`` with each min and max whose arguments' order is proved over the ranges replaced by the one it picks
    (``max(batch - 1, 0)`` is ``batch - 1`` for batch >= 1), which interval bounds cannot see."""
    if isinstance(e, int) or not any(a.kind in ("min", "max") for m, _ in e.terms for a in m):
        return e
    out: Size = e.const
    for mono, c in e.terms:
        term: Size = c
        for a in mono:
            if a.kind in ("min", "max"):
                x, y = (_settled(space, v) for v in a.args)
                if space.proved(add(x, mul(y, -1))):
                    f = x if a.kind == "max" else y
                elif space.proved(add(y, mul(x, -1))):
                    f = y if a.kind == "max" else x
                else:
                    f = smax(x, y) if a.kind == "max" else smin(x, y)
            else:
                f = SymExpr((((a,), 1),))
            term = mul(term, f)
        out = add(out, term)
    return out


def _substituted(p: _Plan, e: Size, env: dict[str, Size], key: tuple, what: str) -> Size:
    """``e`` over the code's names with what the launch passes for them, checked sound over the symbols."""
    if isinstance(e, int):
        return e
    k2 = (id(e), key)
    hit = p._subst.get(k2)
    if hit is not None and hit[0] is e:
        return hit[1]
    try:
        out = reduce_quotients(substitute(e, env))
        p.space.check(out, f"{what} extents")
        out = _settled(p.space, out)
    except ShapeError as err:
        raise fail(what, f"its extents cannot be evaluated: {err}") from None
    p._subst[k2] = (e, out, tuple(env.values()))
    return out


# -- the memory plan -----------------------------------------------------------------------------


def _check_arena(p: _Plan) -> tuple[Buffer, ...]:
    """Each buffer holds its value's bytes, inside the arena, apart from the buffers live with it; returns the
    buffers to sweep per shape (``check_disjoint``) when that could not be proved, else ``()``.

    Buffers at the same offset must never be live together. Distinct offsets are proved apart in a chain: in
    order, each buffer ends before the next offset and the last ones end inside the arena, so no two buffers
    at different offsets overlap, whatever their lifetimes."""
    s, space, facts, what = p.s, p.space, p.facts, p.what
    at: dict[Size, list[int]] = {}
    for j, b in enumerate(s.buffers):
        bw = f"{what} buffer {j}"
        need = p.nbytes(b.value)
        if b.nbytes != need:
            extra = add(b.nbytes, mul(need, -1))
            if not space.proved(extra):
                for env, nbytes, v in zip(space.bindings(), space.at(b.nbytes), space.at(need)):
                    if nbytes < v:
                        raise refuse(bw, "buffer size", f"at {dict(env)} it holds {nbytes} bytes for a {v}-byte value")
                facts.append(
                    Fact(bw, "buffer size", f"nbytes >= the {to_infix(need)} bytes of value %{b.value}", extra)
                )
        space.at_most(b.nbytes, need, facts, bw, "buffer size", lambda v=b.value: f"nbytes <= the bytes of value %{v}")
        space.require(b.nbytes, facts, bw, "buffer size", "nbytes >= 0")
        space.require(b.offset, facts, bw, "buffer offset", "offset >= 0")
        at.setdefault(b.offset, []).append(j)
    for js in at.values():
        end, holder = -1, -1
        for first, last, j in sorted((s.buffers[j].first, s.buffers[j].last, j) for j in js):
            if first <= end:
                raise fail(what, f"buffers {holder} and {j} are live together and overlap at {dict(space.at_max)}")
            if last > end:
                end, holder = last, j
    order = sorted(at, key=space.at)
    ends = [order[n + 1] if n + 1 < len(order) else s.arena_bytes for n in range(len(order))]
    proved = all(
        space.proved(add(nxt, mul(add(o, nbytes), -1)))
        for o, nxt in zip(order, ends)
        for nbytes in dict.fromkeys(s.buffers[j].nbytes for j in at[o])
    )
    # and no larger than its buffers need, so a call allocates no more than they take (plus alignment)
    if proved and order:  # the last offset's buffers end last
        top: Size = add(order[-1], _largest(s.buffers[j].nbytes for j in at[order[-1]]))
    else:
        top = _largest(add(b.offset, b.nbytes) for b in s.buffers)
    space.at_most(s.arena_bytes, add(top, ALIGN - 1), facts, what, "arena", "arena_bytes <= the end of its buffers")
    if proved:
        return ()
    for env in space.bindings():
        check_disjoint(s.buffers, env, evaluate(s.arena_bytes, env), what)
    return tuple(s.buffers)


def _largest(xs: Iterable[Size]) -> Size:
    out: Size | None = None
    for x in dict.fromkeys(xs):
        out = x if out is None else smax(out, x)
    return 0 if out is None else out


def check_disjoint(buffers: Sequence[Buffer], env: Mapping[str, int], arena: int, what: str) -> None:
    """At one binding: each buffer lies inside the ``arena``-byte arena and buffers whose lifetimes overlap
    do not overlap in memory."""
    spans = []
    for j, b in enumerate(buffers):
        nbytes, offset = evaluate(b.nbytes, env), evaluate(b.offset, env)
        if nbytes < 0 or offset < 0 or offset + nbytes > arena:
            raise fail(
                f"{what} buffer {j}", f"at {dict(env)} it holds {nbytes} bytes at {offset} in a {arena}-byte arena"
            )
        spans.append((offset, offset + nbytes, b.first, b.last, j))
    spans.sort()
    for x in range(len(spans)):
        _, a1, af, al, aj = spans[x]
        for y in range(x + 1, len(spans)):
            b0, _, bf, bl, bj = spans[y]
            if b0 >= a1:
                break
            if af <= bl and bf <= al:
                raise fail(what, f"buffers {aj} and {bj} are live together and overlap at {dict(env)}")


# -- what the runtime checks per shape -------------------------------------------------------------

_FACTS: weakref.WeakKeyDictionary[Graph, tuple[Schedule, PlanFacts]] = weakref.WeakKeyDictionary()
_FACTS_LOCK = threading.Lock()


def _remember(graph: Graph, s: Schedule, facts: PlanFacts) -> None:
    with _FACTS_LOCK:
        _FACTS[graph] = (s, facts)


def plan_facts(graph: Graph, s: Schedule) -> PlanFacts:
    """The per-shape facts of running ``s``, a verified plan of ``graph`` (or the plan a GPU runs of one: each
    launch its own kernel or one of its architecture variants'): a grid fact counts where its code runs. A plan
    nothing verified yet is checked now (an ArtifactError if it fails)."""
    with _FACTS_LOCK:
        known = _FACTS.get(graph)
    if known is not None and (known[0] is s or _runs_of(known[0], s)):
        facts = known[1]
    else:
        facts = check_schedule(graph, s, f"variant {graph.name!r} schedule")
    if any(f.code for f in facts.facts):
        kept = tuple(f for f in facts.facts if not f.code or s.kernels[f.launch].name == f.code)
        facts = PlanFacts(facts.what, kept, facts.live)
    return facts


def _runs_of(base: Schedule, s: Schedule) -> bool:
    return (
        s.buffers is base.buffers
        and s.arena_bytes is base.arena_bytes
        and len(s.kernels) == len(base.kernels)
        and all(r is k or any(r is v.kernel for v in k.variants) for r, k in zip(s.kernels, base.kernels))
    )
