"""The recurrent-cell template: the steps of an unrolled recurrence (an LSTM's time loop) as one launch.

A step (a *cell*) of the traced graph adds products ``x_t @ W`` and ``h @ U`` (MATMUL nodes whose right operand
is a weight) and whatever else (biases, a precomputed input projection) into gate pre-activations ``gates``
(rows, N), reads them through column slices of one width H, and computes its new state from those with
elementwise ops of shape (rows, H): an LSTM's ``c = sigmoid(f) * c + sigmoid(i) * tanh(g)`` and ``h =
sigmoid(o) * tanh(c)``. When the next step's product takes this step's ``h`` as its left operand, and its
elementwise ops read this step's values (``c``) at the same element and nothing of any other step, the steps
chain. A row's state depends on that row only, so one program holds BLOCK_M rows of the whole state in
registers and runs the chain's steps one after another: the time loop costs one launch instead of two
matmuls and a pointwise kernel per step.

Per step and gate slice: a ``tl.dot`` per product (the state from registers, any other operand loaded through
its views, the whole K at once; a product of a zero state is skipped), then the slice's pre-activation computed
from the products' tiles (the bias adds load their bias), then the step's values from the gate tiles. Values
read outside the chain (each ``h`` the next layer reads, the last ``h`` and ``c``) are stored; the rest stay in
registers. Each step loads its weights again rather than holding them through the chain: long-lived weight
tiles made ptxas take minutes on an 8-step kernel.

Not fused (the general rules then apply): a lone cell (no recurrence: a gated linear layer stays a matmul and
its epilogue), a state wider than MAX_H, a product's K above MAX_K, a weight that is not a view of a constant,
products that are not float, a gate slice read by anything but its step's elementwise ops, a step whose
elementwise ops read another step than the one before.

A chain whose steps are one computation at moving time offsets (the usual unrolled ``for t in range(T)``) is
one launch looping over its steps (aotc/kernels/recurrent_loop.py): Triton compiles the step once, however
many there are. Any other chain is unrolled, cut into launches of MAX_STEPS steps, so the unrolled source stays
a size Triton compiles in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aotc.ir.dtypes import DType
from aotc.ir.ops import ELEMENTWISE, VIEWS, Op
from aotc.ir.symbolic import add, floordiv, mul, sym
from aotc.ir.types import Node, Value
from aotc.kernels import view_rules
from aotc.kernels.config import next_pow2
from aotc.kernels.contraction_emit import full_tile, size_text
from aotc.kernels.fusion_graph import FusionGraph, needs_compute
from aotc.kernels.pointwise_ops import TL_DTYPE, is_literal
from aotc.kernels.reach import GRID_X
from aotc.kernels.recurrent_loop import Loop, loop_of

if TYPE_CHECKING:
    from aotc.ir.schedule import Kernel
    from aotc.kernels.config import KernelConfig
    from aotc.kernels.emit import KernelBuilder
    from aotc.kernels.fusion import KernelPlan

__all__ = ["Cell", "RecurrentConfig", "cells_and_chains", "chain_cells", "emit_plan", "node_groups"]

MAX_H = 128  # the state's columns one program holds (BLOCK_H)
MAX_K = 256  # a product's inner dim, loaded whole
MAX_STEPS = 4  # Triton (3.9, sm_80) compiles 4 unrolled LSTM steps of width 32 in ~10 s, 8 in ~25 s
# Rows per program: tl.dot's smallest tile. A recurrence is latency-bound (its steps run one after another), so
# more programs of fewer rows spread a batch over more SMs; and each dot's FMA loop, unrolled per row, is half what
# 32 rows make, so Triton compiles the kernel in about half the time (the example LSTM's second layer: 5.7 s per
# target at 32 rows, 3.1 s at 16).
BLOCK_M = 16
NUM_WARPS = 4
_DOT = (DType.float32, DType.float16, DType.bfloat16)


@dataclass(frozen=True)
class RecurrentConfig:
    """A chain's tiles where the tuned table gives them (aotc/kernels/tuned/): rows per program and warps. The
    state's columns and each product's K are whole (BLOCK_H, BLOCK_K), so nothing else is the tuner's to vary."""

    block_m: int = BLOCK_M
    num_warps: int = NUM_WARPS


