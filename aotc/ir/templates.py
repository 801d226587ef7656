"""The kernel templates, one row each: the kind name the artifact stores, the ops a launch of it is rooted
at, its fusion check, its emitter, how it is tuned and the grid it launches.

The scheduler (aotc/kernels/scheduler.py), the fusion planner, ``--explain``, autotuning (aotc/autotune.py)
and the plan checks (aotc/artifact/launch_checks.py) all read this table; the runtime never branches on a kind.
A new template is a new row here and its module under aotc/kernels/.

The table lives in ``ir`` because the reader checks each launch's grid against its row and may not import
the compiler. The compiler's parts of a row (its emitter, fusion check and node groups) are therefore named as
``"module:function"`` under ``aotc.kernels``; aotc/kernels/templates.py resolves them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from aotc.ir.ops import REDUCTIONS, Op
from aotc.ir.symbolic import SymExpr, add, floordiv, mul, smax

if TYPE_CHECKING:
    from aotc.ir.graph import Graph
    from aotc.ir.schedule import Kernel
    from aotc.ir.types import Node

Size = int | SymExpr
GridRule = Callable[["Graph", "Kernel"], tuple[Size, Size, Size]]


class KernelKind(str):
    """A template's name, as the artifact stores it. One object per name, so ``k.kind is KernelKind.MATMUL``
    holds for a kind read back from a file; ``KernelKind.<NAME>`` exists for every row of ``TEMPLATES``."""

    __slots__ = ()
    _interned: ClassVar[dict[str, KernelKind]] = {}

    def __new__(cls, name: str) -> KernelKind:
        kind = cls._interned.get(name)
        if kind is None:
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"kernel kind {name!r} is not an identifier")
            kind = cls._interned[name] = super().__new__(cls, name)
        return kind

    @property
    def value(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"KernelKind({str(self)!r})"


@dataclass(frozen=True)
class Template:
    """One kernel template.

    ``emit``: ``(builder, plan, name, config, tiles) -> Kernel``, the plan a ``KernelPlan`` (aotc/kernels/fusion.py)
    and ``tiles`` autotuning's config or None. ``check``: ``(root node) -> reason | None``, whether the template can
    emit a launch rooted at that node. ``group``: ``(fusion graph) -> [(node indices, detail)]``, node groups the
    template computes whole as one launch each, before the planner's general rules (aotc/kernels/fusion.py);
    ``detail`` is the template's own record of a group, which its emitter reads. ``tuning``: what autotuning
    varies, "gemm" (matmul tiles), "attention" (flash-attention tiles) or "recurrent" (a chain's rows per program
    and warps); "" when the heuristics alone choose.
    """

    kind: KernelKind
    roots: frozenset[Op]
    grid: GridRule
    emit: str
    check: str = ""
    epilogue: bool = False  # the pointwise consumers of its root's output fuse into the launch
    tuning: str = ""
    group: str = ""


# -- grids: what each template launches, checked by the reader ----------------------------------------


def _cdiv(a: Size, b: int) -> Size:
    return floordiv(add(a, b - 1), b)


def _numel(shape: tuple[Size, ...]) -> Size:
    out: Size = 1
    for d in shape:
        out = mul(out, d)
    return out


def _block(k: Kernel, name: str) -> int:
    v = dict(k.constexprs).get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"a {k.kind} kernel needs a positive {name} constexpr, got {v!r}")
    return v


def _anchor(graph: Graph, k: Kernel, op: Op, rank: int) -> Node:
    """The one ``op`` node a launch of a contraction template computes (operands and output of rank >= ``rank``)."""
    found = [graph.nodes[i] for i in k.nodes if graph.nodes[i].op is op]
    if len(found) != 1:
        raise ValueError(f"a {k.kind} launch computes {len(found)} {op.value} nodes, not 1")
    node = found[0]
    if len(node.inputs) < 2 or min(x.type.rank for x in (*node.inputs[:2], *node.outputs)) < rank:
        raise ValueError(f"its {op.value} node does not have the operands the template takes")
    return node


def _largest(xs: Iterable[Size]) -> Size:
    out: Size | None = None
    for x in dict.fromkeys(xs):
        out = x if out is None else smax(out, x)
    return 0 if out is None else out


def _batched(tiles: Size, batch: Size, k: Kernel) -> tuple[Size, Size, Size]:
    """The batch on grid axis y where the code reads it there (codegen's ``tl.program_id(1)``), else folded
    into axis x (a batch that may exceed axis y's limit)."""
    if not isinstance(k.source, str):
        raise ValueError("its source is not text")
    return (tiles, batch, 1) if "tl.program_id(1)" in k.source else (mul(tiles, batch), 1, 1)


def _written(graph: Graph, k: Kernel) -> list[tuple[Size, ...]]:
    written = set(k.outputs)
    return [o.type.shape for i in k.nodes for o in graph.nodes[i].outputs if o.id in written]


def flat_grid(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """A BLOCK of elements per program over its outputs' elements (a scatter's copy: over the output it copies
    the updated value into)."""
    return (_largest(_cdiv(_numel(s), _block(k, "BLOCK")) for s in _written(graph, k)), 1, 1)


def scatter_grid(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """A BLOCK of updates per program: a scatter writes its output in place at the updates' positions only (its
    copy launch, ``flat_grid``, wrote the rest)."""
    shapes = [graph.nodes[i].inputs[-1].type.shape for i in k.nodes if graph.nodes[i].op is Op.SCATTER]
    if not shapes:
        raise ValueError("a scatter launch computes no scatter")
    return (_largest(_cdiv(_numel(s), _block(k, "BLOCK")) for s in shapes), 1, 1)


def reduction_grid(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """XBLOCK rows per program over its reductions' results."""
    block = _block(k, "XBLOCK")
    shapes = [o.type.shape for i in k.nodes if graph.nodes[i].op in REDUCTIONS for o in graph.nodes[i].outputs]
    if not shapes:
        raise ValueError("a reduction launch computes no reduction")
    return (_largest(_cdiv(_numel(s), block) for s in shapes), 1, 1)


def matmul_grid(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """BLOCK_M x BLOCK_N output tiles per batch entry; a batch that B does not vary over rides in the rows."""
    node = _anchor(graph, k, Op.MATMUL, 2)
    out, b = node.outputs[0].type.shape, node.inputs[1].type.shape
    fold = all(d == 1 for d in b[:-2])
    count = _numel(out[:-2])
    rows = mul(count, out[-2]) if fold else out[-2]
    tiles = mul(_cdiv(rows, _block(k, "BLOCK_M")), _cdiv(out[-1], _block(k, "BLOCK_N")))
    return _batched(tiles, 1 if fold else count, k)


def conv_grid(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """BLOCK_M rows (image and output position) x BLOCK_N output channels of one group per program, the groups
    on axis y; a depthwise convolution's direct kernel covers every channel on axis x."""
    node = _anchor(graph, k, Op.CONV, 3)
    out, w = node.outputs[0].type.shape, node.inputs[1].type.shape
    groups = node.attrs.get("groups", 1)
    if isinstance(groups, bool) or not isinstance(groups, int) or not isinstance(w[0], int) or groups < 1:
        raise ValueError(f"conv with groups {groups!r} and {w[0]} output channels")
    tiles = _cdiv(mul(out[0], _numel(out[2:])), _block(k, "BLOCK_M"))
    if w[1] == 1 and groups > 1:  # depthwise
        return (mul(tiles, _cdiv(w[0], _block(k, "BLOCK_N"))), 1, 1)
    return (mul(tiles, _cdiv(w[0] // groups, _block(k, "BLOCK_N"))), groups, 1)


def attention_grid(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """BLOCK_M query rows of one batch entry per program."""
    node = _anchor(graph, k, Op.SDPA, 2)
    out, lq = node.outputs[0].type.shape, node.inputs[0].type.shape[-2]
    return _batched(_cdiv(lq, _block(k, "BLOCK_M")), _numel(out[:-2]), k)


def recurrent_grid(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """BLOCK_M rows of the recurrence's state per program, over the rows of the values it stores: a state's own,
    or for the concat a loop stacks its steps' states into (kernels/recurrent_loop.py), one part's (each program
    stores its rows of every step)."""
    written = set(k.outputs)
    shapes = []
    for i in k.nodes:
        node = graph.nodes[i]
        for o in node.outputs:
            if o.id in written:
                shapes.append(node.inputs[0].type.shape if node.op is Op.CONCAT else o.type.shape)
    if not shapes:
        raise ValueError("a recurrent_cell launch stores nothing")
    return (_largest(_cdiv(_numel(s[:-1]), _block(k, "BLOCK_M")) for s in shapes), 1, 1)


# -- the table ------------------------------------------------------------------------------------

K = KernelKind
TEMPLATES: tuple[Template, ...] = (
    Template(K("pointwise"), frozenset(), flat_grid, emit="pointwise:emit_plan"),
    Template(K("reduction"), frozenset(), reduction_grid, emit="reduction:emit_plan"),
    Template(
        K("matmul"),
        frozenset({Op.MATMUL}),
        matmul_grid,
        emit="matmul:emit_plan",
        check="matmul:why_not_matmul",
        epilogue=True,
        tuning="gemm",
    ),
    Template(
        K("conv"),
        frozenset({Op.CONV}),
        conv_grid,
        emit="conv:emit_plan",
        check="conv:why_not_conv",
        epilogue=True,
        tuning="gemm",  # as implicit GEMM; the depthwise kernel is not tuned
    ),
    Template(
        K("attention"),
        frozenset({Op.SDPA}),
        attention_grid,
        emit="attention:emit_plan",
        check="attention:why_not_attention",
        tuning="attention",
    ),
    # A scatter's output takes two launches: a copy of its data, then its writes into that buffer in place.
    Template(K("scatter_copy"), frozenset(), flat_grid, emit="scatter:emit_copy_plan"),
    Template(K("scatter"), frozenset(), scatter_grid, emit="scatter:emit_plan"),
    # The steps of an unrolled recurrence (an LSTM's time loop), each its products, gates and state update.
    Template(
        K("recurrent_cell"),
        frozenset(),
        recurrent_grid,
        emit="recurrent:emit_plan",
        group="recurrent:node_groups",
        tuning="recurrent",  # rows per program and warps, from the tuned table (not --autotune: no root node)
    ),
)
del K

BY_KIND: dict[str, Template] = {t.kind: t for t in TEMPLATES}
for _t in TEMPLATES:
    setattr(KernelKind, _t.kind.upper(), _t.kind)
del _t
# Template-rooted ops: the template loads their operands itself.
ROOTS: frozenset[Op] = frozenset().union(*(t.roots for t in TEMPLATES))
ROOTED_AT: dict[Op, Template] = {op: t for t in TEMPLATES for op in t.roots}


def template(kind: str) -> Template:
    """The row of ``kind``; ValueError naming it when no template has that name."""
    row = BY_KIND.get(kind)
    if row is None:
        raise ValueError(f"kernel kind {str(kind)[:60]!r} is not a template of this aotc (it knows {sorted(BY_KIND)})")
    return row


def grid_need(graph: Graph, k: Kernel) -> tuple[Size, Size, Size]:
    """Per axis, the programs the template of ``k.kind`` launches for ``k``'s nodes, outputs and block sizes, which
    the reader holds every launch's grid equal to: a program past it would work on tiles outside its outputs, and
    one short of it would leave tiles of them unwritten. ValueError when ``k`` lacks what its template has."""
    return template(k.kind).grid(graph, k)
