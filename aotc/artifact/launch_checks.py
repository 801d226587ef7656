"""The checks of one launch of a plan (and of each arch launch of it), in the order the plan runs:

- its nodes and what it reads: ``inputs`` are the values its nodes read from outside the launch, its
  ``outputs`` values its nodes compute (a scatter also reads what it updates in place);
- its buffer args: one per value it reads or writes, and an ``out_ptr`` arg exactly for each value it
  writes; no write reaches the storage of a graph input or weight, through views or not;
- its size args: each is a dim the kernel's values give (a symbol, a product of some of one value's
  dims, a concat position or a node's symbolic attr, or the negative of one); an arg named after a dim
  passes that dim;
- its grid: each dim non-negative, within CUDA's limits (x < 2**31, y and z < 2**16) and exactly what its
  template launches (the grid column of its template's row in aotc/ir/templates.py, for the launch's nodes and
  block sizes): a larger grid works on tiles outside its outputs, a smaller one leaves some unwritten. Proved at
  load where the two expressions compare, refused where they differ at the dims' bounds, else left to the call
  as a fact checked per shape before the first launch;
- its index-check slots: distinct and below the schedule's ``flags``.

A bound launch's digest and extents are checked in binding_checks.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from aotc.artifact.code_checks import FLAG_TYPE, SIZE_TYPES, fail
from aotc.artifact.plan_space import Plan, refuse
from aotc.ir.launch import POINTER_TYPE
from aotc.ir.ops import Op
from aotc.ir.schedule import GRID_LIMITS, ArgKind, Kernel, Size, same_launch
from aotc.ir.symbolic import SymExpr, add, mul, to_infix
from aotc.ir.templates import grid_need
from aotc.ir.types import Node, Shape

# The prefix codegen names a pointer it stores through (STYLE.md 7: parameters named by role).
OUT_PTR = "out_ptr"

_TARGET = re.compile(r"sm_[0-9]{2,3}")
_BUFFER, _SIZE, _FLAG, _SCATTER = ArgKind.BUFFER, ArgKind.SIZE, ArgKind.FLAG, Op.SCATTER  # enum lookups, once


def check_launch(p: Plan, k: Kernel, read_only: set[int], slots: set[int], what: str) -> LaunchNodes:
    graph, space, dtypes = p.graph, p.space, p.dtypes
    n = len(graph.nodes)
    if any(not 0 <= i < n for i in k.nodes) or list(k.nodes) != sorted(set(k.nodes)):
        raise fail(what, f"nodes {list(k.nodes)[:8]} are not increasing indices below {n}")
    nodes = LaunchNodes([graph.nodes[i] for i in k.nodes])
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
    for v in k.arch_launches:
        vw = f"{what} arch launch {v.arch!r}"
        if not isinstance(v.arch, str) or not _TARGET.fullmatch(v.arch) or v.arch in archs:
            raise fail(vw, "expected a target such as 'sm_90', once per launch")
        archs.add(v.arch)
        if v.kernel.arch_launches or not same_launch(k, v.kernel):
            raise fail(vw, "its kernel does not take the launch's args, nodes, reads, writes and checks")
        if len(v.kernel.grid) != 3:
            raise fail(vw, f"grid has {len(v.kernel.grid)} dims, expected 3")
        for d, g in enumerate(v.kernel.grid):
            space.check(g, f"{vw} grid[{d}]", nonneg=True)
    return nodes


class LaunchNodes:
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


def _check_size_arg(p: Plan, name: str, e: Size, nodes: LaunchNodes, what: str) -> None:
    """A size arg is a dim the kernel's values give (see the module docstring). This binds the arg to the
    launch's shapes; whether each pointer's largest offset stays inside its buffer is the kernel's index
    math, which is not checked here."""
    if name in p.space.ranges and not (isinstance(e, SymExpr) and e.is_symbol() and e.symbol_name == name):
        raise refuse(what, "size args", f"an arg named after dim {name!r} passes {to_infix(e)}")
    if isinstance(e, SymExpr) and e.is_symbol():
        return  # a declared symbol (Space.check): index math reads dims by name
    key = (id(e), *nodes.held())
    hit = p.size_args.get(key)
    if hit is None:  # the entry keeps e alive; the graph keeps the types and attrs
        hit = p.size_args[key] = (e, _known_size(p, e, *nodes.sizes()))
    if not hit[1]:
        raise refuse(what, "size args", f"{to_infix(e)} is no dim, product of dims or position of the kernel's values")


def _known_size(p: Plan, e: Size, shapes: Iterable[Shape], extra: Sequence[Size]) -> bool:
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


def check_grids(p: Plan, i: int, k: Kernel, nodes: LaunchNodes, what: str) -> None:
    """Each grid dim (the launch's and each arch launch's) is >= 0, within CUDA's limits and exactly what its
    template launches for its outputs (``grid_need``: its template's row, aotc/ir/templates.py)."""
    outs = tuple(id(p.values[v].type) for v in k.outputs)
    for kernel, kw in ((k, what), *((v.kernel, f"{what} arch launch {v.arch!r}") for v in k.arch_launches)):
        # the need depends on the code (kind, block sizes, source) and on the nodes' ops, attrs and types
        key = (id(kernel.source), id(kernel.constexprs), kernel.kind, *outs, *nodes.held())
        hit = p.grid_needs.get(key)
        if hit is None or hit[0] is not kernel.source or hit[1] is not kernel.constexprs:
            try:
                need = grid_need(p.graph, kernel)
            except ValueError as e:
                raise refuse(kw, "grid", str(e)) from None
            hit = p.grid_needs[key] = (kernel.source, kernel.constexprs, need)
        need = hit[2]
        key = (id(need), *map(id, kernel.grid))
        seen = p.proved_grids.get(key)
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
                f"grid[{d}] = {to_infix(g)} <= {to_infix(most)}, what its template launches for its outputs"
            )
            p.space.at_most(g, most, p.facts, kw, "grid", claim, **where)
            # and no fewer: a program short of the template's grid leaves its tiles of the outputs unwritten, and on
            # a GPU they would hold whatever the previous call (another request's) left in that memory
            claim = lambda d=d, g=g, most=most: (  # noqa: E731
                f"grid[{d}] = {to_infix(g)} >= {to_infix(most)}, what its template launches for its outputs"
            )
            p.space.at_most(most, g, p.facts, kw, "grid", claim, **where)
        if len(p.facts) == known:
            p.proved_grids[key] = (need, kernel.grid)  # keeps both alive, so the ids stay theirs