@dataclass(frozen=True)
class Cell:
    """One step. ``slices`` are the gate slices in column order, ``body`` the step's elementwise nodes (node
    indices, in order), ``recurrent`` the product whose left operand is the previous step's state (None: the
    chain's first step loads it), ``carried`` the previous step's values the body reads."""

    products: tuple[Node, ...]
    gates: Node
    slices: tuple[Node, ...]
    pre: frozenset[int]  # the pre-activation's elementwise nodes, ``gates`` among them
    body: tuple[int, ...]
    recurrent: Node | None = None
    carried: frozenset[int] = frozenset()

    @property
    def nodes(self) -> frozenset[int]:
        return self.pre | set(self.body)


# -- which nodes make cells and chains (the template's fusion check) ----------------------------------------


def node_groups(g: FusionGraph) -> list[tuple[frozenset[int], Any]]:
    """The template table's group hook: each chain of at least two cells as (its nodes, its Loop) where its steps
    are one loop's (aotc/kernels/recurrent_loop.py), else in launches of at most MAX_STEPS unrolled steps, as
    (their nodes, their cells). A lone cell is no recurrence: a gated linear layer is left to the matmul
    template."""
    out: list[tuple[frozenset[int], Any]] = []
    for chain in cells_and_chains(g):
        if len(chain) < 2:
            continue
        loop = loop_of(g, chain)
        if loop is not None:
            out.append((loop.nodes, loop))
            continue
        for start in range(0, len(chain), MAX_STEPS):
            part = chain[start : start + MAX_STEPS]
            part = (_first(part[0]), *part[1:])
            out.append((frozenset().union(*(c.nodes | _indices(g, c) for c in part)), tuple(part)))
    return out


def _first(c: Cell) -> Cell:
    """``c`` as the first step of a launch: its state comes from memory."""
    return Cell(c.products, c.gates, c.slices, c.pre, c.body)


def _indices(g: FusionGraph, c: Cell) -> frozenset[int]:
    return frozenset(g.prod[n.outputs[0].id][0] for n in (*c.products, *c.slices))


def cells_and_chains(g: FusionGraph) -> list[list[Cell]]:
    """Every chain of cells of the graph, each in step order."""
    found = {gi: c for gi, node in enumerate(g.graph.nodes) if (c := _cell(g, gi, node)) is not None}
    # Each elementwise node reading a cell's values joins the latest cell it reads (an LSTM's new c reads the
    # old c and its own gates); then again with each cell reading no cell but its predecessor, the step whose
    # value its recurrent product takes.
    owner, reads, _ = _bodies(g, found, None)
    preds = {gi: _recurrent_pred(c, owner, reads[gi]) for gi, c in found.items()}
    owner, _, body = _bodies(g, found, preds)
    cells = {gi: _with_body(c, body[gi]) for gi, c in found.items() if body[gi] and _slices_read_by(g, c, body[gi])}
    succ: dict[int, list[int]] = {}
    links: dict[int, Cell] = {}
    for gi, c in cells.items():
        cell = _link(g, c, owner, preds[gi], cells)
        if cell is not None:
            succ.setdefault(preds[gi], []).append(gi)
            links[gi] = cell
    chains = []
    for gi in cells:
        if gi in links and len(succ[preds[gi]]) == 1:
            continue  # it continues its predecessor's chain
        chain = [cells[gi]]
        while len(succ.get(gi, ())) == 1:
            gi = succ[gi][0]
            chain.append(links[gi])
        chains.append(chain)
    return chains


def _bodies(
    g: FusionGraph, cells: Mapping[int, Cell], preds: Mapping[int, int] | None
) -> tuple[dict[int, int], dict[int, set[int]], dict[int, list[int]]]:
    """Which cell computes each value (its gate slices and body), the other cells each cell's body reads, and
    each cell's body in node order. With ``preds``, a node joins a cell only if it reads no other cell than that
    cell's predecessor."""
    owner = {s.outputs[0].id: gi for gi, c in cells.items() for s in c.slices}
    reads: dict[int, set[int]] = {gi: set() for gi in cells}
    body: dict[int, list[int]] = {gi: [] for gi in cells}
    for i, node in enumerate(g.graph.nodes):  # in order: a body node's inputs are labelled before it
        if node.op not in ELEMENTWISE or len(node.outputs) != 1:
            continue
        mine = {owner[x.id] for x in node.inputs if x.id in owner}
        if not mine:
            continue
        gi = max(mine)
        if node.outputs[0].type.shape != cells[gi].slices[0].outputs[0].type.shape:
            continue
        if preds is not None and mine - {gi, preds.get(gi, gi)}:
            continue
        body[gi].append(i)
        owner[node.outputs[0].id] = gi
        reads[gi] |= mine - {gi}
    return owner, reads, body


