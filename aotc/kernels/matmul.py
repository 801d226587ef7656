"""Matmul and batched matmul (the MATMUL primitive) as one ``tl.dot`` kernel.

The kernel tiles the output in BLOCK_M x BLOCK_N tiles visited in grouped order, loops over K in
BLOCK_K steps with masks for the tails and accumulates in float32 (integers: in their own type,
wrapping as numpy does). Operands are loaded through the builder, so a transposed or broadcast
weight, or a cast feeding the product, is index math and a conversion inside the loop (the fused
prologue), never a copy. The pointwise consumers of the product (bias, activation, residual, cast)
run on the accumulator tile before the masked store (the fused epilogue).

Batch dims broadcast as numpy's matmul does. When B does not vary over the batch (a Linear applied
to a (batch, seq, d) input) the batch folds into the rows, so a decode step with seq = 1 still fills
BLOCK_M rows; otherwise the batch is grid axis y.

On Hopper (sm_90 at PTX 8.6 or newer) A and B load through in-kernel tensor descriptors where each is valid for
it, with no masks (the boxes zero-fill the tails), and the epilogue stores through one where a box can take the
output (kernels/matmul_tma.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.ops.reduce import check_input_precision, dot_precision
from aotc.ir.schedule import Kernel
from aotc.ir.symbolic import SymExpr, add, floordiv, mod, mul, sym
from aotc.ir.templates import KernelKind
from aotc.ir.tiles import SM90_SMS, TileConfig, check_arch, check_dot_config, matmul_config, upper
from aotc.ir.types import Node, Value
from aotc.kernels.contraction_emit import (
    anchor_index,
    can_fuse_epilogue,
    cdiv,
    emit_epilogue,
    emit_tile_order,
    finish_tiled,
    full_tile,
    grid_with_batch,
    is_multiple,
    k_reach,
    mask_and,
    reserve,
    size_text,
    stored_outputs,
    tile_reach,
    unravel,
    why_not_epilogue,
)
from aotc.kernels.matmul_tma import TmaPlan, descriptor_load, make_operand_descriptor, make_output_descriptor, plan_tma
from aotc.kernels.reach import GRID_X, GRID_Y

if TYPE_CHECKING:
    from aotc.kernels.config import KernelConfig
    from aotc.kernels.emit import IndexItem, KernelBuilder
    from aotc.kernels.fusion import KernelPlan

__all__ = [
    "MatmulShape",
    "can_fuse_epilogue",
    "emit_matmul",
    "emit_plan",
    "matmul_shape",
    "why_not_epilogue",
    "why_not_matmul",
]

Size = int | SymExpr

DOT_DTYPES = (DType.float32, DType.float16, DType.bfloat16)
FIXED_NAMES = (
    *("pid", "pid_b", "tiles", "num_pid_m", "num_pid_n", "num_pid_in_group", "group_id", "first_pid_m"),
    *("group_size_m", "pid_m", "pid_n", "offs_m", "offs_n", "offs_k", "mask_m", "mask_n", "row", "batch_row"),
    *("acc", "k0", "a", "b", "tile", "num_tiles", "a_desc", "b_desc"),
)
# The persistent form's grid: sm_90's SM count (H100 SXM, H200), since the launching GPU's is not known when
# compiling.
PERSISTENT_PROGRAMS = SM90_SMS


@dataclass(frozen=True, slots=True)
class MatmulShape:
    """The problem a MATMUL node poses: ``out[batch] = a[a_batch] @ b[b_batch]``, (m, k) @ (k, n).

    ``a_batch``/``b_batch`` are the operands' batch dims right-aligned to ``batch`` (static 1 where an
    operand broadcasts or lacks the dim). ``fold`` says the batch rides in the rows.
    """

    batch: tuple[Size, ...]
    m: Size
    n: Size
    k: Size
    a_batch: tuple[Size, ...]
    b_batch: tuple[Size, ...]
    fold: bool
    a_dims: int  # how many batch dims each operand really has
    b_dims: int

    @property
    def rows(self) -> Size:
        return mul(_prod(self.batch), self.m) if self.fold else self.m

    @property
    def batch_count(self) -> Size:
        return 1 if self.fold else _prod(self.batch)


def _prod(dims: Sequence[Size]) -> Size:
    out: Size = 1
    for d in dims:
        out = mul(out, d)
    return out


def _aligned(batch: tuple[Size, ...], nb: int) -> tuple[Size, ...]:
    return (1,) * (nb - len(batch)) + batch


def matmul_shape(node: Node) -> MatmulShape:
    if node.op is not Op.MATMUL or len(node.inputs) != 2:
        raise UnsupportedError(f"matmul template: expected a MATMUL node with 2 inputs, got {node.op.value}")
    a, b = (v.type.shape for v in node.inputs)
    out = node.outputs[0].type.shape
    batch = out[:-2]
    a_batch, b_batch = _aligned(a[:-2], len(batch)), _aligned(b[:-2], len(batch))
    fold = all(d == 1 for d in b_batch)
    return MatmulShape(batch, out[-2], out[-1], a[-1], a_batch, b_batch, fold, len(a) - 2, len(b) - 2)


def why_not_matmul(node: Node) -> str | None:
    """None when the template can emit ``node``, else the reason."""
    if node.op is not Op.MATMUL:
        return f"{node.op.value} is not a matmul"
    dt = node.outputs[0].type.dtype
    if dt is DType.bool:
        return "bool matmul"
    return None


def emit_matmul(
    builder: KernelBuilder,
    node: Node,
    epilogue: Sequence[Node] = (),
    outputs: Sequence[Value] | None = None,
    *,
    arch_hint: str | int | None = None,
    config: TileConfig | None = None,
    name: str = "matmul",
    precision: str | None = None,
    persistent: bool = False,
    ptx: int | None = None,
) -> Kernel:
    """Emit ``node`` (MATMUL) with ``epilogue`` (pointwise nodes on its output, in order) into ``builder``
    and return the finished Kernel. ``outputs`` are the values the kernel stores (default: the last
    epilogue value, or the product). An fp32 product's ``tl.dot`` input precision is ``precision`` ("ieee",
    "tf32", "tf32x3"), by default the node's own (``dot_precision``: IEEE unless the compile marked it).

    ``persistent``: the persistent form (Triton's tutorial 09 with pointer loads): a fixed grid of
    PERSISTENT_PROGRAMS programs, each looping ``for tile in range(pid, num_tiles, NUM_SMS)`` over the grouped tile
    order, so a program's next tile's loads follow its last store with no launch between. The SM count is not known
    when compiling, so the grid is fixed at sm_90's 132 (a GPU with fewer SMs runs some programs after others; one
    with more leaves SMs idle). Not for a product batched on the grid.

    ``ptx``: the PTX ISA version the kernel will be built at (86: 8.6; None: not known). With sm_90 and PTX 8.6 or
    newer, A and B load (and the output stores) through tensor descriptors where each is valid for it
    (kernels/matmul_tma.py), in either form; the persistent one then makes them once, before its tile loop."""
    reason = why_not_matmul(node)
    if reason is not None:
        raise UnsupportedError(f"matmul template: {reason}")
    outputs = stored_outputs(builder, node, epilogue, outputs)
    node_index = anchor_index(builder, node)
    shape = matmul_shape(node)
    # The operands' dtype picks the product; the anchor may be wider (out_dtype="float32" keeps the
    # float32 accumulator of a half product, which the epilogue then stores unrounded).
    dtype = node.inputs[0].type.dtype
    dot = dtype in DOT_DTYPES
    precision = check_input_precision(dot_precision(node.attrs) if precision is None else precision)
    ranges = builder.graph.ranges
    cfg = config or matmul_config(
        upper(shape.rows, ranges), upper(shape.n, ranges), upper(shape.k, ranges), dtype, arch_hint, dot, precision
    )
    if dot:
        check_dot_config(cfg)
    tiles = mul(cdiv(shape.rows, cfg.block_m), cdiv(shape.n, cfg.block_n))
    grid, batch_on_x = grid_with_batch(tiles, shape.batch_count, ranges)
    if persistent:
        if shape.batch_count != 1:
            raise UnsupportedError(
                f"persistent matmul: a product batched over {shape.batch} (batch on the grid); expected one whose "
                "batch folds into its rows"
            )
        grid = (PERSISTENT_PROGRAMS, 1, 1)

    reserve(builder, (*FIXED_NAMES, *_batch_names(shape)))
    rows, n, k = (size_text(builder, d, stem) for d, stem in ((shape.rows, "M"), (shape.n, "N"), (shape.k, "K")))
    mask_m = None if is_multiple(builder, shape.rows, cfg.block_m) else "mask_m[:, None]"
    mask_n = None if is_multiple(builder, shape.n, cfg.block_n) else "mask_n[None, :]"
    tail_k = not is_multiple(builder, shape.k, cfg.block_k)
    arch = int(check_arch(arch_hint)[3:])
    tma = plan_tma(builder, node, outputs, shape.fold, shape.n, cfg, arch, ptx)
    with contextlib.ExitStack() as tile_loop:
        if persistent:
            builder.line("pid = tl.program_id(0)")
            builder.line(f"num_tiles = tl.cdiv({rows}, BLOCK_M) * tl.cdiv({n}, BLOCK_N)")
            # the descriptors cover whole operands (the batch folded into the rows): made once for every tile
            _emit_descriptors(builder, node, outputs, shape, tma, (rows, n, k), (mask_m, mask_n), tail_k, None)
            tile_loop.enter_context(builder.block("for tile in range(pid, num_tiles, NUM_SMS)"))
        _emit_tile(builder, node, epilogue, outputs, shape, cfg, precision, persistent, batch_on_x, tail_k,
                   (rows, n, k), (mask_m, mask_n), tma)  # fmt: skip
    extra = (("NUM_SMS", PERSISTENT_PROGRAMS),) if persistent else ()
    return finish_tiled(builder, name, KernelKind.MATMUL, grid, cfg, node_index, extra)


def _emit_tile(
    builder: KernelBuilder,
    node: Node,
    epilogue: Sequence[Node],
    outputs: Sequence[Value],
    shape: MatmulShape,
    cfg: TileConfig,
    precision: str,
    persistent: bool,
    batch_on_x: bool,
    tail_k: bool,
    sizes: tuple[str, str, str],
    masks: tuple[str | None, str | None],
    tma: TmaPlan,
) -> None:
    """One output tile: its program ids (``tile`` in the persistent loop), the K loop and the epilogue's stores;
    each operand with a box loads through its descriptor, made here unless the persistent form made it already."""
    rows, n, k = sizes
    mask_m, mask_n = masks
    anchor = node.outputs[0]
    dtype = node.inputs[0].type.dtype
    dot = dtype in DOT_DTYPES
    pid = "tile" if persistent else None
    a_idx, b_idx, out_batch, m_idx = _emit_program_ids(builder, shape, rows, n, batch_on_x, pid)
    # the persistent loop's ``tile`` stays below num_tiles by its range: no grid bound to require
    tile_reach(builder, shape.rows, shape.n, grid_bound=not persistent and not (batch_on_x and shape.batch_count != 1))
    k_reach(builder, shape.k)
    if mask_m:
        builder.line(f"mask_m = offs_m < {rows}")
    if mask_n:
        builder.line(f"mask_n = offs_n < {n}")
    acc_dtype = {DType.int32: "tl.int32", DType.int64: "tl.int64"}.get(dtype, "tl.float32")
    if not persistent:
        batch = None if shape.fold else (a_idx, b_idx, m_idx)
        _emit_descriptors(builder, node, outputs, shape, tma, sizes, masks, tail_k, batch)
    builder.line(f"acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={acc_dtype})")
    box_a, box_b = tma.a, tma.b
    with builder.block(f"for k0 in range(0, {k}, BLOCK_K)"):
        if box_a is None or box_b is None:
            builder.line("offs_k = k0 + tl.arange(0, BLOCK_K)")
        a_mask, b_mask = _operand_masks(masks, k, tail_k)
        other = "0.0" if dot else "0"
        if box_a is not None:  # the box zero-fills past M and K: no mask
            builder.line(f"a = {descriptor_load('a_desc', box_a, ('pid_m * BLOCK_M', 'k0'))}")
            a_tile = "a"
        else:
            a_tile = builder.load(node.inputs[0], [*a_idx, m_idx, "offs_k[None, :]"], a_mask, other)
            a_tile = full_tile(builder, a_tile, "(BLOCK_M, BLOCK_K)", node.inputs[0].type.dtype, "a")
        if box_b is not None:
            builder.line(f"b = {descriptor_load('b_desc', box_b, ('k0', 'pid_n * BLOCK_N'))}")
            b_tile = "b"
        else:
            b_tile = builder.load(node.inputs[1], [*b_idx, "offs_k[:, None]", "offs_n[None, :]"], b_mask, other)
            b_tile = full_tile(builder, b_tile, "(BLOCK_K, BLOCK_N)", node.inputs[1].type.dtype, "b")
        if dot:
            extra = f', input_precision="{precision}"' if dtype is DType.float32 else ""
            builder.line(f"acc = tl.dot({a_tile}, {b_tile}, acc{extra})")
        else:
            builder.line(f"acc += tl.sum({a_tile}[:, :, None] * {b_tile}[None, :, :], axis=1)")
    out_index = [*out_batch, m_idx, "offs_n[None, :]"]

    def store(v: Value, index: Sequence[IndexItem], var: str, mask: str | None) -> None:
        # the box is clipped to the output's [rows, N] as ``mask`` clips the pointer store
        builder.descriptor_store(v, "out_desc", "[pid_m * BLOCK_M, pid_n * BLOCK_N]", var, index, mask)

    emit_epilogue(builder, anchor, "acc", out_index, mask_and(mask_m, mask_n), outputs, store if tma.store else None)


def _operand_masks(masks: tuple[str | None, str | None], k: str, tail_k: bool) -> tuple[str | None, str | None]:
    """The masks of A's and B's pointer loads: the M and N edges, and the K tail."""
    mask_m, mask_n = masks
    a_mask = mask_and(mask_m, "offs_k[None, :] < " + k if tail_k else None)
    return a_mask, mask_and("offs_k[:, None] < " + k if tail_k else None, mask_n)


def _emit_descriptors(
    builder: KernelBuilder,
    node: Node,
    outputs: Sequence[Value],
    shape: MatmulShape,
    tma: TmaPlan,
    sizes: tuple[str, str, str],
    masks: tuple[str | None, str | None],
    tail_k: bool,
    batch: tuple[list[IndexItem], list[IndexItem], IndexItem] | None,
) -> None:
    """``a_desc`` and ``b_desc`` for the operands with boxes, ``out_desc`` for a descriptor store. ``batch``: this program's (A's batch indices, B's,
    A's row index) where the batch rides on the grid, each descriptor then over its batch entry's matrix; None
    where it folds into the rows, A's descriptor then over [batch x M, K] and B's over its one matrix. Each
    descriptor's region is the index and mask its pointer load would read."""
    (box_a, box_b), (rows, n, k) = (tma.a, tma.b), sizes
    a, b = node.inputs
    a_mask, b_mask = _operand_masks(masks, k, tail_k)
    if batch is None:
        a_idx, m_idx = _folded_rows(builder, shape)
        b_idx: list[IndexItem] = ["0"] * shape.b_dims
        a_at, b_at = ["0"] * shape.a_dims, b_idx
    else:
        a_idx, b_idx, m_idx = batch
        a_at, b_at = a_idx, b_idx
    if box_a is not None:
        region = ([*a_idx, m_idx, "offs_k[None, :]"], a_mask)
        blocks = ("BLOCK_M", "BLOCK_K")
        make_operand_descriptor(builder, a, box_a, (rows, k), blocks, [*a_at, 0, 0], region, "a_desc")
    if box_b is not None:
        region = ([*b_idx, "offs_k[:, None]", "offs_n[None, :]"], b_mask)
        blocks = ("BLOCK_K", "BLOCK_N")
        make_operand_descriptor(builder, b, box_b, (k, n), blocks, [*b_at, 0, 0], region, "b_desc")
    if tma.store:  # only where the batch folds into the rows: one descriptor over the whole output
        make_output_descriptor(builder, outputs[0], rows, n)


