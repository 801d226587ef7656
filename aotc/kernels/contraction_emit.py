"""Pieces the matmul and conv templates share: the grouped tile order, index unravelling, masks,
the fused epilogue and the checks that decide which pointwise consumers an epilogue may take.

Everything here writes Triton text through the KernelBuilder contract (KERNEL_LAYER.md): ``line``,
``fresh``, ``size_arg``, ``load``, ``compute``, ``store``, ``block`` and ``finish``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from aotc.errors import UnsupportedError
from aotc.ir.analysis import analyze
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops import ELEMENTWISE
from aotc.ir.schedule import Kernel
from aotc.ir.symbolic import SymExpr, add, floordiv, mod, mul, sym
from aotc.ir.symbolic_values import divisor
from aotc.ir.templates import KernelKind
from aotc.ir.tiles import TileConfig, upper
from aotc.ir.types import Node, Value
from aotc.kernels import index_text as ix
from aotc.kernels.pointwise_ops import TL_DTYPE
from aotc.kernels.reach import GRID_X

if TYPE_CHECKING:
    from aotc.kernels.emit import KernelBuilder

Size = int | SymExpr

# Pointwise primitives an epilogue may apply to the accumulator tile (the op table's elementwise family).
# Views are not among them: they are index math the builder folds into the loads.
EPILOGUE_OPS = ELEMENTWISE

_FLOAT = re.compile(r"^-?(\d+\.?\d*([eE][-+]?\d+)?|inf|nan|float\(.*\))$")

# CUDA caps grid y and z at 65535; a batch larger than that rides on axis x instead.
MAX_GRID_YZ = 65535


def cdiv(a: Size, b: int) -> Size:
    return floordiv(add(a, b - 1), b)


def why_not_epilogue(anchor: Node, node: Node) -> str | None:
    """None when ``node`` can be applied to ``anchor``'s output tile in its epilogue, else the reason.

    The tile covers exactly the anchor's output elements, so the node must be pointwise with the
    anchor output's shape; its other inputs are loaded (through views) at the same index.
    """
    out = anchor.outputs[0]
    if node.op not in EPILOGUE_OPS:
        return f"{node.op.value} is not pointwise"
    if len(node.outputs) != 1 or node.outputs[0].type.shape != out.type.shape:
        shape = node.outputs[0].type.shape if node.outputs else ()
        return f"{node.op.value} output shape {shape} differs from the {anchor.op.value} output {out.type.shape}"
    return None


def can_fuse_epilogue(anchor: Node, node: Node) -> bool:
    return why_not_epilogue(anchor, node) is None


def check_epilogue(graph: Graph, anchor: Node, epilogue: Sequence[Node], outputs: Sequence[Value]) -> None:
    """Raise UnsupportedError unless ``epilogue`` is a chain the template can apply to the tile.

    The anchor's output reaches an epilogue node only directly or through earlier epilogue nodes: a
    view of it (a transpose, say) needs the tile at other coordinates than the ones it holds, and a
    reduction of it (softmax's row max) needs the whole row, which one tile does not have.
    """
    chain = {anchor.outputs[0].id}
    for node in epilogue:
        reason = why_not_epilogue(anchor, node)
        if reason is not None:
            raise UnsupportedError(f"epilogue of {anchor.op.value}: {reason}")
        chain.add(node.outputs[0].id)
    # Everything computed from the chain, following readers (the cached analysis) rather than every node.
    users = analyze(graph).users
    derived = set(chain)
    stack = list(chain)
    while stack:
        for i in users.get(stack.pop(), ()):
            for o in graph.nodes[i].outputs:
                if o.id not in derived:
                    derived.add(o.id)
                    stack.append(o.id)
    for node in epilogue:
        for v in node.inputs:
            if v.id in derived and v.id not in chain:
                raise UnsupportedError(
                    f"epilogue of {anchor.op.value}: {node.op.value} reads %{v.id}, computed from the "
                    f"{anchor.op.value} output outside the epilogue (a view or reduction of it)"
                )
    for v in outputs:
        if v.id not in chain:
            raise UnsupportedError(f"{anchor.op.value} kernel output %{v.id} is not the anchor or an epilogue value")


def stored_outputs(
    builder: KernelBuilder, node: Node, epilogue: Sequence[Node], outputs: Sequence[Value] | None
) -> tuple[Value, ...]:
    """The values a matmul-like kernel stores: ``outputs``, or by default the last epilogue value (the anchor's
    own when there is no epilogue); the epilogue checked to be one the template can fuse."""
    anchor = node.outputs[0]
    stored = tuple(outputs) if outputs is not None else ((epilogue[-1].outputs[0],) if epilogue else (anchor,))
    check_epilogue(builder.graph, node, epilogue, stored)
    return stored


def finish_tiled(
    builder: KernelBuilder,
    name: str,
    kind: KernelKind,
    grid: tuple[Size, Size, Size],
    cfg: TileConfig,
    node: int,
    extra: Sequence[tuple[str, int]] = (),
) -> Kernel:
    """The finished kernel of a template tiled by ``cfg`` (block sizes and the grouped tile order as constexprs,
    then ``extra`` ones), with its own node ``node`` among those it computes."""
    return builder.finish(
        name=name,
        kind=kind,
        grid=grid,
        constexprs=(
            ("BLOCK_M", cfg.block_m),
            ("BLOCK_N", cfg.block_n),
            ("BLOCK_K", cfg.block_k),
            ("GROUP_M", cfg.group_m),
            *extra,
        ),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        extra_nodes=(node,),
    )


def anchor_index(builder: KernelBuilder, node: Node) -> int:
    """The index of the template's own node in the builder's graph (for Kernel.nodes)."""
    entry = builder.producers.get(node.outputs[0].id)
    if entry is None or entry[1] is not node:
        raise UnsupportedError(f"{node.op.value} node {node} is not a node of the builder's graph")
    return entry[0]


def is_multiple(builder: KernelBuilder, dim: Size, block: int) -> bool:
    """Whether every binding of the symbols makes ``dim`` a multiple of ``block`` (static sizes, or
    symbols declared ``multiple_of``): then the tiles along it need no tail mask."""
    return divisor(dim, builder.graph.multiples) % block == 0


def size_text(builder: KernelBuilder, dim: Size, stem: str = "size") -> str:
    """``dim`` as text: a literal, or its size arg (named after its symbol, else ``stem``)."""
    return str(dim) if isinstance(dim, int) else builder.size_arg(dim, stem)


def reserve(builder: KernelBuilder, names: Sequence[str]) -> None:
    """Keep the template's fixed names (``acc``, ``offs_m``, ...) from the builder's own names, so a
    size argument named after a user's dim (a symbol called ``pos``) cannot shadow one of them."""
    fn = getattr(builder, "reserve", None)
    if fn is not None:
        fn(*names)
        return
    for n in names:  # the builder's fresh() records the stem as taken
        builder.fresh(n)


def unravel(builder: KernelBuilder, flat: str, dims: Sequence[Size], names: Sequence[str]) -> list[str]:
    """Row-major per-dim indices of the flat index ``flat`` over ``dims``, bound to ``names``.

    A dim of static size 1 gets the literal ``0``; the outermost dim needs no modulo.
    """
    out: list[str] = ["0"] * len(dims)
    inner: Size = 1
    for i in range(len(dims) - 1, -1, -1):
        d = dims[i]
        if d != 1:
            q = ix.div(flat, size_text(builder, inner))
            outer = all(x == 1 for x in dims[:i])
            builder.line(f"{names[i]} = {q if outer else ix.mod(q, size_text(builder, d))}")
            held = floordiv(builder.reach.var(flat), builder.arg(inner))
            builder.reach.define(names[i], held if outer else mod(held, builder.arg(d)))
            out[i] = names[i]
        inner = mul(inner, d)
    return out


def mask_and(*parts: str | None) -> str | None:
    kept = [p for p in parts if p]
    if not kept:
        return None
    return " & ".join(f"({p})" if any(c in p for c in "<>=|&") else p for p in kept)


def full_tile(builder: KernelBuilder, tile: str, shape: str, dtype: DType, name: str) -> str:
    """``tile`` with exactly ``shape``, bound to ``name``: an operand broadcast along a tile axis (an expanded
    column, a constant) loads as [BLOCK_M, 1] or as a literal, and tl.dot needs full tiles. A tile that already
    spans both axes is only renamed (``a = tl.load(...)``), or used as it is."""
    if ix.is_int(tile) or _FLOAT.match(tile):
        builder.line(f"{name} = tl.full({shape}, {tile}, {TL_DTYPE[dtype]})")
    elif not builder.is_tile(tile):
        builder.line(f"{name} = tl.broadcast_to({tile}, {shape})")
    elif not builder.rename(tile, name):
        return tile
    return name


def emit_tile_order(builder: KernelBuilder, rows: str, cols: str, pid: str) -> tuple[str, str]:
    """Grouped launch order (GROUP_M row tiles share each column sweep, so B tiles stay in L2).

    Returns the names of this program's row-tile and column-tile indices. For ``pid`` below the
    ``tl.cdiv(rows, BLOCK_M) * tl.cdiv(cols, BLOCK_N)`` tiles, ``pid_m`` and ``pid_n`` stay below their counts
    (``tile_reach``).
    """
    builder.line(f"num_pid_m = tl.cdiv({rows}, BLOCK_M)")
    builder.line(f"num_pid_n = tl.cdiv({cols}, BLOCK_N)")
    builder.line("num_pid_in_group = GROUP_M * num_pid_n")
    builder.line(f"group_id = {pid} // num_pid_in_group")
    builder.line("first_pid_m = group_id * GROUP_M")
    builder.line("group_size_m = min(num_pid_m - first_pid_m, GROUP_M)")
    builder.line(f"pid_m = first_pid_m + (({pid} % num_pid_in_group) % group_size_m)")
    builder.line(f"pid_n = ({pid} % num_pid_in_group) // group_size_m")
    return "pid_m", "pid_n"


def tile_reach(builder: KernelBuilder, rows: Size, cols: Size, grid_bound: bool = True) -> None:
    """What ``offs_m`` and ``offs_n`` hold (``pid_m * BLOCK_M + tl.arange(0, BLOCK_M)``, ``pid_n`` alike) with the
    program ids ``emit_tile_order`` decodes: below the tile counts' rows and columns, and below ``rows`` and
    ``cols`` where ``mask_m``/``mask_n`` keep a lane. The decoding holds for a program id below the tile count,
    which the grid must be (``grid_bound``; a pid reduced modulo the count already is)."""
    r = builder.reach
    tiles_m, tiles_n = cdiv(builder.arg(rows), sym("BLOCK_M")), cdiv(builder.arg(cols), sym("BLOCK_N"))
    if grid_bound:
        r.require(add(mul(tiles_m, tiles_n), mul(GRID_X, -1)))
    r.bound("offs_m", mul(tiles_m, sym("BLOCK_M")))
    r.bound("offs_n", mul(tiles_n, sym("BLOCK_N")))
    r.guard("mask_m[:, None]", "offs_m", 0, builder.arg(rows))
    r.guard("mask_n[None, :]", "offs_n", 0, builder.arg(cols))


def k_reach(builder: KernelBuilder, k: Size) -> None:
    """What ``offs_k`` holds in ``for k0 in range(0, k, BLOCK_K): offs_k = k0 + tl.arange(0, BLOCK_K)``, and below
    ``k`` where the tail masks keep a lane."""
    r, kk = builder.reach, builder.arg(k)
    r.bound("offs_k", mul(cdiv(kk, sym("BLOCK_K")), sym("BLOCK_K")))
    text = size_text(builder, k)
    r.guard(f"offs_k[None, :] < {text}", "offs_k", 0, kk)
    r.guard(f"offs_k[:, None] < {text}", "offs_k", 0, kk)


def emit_epilogue(
    builder: KernelBuilder,
    anchor: Value,
    acc: str,
    index: Sequence[str],
    mask: str | None,
    outputs: Sequence[Value],
    store: Callable[[Value, Sequence[str], str, str | None], None] | None = None,
) -> None:
    """Round the fp32 (or integer) accumulator to the anchor's dtype, apply the epilogue chain and store
    every output (through ``store(value, index, tile, mask)`` when given: a template's descriptor store; else
    ``builder.store``). Rounding first keeps the kernel's numbers those of the graph, where the product is
    a tensor of the anchor's dtype before any consumer reads it."""
    dtype = anchor.type.dtype
    tile = acc
    if dtype not in (DType.float32, DType.int32, DType.int64):
        tile = builder.fresh("mm")
        builder.line(f"{tile} = {acc}.to({TL_DTYPE[dtype]})")
    env = {anchor.id: tile}
    for v in outputs:
        var = tile if v.id == anchor.id else builder.compute(v, index, mask, env)
        (store or builder.store)(v, index, var, mask)


def grid_with_batch(tiles: Size, batch: Size, ranges: dict[str, tuple[int, int]]) -> tuple[tuple, bool]:
    """(grid, batch_on_x): batch on axis y unless it may exceed CUDA's y limit."""
    if upper(batch, ranges) <= MAX_GRID_YZ:
        return (tiles, batch, 1), False
    return (mul(tiles, batch), 1, 1), True