def _recurrent_pred(c: Cell, owner: Mapping[int, int], reads: set[int]) -> int:
    """The step before ``c`` (-1: none): the cell whose value a product of ``c`` takes as its left operand and
    whose values ``c``'s elementwise ops read too (an LSTM's ``c``). A stacked layer's products also take the
    layer below's new state, which its elementwise ops do not read."""
    cells = {owner[p.inputs[0].id] for p in c.products if p.inputs[0].id in owner} & reads
    return cells.pop() if len(cells) == 1 else -1


def _with_body(c: Cell, body: list[int]) -> Cell:
    return Cell(c.products, c.gates, c.slices, c.pre, tuple(body))


def _slices_read_by(g: FusionGraph, c: Cell, body: list[int]) -> bool:
    """Whether only the step's own elementwise ops read its gate slices (the tiles exist nowhere else)."""
    inside = set(body)
    return all(set(g.users.get(s.outputs[0].id, ())) <= inside for s in c.slices)


def _cell(g: FusionGraph, gi: int, gates: Node) -> Cell | None:
    """The cell whose pre-activation ``gates`` is, if it is one: column slices of one width its only readers,
    computed elementwise from one or more float products whose right operand is a weight."""
    if gates.op not in ELEMENTWISE or len(gates.outputs) != 1 or gates.outputs[0].id in g.output_ids:
        return None
    out = gates.outputs[0]
    shape = out.type.shape
    if len(shape) != 2 or not isinstance(shape[1], int):
        return None
    rows, n = shape
    users = [g.graph.nodes[u] for u in g.users.get(out.id, ())]
    if len(users) < 2 or not all(_column_slice(u, rows) for u in users):
        return None
    widths = {u.outputs[0].type.shape[1] for u in users}
    h = widths.pop()
    if widths or not isinstance(h, int) or h > MAX_H:
        return None
    pre, products = {gi}, []
    stack = [gates]
    while stack:
        for x in stack.pop().inputs:
            if x.id in g.external:
                continue
            i, p = g.prod[x.id]
            if i in pre or p in products:
                continue
            if p.op is Op.MATMUL and _product(g, p, rows, n):
                products.append(p)
            elif p.op in ELEMENTWISE and x.type.shape == shape:
                pre.add(i)
                stack.append(p)
    inside = pre - {gi}
    for i in inside:  # nothing but the pre-activation reads its parts
        if not set(g.users.get(g.graph.nodes[i].outputs[0].id, ())) <= pre:
            return None
    if not products or any(not set(g.users.get(p.outputs[0].id, ())) <= pre for p in products):
        return None
    slices = tuple(sorted(users, key=lambda u: u.attrs["starts"][1]))
    return Cell(tuple(products), gates, slices, frozenset(pre), ())


def _column_slice(node: Node, rows: Any) -> bool:
    """A slice of a (rows, N) value along its columns, every row, step 1."""
    if node.op is not Op.SLICE:
        return False
    starts, steps = node.attrs["starts"], node.attrs["steps"]
    shape = node.outputs[0].type.shape
    return tuple(steps) == (1, 1) and starts[0] == 0 and shape[0] == rows and isinstance(starts[1], int)


def _product(g: FusionGraph, p: Node, rows: Any, n: int) -> bool:
    """A float (rows, K) @ (K, n) product with K at most MAX_K and a weight (a view of a constant) on the right."""
    a, w = p.inputs
    if a.type.rank != 2 or w.type.rank != 2 or p.outputs[0].type.shape != (rows, n):
        return False
    k = w.type.shape[0]
    if not isinstance(k, int) or k > MAX_K or a.type.dtype not in _DOT or a.type.dtype != w.type.dtype:
        return False
    return not needs_compute(g, w.id, set()) and _constant(g, w.id)


def _constant(g: FusionGraph, vid: int) -> bool:
    """Whether ``vid`` is a weight through views (not a graph input: a weight's rows never change per call)."""
    while vid not in g.external:
        vid = g.node(vid).inputs[0].id
    return vid not in {v.id for v in g.graph.inputs}