def _folded_rows(builder: KernelBuilder, shape: MatmulShape) -> tuple[list[IndexItem], IndexItem]:
    """A's batch indices and row index of folded row ``offs_m``, as index math (no lines: the persistent form
    asks before its tile loop, where ``_emit_program_ids`` has written none)."""
    if not shape.batch:
        return [], "offs_m[:, None]"
    folded = builder.index_var("offs_m[:, None]", shape.rows)
    out_batch = _unravel_index(floordiv(folded, shape.m), shape.batch)
    return _operand_batch(out_batch, shape.a_batch, shape.a_dims), mod(folded, shape.m)


def emit_plan(b: KernelBuilder, kp: KernelPlan, name: str, config: KernelConfig, tiles: Any = None) -> Kernel:
    """The template table's emitter (aotc/ir/templates.py): ``kp``'s matmul, its epilogue storing ``kp.anchor``,
    loading through tensor descriptors where the target and its PTX (``config.ptx``) allow."""
    assert kp.root is not None
    arch = f"sm_{config.arch}"
    # the persistent form where the tiles ask for it (a tuned entry: configs.tile_from_json admits it only for a
    # product whose batch folds into its rows, which this check repeats for a config from elsewhere)
    persistent = bool(getattr(tiles, "persistent", False)) and matmul_shape(kp.root).batch_count == 1
    return emit_matmul(
        b, kp.root, kp.epilogue, outputs=(kp.anchor,), arch_hint=arch, name=name, config=tiles,
        persistent=persistent, ptx=config.ptx,
    )  # fmt: skip