def _link(g: FusionGraph, c: Cell, owner: Mapping[int, int], pred: int, cells: Mapping[int, Cell]) -> Cell | None:
    """``c`` chained to the cell ``pred`` before it, when it continues that recurrence: the product taking
    ``pred``'s value as its left operand has the state's width as K, and nothing of ``c`` but that product
    and its body's elementwise ops (at the same element: the same shape) reads a value of a cell."""
    prev = cells.get(pred)
    state = c.slices[0].outputs[0].type.shape
    if prev is None or prev.slices[0].outputs[0].type.shape != state:
        return None
    rec = [p for p in c.products if owner.get(p.inputs[0].id) == pred]
    if len(rec) != 1 or rec[0].inputs[0].type.shape != state or rec[0].inputs[1].type.shape[0] != state[1]:
        return None
    p = rec[0]
    if any(x.id in owner for i in c.pre for x in g.graph.nodes[i].inputs):
        return None  # a pre-activation reading a state: no gate tile holds that
    theirs = {g.graph.nodes[i].outputs[0].id for i in prev.body}
    if p.inputs[0].id not in theirs:
        return None  # a gate slice, not a state
    carried = frozenset(x.id for i in c.body for x in g.graph.nodes[i].inputs if x.id in theirs)
    return Cell(c.products, c.gates, c.slices, c.pre, c.body, p, carried)


# -- the kernel ------------------------------------------------------------------------------------

_ROW, _COL = "offs_m[:, None]", "offs_h[None, :]"
_TILE = "mask_m[:, None] & mask_h[None, :]"


@dataclass
class _Carry:
    """What one step hands the next in registers: its values the next body reads, and the next product's
    left operand (its state, zero outside the state's columns)."""

    values: dict[int, str]
    state: str | None = None


class _Axes:
    """The tile axes past the rows: the state's columns (``offs_h``) and each products' K (``offs_k0``...), each
    declared where first used (its arange, its mask, what it holds and its block size)."""

    def __init__(self, b: KernelBuilder, constexprs: list[tuple[str, int]]) -> None:
        self.b, self.constexprs = b, constexprs
        self.ks: dict[int, str] = {}

    def declare(self, d: str, n: int) -> None:
        b, block = self.b, f"BLOCK_{d.upper()}"
        b.line(f"offs_{d} = tl.arange(0, {block})")
        b.line(f"mask_{d} = offs_{d} < {n}")
        b.reach.bound(f"offs_{d}", sym(block))
        for axis in ("[None, :]", "[:, None]"):
            b.reach.guard(f"mask_{d}{axis}", f"offs_{d}", 0, n)
        self.constexprs.append((block, max(16, next_pow2(n))))

    def k(self, n: int) -> str:
        if n not in self.ks:
            self.ks[n] = f"k{len(self.ks)}"
            self.declare(self.ks[n], n)
        return self.ks[n]


def emit_plan(b: KernelBuilder, kp: KernelPlan, name: str, config: KernelConfig, tiles: Any = None) -> Kernel:
    """The template table's emitter (aotc/ir/templates.py): the chain of ``kp.group``, storing ``kp.outputs``;
    ``tiles`` a RecurrentConfig (the tuned table's) or None (BLOCK_M rows, NUM_WARPS warps)."""
    assert kp.group is not None
    tile = tiles if isinstance(tiles, RecurrentConfig) else RecurrentConfig()
    if isinstance(kp.group.detail, Loop):
        return _emit_loop(b, kp, kp.group.detail, name, tile)
    cells: tuple[Cell, ...] = kp.group.detail
    axes, rows, h, block_m = _head(b, cells, tile.block_m)
    constexprs = axes.constexprs
    stored = {v.id for v in kp.outputs}
    carry = _Carry({})
    for t, cell in enumerate(cells):
        following = cells[t + 1] if t + 1 < len(cells) else None
        b.line(f"# step {t}")
        with b.scope():  # each step loads its weights again: none stays live across the chain
            carry = _step(b, cell, following, carry, stored, axes, h)
    grid = (floordiv(add(rows, block_m - 1), block_m), 1, 1)
    extra = [b.producers[n.outputs[0].id][0] for c in cells for n in (*c.products, *c.slices)]
    return b.finish(name, kp.kind, grid, tuple(constexprs), num_warps=tile.num_warps, num_stages=1, extra_nodes=extra)


def chain_cells(detail: Any) -> tuple[Cell, ...]:
    """The steps of a chain's group detail (its cells, or a loop's)."""
    return detail.cells if isinstance(detail, Loop) else detail


def _head(b: KernelBuilder, cells: tuple[Cell, ...], block_m: int, *names: str) -> tuple[_Axes, Any, int, int]:
    """The rows and state columns of a chain's program: its axes (with the constexprs), rows, width and BLOCK_M."""
    rows, h = cells[0].slices[0].outputs[0].type.shape
    ks = len({p.inputs[1].type.shape[0] for c in cells for p in c.products})
    b.reserve("pid", *names, *(f"{s}_{d}" for s in ("offs", "mask") for d in ("m", "h", *(f"k{j}" for j in range(ks)))))
    b.line("pid = tl.program_id(0)")
    b.line("offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)")
    b.line(f"mask_m = offs_m < {size_text(b, rows, 'M')}")
    b.reach.bound("offs_m", mul(GRID_X, sym("BLOCK_M")))
    b.reach.guard("mask_m[:, None]", "offs_m", 0, b.arg(rows))
    axes = _Axes(b, [("BLOCK_M", block_m)])
    axes.declare("h", h)
    return axes, rows, h, block_m


def _emit_loop(b: KernelBuilder, kp: KernelPlan, loop: Loop, name: str, tile: RecurrentConfig) -> Kernel:
    """The chain as ``for step in range(0, T)`` over its template step (``loop.cells[1]``): the state and the
    other carried values in loop-carried tiles from their first values, each step's moving inputs read at its
    offset, its state stored into the stack (if any), the last step's values read elsewhere stored after."""
    cells, cell = loop.cells, loop.cells[1]
    axes, rows, h, block_m = _head(b, cells, tile.block_m, "step", "state")
    for p in cell.products:  # each K axis declared before the loop, once
        if p is not cell.recurrent:
            axes.k(p.inputs[1].type.shape[0])
    step = b.index_var("step", len(cells))
    b.reach.bound("step", len(cells))
    for vid, read in loop.time.items():
        b.redirects[vid] = read.at(b, step)
    names: dict[int, str] = {}
    for k, vid in enumerate(loop.carried):
        first = loop.initial[vid]
        var = b.compute(first, [_ROW, _COL], _TILE, {})
        names[vid] = "state" if k == 0 else b.fresh("carried")
        b.reserve(names[vid])
        if is_literal(var) and (k > 0 or float(var) == 0.0):
            b.line(f"{names[vid]} = tl.full((BLOCK_M, BLOCK_H), {var}, {TL_DTYPE[first.type.dtype]})")
            continue
        var = full_tile(b, var, "(BLOCK_M, BLOCK_H)", first.type.dtype, b.fresh("first"))
        b.line(f"{names[vid]} = " + (f"tl.where({_TILE}, {var}, 0.0)" if k == 0 else var))
    with b.block(f"for step in range(0, {len(cells)})"):
        env = dict(names)
        carry = _Carry(env, names[loop.carried[0]])
        col = b.index_var(_COL, h)
        for s in cell.slices:
            at = add(col, s.attrs["starts"][1])
            products = {p.outputs[0].id: _product_tile(b, p, cell, carry, axes, at) for p in cell.products}
            env[s.outputs[0].id] = b.compute(cell.gates.outputs[0], [_ROW, at], _TILE, products)
        new = {vid: b.compute(loop.handed[vid], [_ROW, _COL], _TILE, env) for vid in loop.carried}
        if loop.stack is not None:
            state = new[loop.carried[0]]
            at_step = loop.stack.index(b, step, b.index_var(_ROW, rows), col)
            b.store(loop.stack.concat.outputs[0], at_step, state, _TILE)
        # every new value first (one may read a carried value another replaces), then the carried values
        tiles = {}
        for vid, var in new.items():
            dtype = loop.handed[vid].type.dtype
            tiles[vid] = var if b.is_tile(var) else full_tile(b, var, "(BLOCK_M, BLOCK_H)", dtype, b.fresh("new"))
            if tiles[vid] in names.values():  # a carried value handed on as it is
                tiles[vid] = b.fresh("new")
                b.line(f"{tiles[vid]} = {var}")
        for k, vid in enumerate(loop.carried):
            b.line(f"{names[vid]} = " + (f"tl.where({_TILE}, {tiles[vid]}, 0.0)" if k == 0 else tiles[vid]))
    stack = loop.stack.concat.outputs[0].id if loop.stack is not None else None
    for v in kp.outputs:
        if v.id != stack:
            carried, view = loop.last[v.id]
            at = [_ROW, _COL] if view is None else view_rules.forward(b, view, [b.index_var(_ROW, rows), col])
            b.store(v, at, names[carried], _TILE)
    grid = (floordiv(add(rows, block_m - 1), block_m), 1, 1)
    return b.finish(
        name, kp.kind, grid, tuple(axes.constexprs), num_warps=tile.num_warps, num_stages=1, extra_nodes=kp.nodes
    )