def _emit_program_ids(
    builder: KernelBuilder, shape: MatmulShape, rows: str, n: str, batch_on_x: bool, tile: str | None = None
) -> tuple[list[IndexItem], list[IndexItem], list[IndexItem], IndexItem]:
    """Program ids and offsets (of the tile numbered ``tile`` when given: the persistent loop's counter); returns
    the per-operand batch indices, the output's batch indices and the row index inside one batch entry
    (tile-shaped: rows along axis 0)."""
    if tile is None:
        builder.line("pid = tl.program_id(0)")
    pid_b = None
    if shape.batch_count != 1:
        if batch_on_x:
            builder.line(f"tiles = tl.cdiv({rows}, BLOCK_M) * tl.cdiv({n}, BLOCK_N)")
            builder.line("pid_b = pid // tiles")
            builder.line("pid = pid % tiles")
        else:
            builder.line("pid_b = tl.program_id(1)")
        pid_b = "pid_b"
        tiles = mul(cdiv(builder.arg(shape.rows), sym("BLOCK_M")), cdiv(builder.arg(shape.n), sym("BLOCK_N")))
        builder.reach.bound(pid_b, add(floordiv(add(GRID_X, -1), tiles), 1) if batch_on_x else GRID_Y)
    emit_tile_order(builder, rows, n, tile or "pid")
    builder.line("offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    builder.line("offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
    m_idx: IndexItem = "offs_m[:, None]"
    if shape.fold and shape.batch and shape.m == 1:
        # Every row is a batch entry; the row index is 0, kept as a tile-shaped name so stores keep their shape.
        builder.line("row = offs_m % 1")
        builder.reach.define("row", 0)
        flat = unravel(builder, "offs_m", shape.batch, _batch_names(shape))
        m_idx = "row[:, None]"
        out_batch = [i if i == "0" else f"{i}[:, None]" for i in flat]
    elif shape.fold and shape.batch:
        # The folded row of each lane as index math (not text lines), so a load of an operand whose batch
        # and row dims are contiguous simplifies back to offs_m: a Linear on [batch, seq, d] reads
        # offs_m * d + offs_k with no // or %.
        folded = builder.index_var("offs_m[:, None]", shape.rows)
        m_idx = mod(folded, shape.m)
        out_batch = _unravel_index(floordiv(folded, shape.m), shape.batch)
    elif pid_b is not None:
        out_batch = unravel(builder, pid_b, shape.batch, _batch_names(shape))
    else:
        out_batch = ["0"] * len(shape.batch)
    a_idx = _operand_batch(out_batch, shape.a_batch, shape.a_dims)
    b_idx = _operand_batch(out_batch, shape.b_batch, shape.b_dims)
    return a_idx, b_idx, out_batch, m_idx


def _unravel_index(flat: Size, dims: Sequence[Size]) -> list[IndexItem]:
    """Row-major per-dim index expressions of ``flat`` over ``dims`` (0 for a dim of size 1)."""
    out: list[IndexItem] = [0] * len(dims)
    inner: Size = 1
    for i in range(len(dims) - 1, -1, -1):
        if dims[i] != 1:
            q = floordiv(flat, inner)
            out[i] = q if all(x == 1 for x in dims[:i]) else mod(q, dims[i])
        inner = mul(inner, dims[i])
    return out


def _batch_names(shape: MatmulShape) -> list[str]:
    return [f"b{i}" for i in range(len(shape.batch))]


def _operand_batch(out_batch: list[IndexItem], aligned: tuple[Size, ...], dims: int) -> list[IndexItem]:
    """An operand's own batch indices: the output's, or 0 where the operand broadcasts."""
    start = len(out_batch) - dims
    return ["0" if aligned[i] == 1 else out_batch[i] for i in range(start, len(out_batch))]