def _step(
    b: KernelBuilder,
    cell: Cell,
    following: Cell | None,
    carry: _Carry,
    stored: set[int],
    axes: _Axes,
    h: int,
) -> _Carry:
    """One step: its gate tiles, then its values; returns what the following step takes from registers."""
    col = b.index_var(_COL, h)
    env: dict[int, str] = dict(carry.values)
    for s in cell.slices:
        at = add(col, s.attrs["starts"][1])
        products = {p.outputs[0].id: _product_tile(b, p, cell, carry, axes, at) for p in cell.products}
        env[s.outputs[0].id] = b.compute(cell.gates.outputs[0], [_ROW, at], _TILE, products)
    out = _Carry({})
    for i in cell.body:
        v = b.graph.nodes[i].outputs[0]
        state = following is not None and following.recurrent is not None and following.recurrent.inputs[0] == v
        passed = following is not None and v.id in following.carried
        if v.id not in stored and not state and not passed:
            continue  # computed where a value below needs it, if anywhere
        var = env[v.id] = b.compute(v, [_ROW, _COL], _TILE, env)
        if v.id in stored:
            b.store(v, [_ROW, _COL], var, _TILE)
        if passed:
            out.values[v.id] = var
        if state:
            out.state = b.let("state", f"tl.where({_TILE}, {var}, 0.0)")
    return out


def _product_tile(b: KernelBuilder, p: Node, cell: Cell, carry: _Carry, axes: _Axes, at: Any) -> str:
    """``p``'s (BLOCK_M, BLOCK_H) tile at columns ``at``: the whole K in one ``tl.dot``, rounded to its dtype."""
    a, w = p.inputs
    dtype = a.type.dtype
    if p is cell.recurrent:
        assert carry.state is not None
        left, d = carry.state, "h"
    else:
        if _zero(b, a):
            return "0.0"  # a state that starts at zero: the product is zero, its weight never read
        d = axes.k(w.type.shape[0])
        with b.reading_as("x"):
            x = b.load(a, [_ROW, f"offs_{d}[None, :]"], f"mask_m[:, None] & mask_{d}[None, :]")
        left = _tile(b, x, a, f"(BLOCK_M, BLOCK_{d.upper()})", "x")
    w_tile = b.load(w, [f"offs_{d}[:, None]", at], f"mask_{d}[:, None] & mask_h[None, :]")
    right = _tile(b, w_tile, w, f"(BLOCK_{d.upper()}, BLOCK_H)", "w")
    precision = ', input_precision="ieee"' if dtype is DType.float32 else ""
    acc = b.let("acc", f"tl.dot({left}, {right}{precision})")
    out = p.outputs[0].type.dtype
    return acc if out is DType.float32 else b.let("acc", f"{acc}.to({TL_DTYPE[out]})")


def _tile(b: KernelBuilder, var: str, v: Value, shape: str, stem: str) -> str:
    """A dot operand as a full 2-D tile (a broadcast row or a constant is not one)."""
    return var if b.is_tile(var) else full_tile(b, var, shape, v.type.dtype, b.fresh(stem))


def _zero(b: KernelBuilder, v: Value) -> bool:
    """Whether ``v`` is zeros (a ``full`` of 0 through views) that this kernel computes rather than loads."""
    while v.id in b.inline:
        node = b.producers[v.id][1]
        if node.op is Op.FULL:
            return node.attrs["value"] == 0
        if node.op not in VIEWS or not node.inputs:
            return False
        v = node.inputs[0]
    return False
