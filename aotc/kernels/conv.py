"""Convolution (the CONV primitive, NC + spatial dims) as an implicit GEMM with a fused epilogue.

Per group g the convolution is a GEMM: rows M = N * prod(out spatial) (an image and an output
position), columns = C_out / groups (output channels), K = C_in / groups * prod(kernel) (an input
channel and a kernel tap). Nothing is copied into an im2col buffer: the A tile is gathered straight
from the input with index math, and taps that fall in the padding are masked to zero. The bias /
batch-norm affine / activation consumers run on the accumulator tile before the store, so the CNN's
conv + batch norm + ReLU is one kernel.

A convolution in which each output channel reads a single input channel (depthwise, with or without
a channel multiplier) has K = prod(kernel) and one column per group: tensor-core tiles would be
mostly padding there, so it gets a direct kernel that multiplies [rows, channels] tiles tap by tap.
"""

from __future__ import annotations

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
from aotc.ir.tiles import (
    TileConfig,
    check_dot_config,
    direct_conv_config,
    matmul_config,
    upper,
)
from aotc.ir.types import Node, Value
from aotc.kernels import index_text as ix
from aotc.kernels.contraction_emit import (
    MAX_GRID_YZ,
    anchor_index,
    can_fuse_epilogue,
    cdiv,
    emit_epilogue,
    emit_tile_order,
    finish_tiled,
    full_tile,
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
from aotc.kernels.reach import GRID_X, GRID_Y

if TYPE_CHECKING:
    from aotc.kernels.config import KernelConfig
    from aotc.kernels.emit import KernelBuilder
    from aotc.kernels.fusion import KernelPlan

__all__ = [
    "ConvShape",
    "can_fuse_epilogue",
    "conv_shape",
    "emit_conv",
    "emit_plan",
    "why_not_conv",
    "why_not_epilogue",
]

Size = int | SymExpr

# Unroll the tap loop of the direct kernel up to this many taps (a 7x7 kernel has 49).
MAX_UNROLLED_TAPS = 64
FIXED_NAMES = (
    *("pid", "g", "num_pid_m", "num_pid_n", "num_pid_in_group", "group_id", "first_pid_m", "group_size_m"),
    *("pid_m", "pid_n", "offs_m", "offs_n", "offs_k", "mask_m", "mask_n", "img", "pos", "co", "ci", "ci_base"),
    *("tap", "acc", "k0", "a", "b"),
)
_SPATIAL = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}


@dataclass(frozen=True, slots=True)
class ConvShape:
    batch: Size
    in_spatial: tuple[Size, ...]
    out_spatial: tuple[Size, ...]
    c_out: int
    c_in_group: int
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]  # (begin, end) per spatial dim, flattened
    dilations: tuple[int, ...]
    groups: int

    @property
    def rows(self) -> Size:
        out: Size = self.batch
        for d in self.out_spatial:
            out = mul(out, d)
        return out

    @property
    def taps(self) -> int:
        out = 1
        for k in self.kernel:
            out *= k
        return out

    @property
    def c_out_group(self) -> int:
        return self.c_out // self.groups

    @property
    def depthwise(self) -> bool:
        """Each output channel reads one input channel: the direct kernel's case."""
        return self.c_in_group == 1 and self.groups > 1


def conv_shape(node: Node) -> ConvShape:
    reason = why_not_conv(node)
    if reason is not None:
        raise UnsupportedError(f"conv template: {reason}")
    x, w = (v.type.shape for v in node.inputs)
    nsp = len(x) - 2
    a = node.attrs
    return ConvShape(
        batch=x[0],
        in_spatial=tuple(x[2:]),
        out_spatial=tuple(node.outputs[0].type.shape[2:]),
        c_out=w[0],
        c_in_group=w[1],
        kernel=tuple(w[2:]),
        strides=tuple(a.get("strides", (1,) * nsp)),
        pads=tuple(a.get("pads", (0,) * (2 * nsp))),
        dilations=tuple(a.get("dilations", (1,) * nsp)),
        groups=a.get("groups", 1),
    )


def why_not_conv(node: Node) -> str | None:
    """None when the template can emit ``node``, else the reason."""
    if node.op is not Op.CONV or len(node.inputs) != 2:
        return f"{node.op.value} is not a two-input conv"
    w = node.inputs[1].type.shape
    if not all(isinstance(d, int) for d in w):
        return f"conv weight shape {w} is not static"
    attrs = [node.attrs.get(k, ()) for k in ("strides", "pads", "dilations")] + [(node.attrs.get("groups", 1),)]
    if any(not isinstance(v, int) for t in attrs for v in t):
        return "conv strides, pads, dilations and groups must be static ints"
    if node.outputs[0].type.dtype not in (DType.float32, DType.float16, DType.bfloat16):
        return f"conv of {node.outputs[0].type.dtype.value}"
    return None


def emit_conv(
    builder: KernelBuilder,
    node: Node,
    epilogue: Sequence[Node] = (),
    outputs: Sequence[Value] | None = None,
    *,
    arch_hint: str | int | None = None,
    config: TileConfig | None = None,
    name: str = "conv",
    precision: str | None = None,
) -> Kernel:
    """Emit ``node`` (CONV) with ``epilogue`` into ``builder`` and return the finished Kernel; arguments
    as for ``emit_matmul``. Depthwise convolutions use the direct kernel."""
    shape = conv_shape(node)
    anchor = node.outputs[0]
    outputs = stored_outputs(builder, node, epilogue, outputs)
    node_index = anchor_index(builder, node)
    ranges = builder.graph.ranges
    reserve(builder, (*FIXED_NAMES, *(n for p in "oki" for n in _names(p, shape))))
    if shape.depthwise:
        cfg = config or direct_conv_config(upper(shape.rows, ranges), shape.c_out, arch_hint)
        grid = _emit_direct(builder, node, shape, cfg, outputs)
    else:
        if shape.groups > MAX_GRID_YZ:
            raise UnsupportedError(f"conv with {shape.groups} groups: at most {MAX_GRID_YZ} (one grid row per group)")
        k = shape.c_in_group * shape.taps
        precision = check_input_precision(dot_precision(node.attrs) if precision is None else precision)
        dt = anchor.type.dtype
        cfg = check_dot_config(
            config or matmul_config(upper(shape.rows, ranges), shape.c_out_group, k, dt, arch_hint, True, precision)
        )
        grid = _emit_gemm(builder, node, shape, cfg, outputs, precision)
    return finish_tiled(builder, name, KernelKind.CONV, grid, cfg, node_index)


def emit_plan(b: KernelBuilder, kp: KernelPlan, name: str, config: KernelConfig, tiles: Any = None) -> Kernel:
    """The template table's emitter (aotc/ir/templates.py): ``kp``'s conv, its epilogue storing ``kp.anchor``."""
    assert kp.root is not None
    arch = f"sm_{config.arch}"
    return emit_conv(b, kp.root, kp.epilogue, outputs=(kp.anchor,), arch_hint=arch, name=name, config=tiles)


def _emit_rows(builder: KernelBuilder, shape: ConvShape, rows: str, masked: bool) -> tuple[str, list[str]]:
    """Per row of the tile: its image index and output position (one [BLOCK_M] vector per spatial dim)."""
    builder.line("offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    if masked:
        builder.line(f"mask_m = offs_m < {rows}")
    positions = _prod_text(builder, shape.out_spatial)
    builder.line(f"img = {ix.div('offs_m', positions)}")
    r, at = builder.reach, _prod_arg(builder, shape.out_spatial)
    r.define("img", floordiv(r.var("offs_m"), at))
    if positions == "1":
        return "img", ["0"] * len(shape.out_spatial)
    builder.line(f"pos = offs_m % {positions}")
    r.define("pos", mod(r.var("offs_m"), at))
    out_pos = unravel(builder, "pos", shape.out_spatial, _names("o", shape))
    return "img", out_pos


def _names(prefix: str, shape: ConvShape) -> list[str]:
    """Readable per-spatial-dim names: ``oh``/``ow`` (output), ``kh``/``kw`` (tap), ``ih``/``iw`` (input)."""
    n = len(shape.kernel)
    return [prefix + s for s in _SPATIAL.get(n, tuple(f"x{i}" for i in range(n)))]


def _prod_text(builder: KernelBuilder, dims: Sequence[Size]) -> str:
    out: Size = 1
    for d in dims:
        out = mul(out, d)
    return size_text(builder, out)


def _prod_arg(builder: KernelBuilder, dims: Sequence[Size]) -> Size:
    out: Size = 1
    for d in dims:
        out = mul(out, d)
    return builder.arg(out)


def _input_position(
    builder: KernelBuilder, shape: ConvShape, out_pos: Sequence[str], taps: Sequence[str], row: str, col: str
) -> tuple[list[str], str | None]:
    """Input coordinates of (output position, tap) pairs and the mask that zeroes the padding.

    ``row``/``col`` are the broadcast suffixes that put positions on tile rows and taps on columns.
    A side is checked only where padding can reach: the low side when its pad is > 0, the high side
    when its pad is > 0 (without end padding the last tap of the last output stays inside).
    """
    coords, checks = [], []
    r = builder.reach
    for d, (o, t, name) in enumerate(zip(out_pos, taps, _names("i", shape))):
        s, dil = shape.strides[d], shape.dilations[d]
        begin, end = shape.pads[2 * d], shape.pads[2 * d + 1]
        base = ix.mul_(o + row if o != "0" else "0", str(s))
        tap = ix.mul_(t + col if t != "0" else "0", str(dil))
        builder.line(f"{name} = {ix.add(ix.add(base, tap), str(-begin))}")
        held = add(add(mul(r.var(o), s) if o != "0" else 0, mul(r.var(t), dil) if t != "0" else 0), -begin)
        r.define(name, held)
        coords.append(name)
        if begin:
            checks.append(f"{name} >= 0")
            r.guard(f"{name} >= 0", name, lo=0)
        if end:
            checks.append(f"{name} < {size_text(builder, shape.in_spatial[d])}")
            r.guard(checks[-1], name, hi=builder.arg(shape.in_spatial[d]))
    return coords, mask_and(*checks)


def _emit_gemm(
    builder: KernelBuilder, node: Node, shape: ConvShape, cfg: TileConfig, outputs: Sequence[Value], precision: str
) -> tuple:
    x, w = node.inputs
    anchor = node.outputs[0]
    rows = size_text(builder, shape.rows, "M")
    ng, k = shape.c_out_group, shape.c_in_group * shape.taps
    builder.line("pid = tl.program_id(0)")
    mask_m = None if is_multiple(builder, shape.rows, cfg.block_m) else "mask_m[:, None]"
    mask_n = None if ng % cfg.block_n == 0 else "mask_n[None, :]"
    emit_tile_order(builder, rows, str(ng), "pid")
    tile_reach(builder, shape.rows, ng)
    k_reach(builder, k)
    r = builder.reach
    img, out_pos = _emit_rows(builder, shape, rows, mask_m is not None)
    builder.line("offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
    if mask_n:
        builder.line(f"mask_n = offs_n < {ng}")
    if shape.groups > 1:
        builder.line("g = tl.program_id(1)")
        builder.line(f"co = g * {ng} + offs_n")
        builder.line(f"ci_base = g * {shape.c_in_group}")
        r.bound("g", GRID_Y)
        r.define("co", add(mul(r.var("g"), ng), r.var("offs_n")))
        r.define("(ci_base + ci[None, :])", add(mul(r.var("g"), shape.c_in_group), r.var("ci")))
    else:
        builder.line("co = offs_n")
        r.define("co", r.var("offs_n"))
    tail_k = k % cfg.block_k != 0
    builder.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    with builder.block(f"for k0 in range(0, {k}, BLOCK_K)"):
        builder.line("offs_k = k0 + tl.arange(0, BLOCK_K)")
        builder.line(f"ci = {ix.div('offs_k', str(shape.taps))}")
        r.define("ci", floordiv(r.var("offs_k"), shape.taps))
        taps = ["0"] * len(shape.kernel)
        if shape.taps > 1:
            builder.line(f"tap = offs_k % {shape.taps}")
            r.define("tap", mod(r.var("offs_k"), shape.taps))
            taps = unravel(builder, "tap", shape.kernel, _names("k", shape))
        coords, pad_mask = _input_position(builder, shape, out_pos, taps, "[:, None]", "[None, :]")
        k_col = f"offs_k[None, :] < {k}" if tail_k else None
        k_row = f"offs_k[:, None] < {k}" if tail_k else None
        channel = "(ci_base + ci[None, :])" if shape.groups > 1 else "ci[None, :]"
        a_tile = builder.load(x, [f"{img}[:, None]", channel, *coords], mask_and(mask_m, k_col, pad_mask), "0.0")
        w_taps = [t if t == "0" else f"{t}[:, None]" for t in taps]
        b_tile = builder.load(w, ["co[None, :]", "ci[:, None]", *w_taps], mask_and(k_row, mask_n), "0.0")
        full_tile(builder, a_tile, "(BLOCK_M, BLOCK_K)", x.type.dtype, "a")
        full_tile(builder, b_tile, "(BLOCK_K, BLOCK_N)", w.type.dtype, "b")
        extra = ""
        if anchor.type.dtype is DType.float32:
            extra = f', input_precision="{precision}"'
        builder.line(f"acc = tl.dot(a, b, acc{extra})")
    out_index = [f"{img}[:, None]", "co[None, :]", *(o if o == "0" else f"{o}[:, None]" for o in out_pos)]
    emit_epilogue(builder, anchor, "acc", out_index, mask_and(mask_m, mask_n), outputs)
    return (mul(cdiv(shape.rows, cfg.block_m), cdiv(ng, cfg.block_n)), shape.groups, 1)


def _emit_direct(
    builder: KernelBuilder, node: Node, shape: ConvShape, cfg: TileConfig, outputs: Sequence[Value]
) -> tuple:
    """Depthwise: a [BLOCK_M rows, BLOCK_N channels] tile accumulates x * w over the taps in fp32."""
    x, w = node.inputs
    anchor = node.outputs[0]
    rows = size_text(builder, shape.rows, "M")
    mult = shape.c_out_group  # output channels per input channel
    builder.line("pid = tl.program_id(0)")
    builder.line(f"num_pid_n = tl.cdiv({shape.c_out}, BLOCK_N)")
    builder.line("pid_m = pid // num_pid_n")
    builder.line("pid_n = pid % num_pid_n")
    mask_m = None if is_multiple(builder, shape.rows, cfg.block_m) else "mask_m[:, None]"
    mask_n = None if shape.c_out % cfg.block_n == 0 else "mask_n[None, :]"
    img, out_pos = _emit_rows(builder, shape, rows, mask_m is not None)
    builder.line("co = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
    if mask_n:
        builder.line(f"mask_n = co < {shape.c_out}")
    builder.line(f"ci = co // {mult}" if mult > 1 else "ci = co")
    r, bm, bn = builder.reach, sym("BLOCK_M"), sym("BLOCK_N")
    tiles_n = cdiv(shape.c_out, bn)
    r.bound("offs_m", mul(add(floordiv(add(GRID_X, -1), tiles_n), 1), bm))
    r.guard("mask_m[:, None]", "offs_m", 0, builder.arg(shape.rows))
    r.bound("co", mul(tiles_n, bn))
    r.guard("mask_n[None, :]", "co", 0, shape.c_out)
    r.define("ci", floordiv(r.var("co"), mult))
    r.bound("tap", shape.taps)
    loop = "tl.static_range" if shape.taps <= MAX_UNROLLED_TAPS else "range"
    builder.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    with builder.block(f"for tap in {loop}({shape.taps})"):
        taps = unravel(builder, "tap", shape.kernel, _names("k", shape))
        coords, pad_mask = _input_position(builder, shape, out_pos, taps, "[:, None]", "")
        x_tile = builder.load(x, [f"{img}[:, None]", "ci[None, :]", *coords], mask_and(mask_m, mask_n, pad_mask))
        w_tile = builder.load(w, ["co[None, :]", "0", *taps], mask_n and "mask_n[None, :]")
        builder.line(f"acc += {x_tile}.to(tl.float32) * {w_tile}.to(tl.float32)")
    out_index = [f"{img}[:, None]", "co[None, :]", *(o if o == "0" else f"{o}[:, None]" for o in out_pos)]
    emit_epilogue(builder, anchor, "acc", out_index, mask_and(mask_m, mask_n), outputs)
    return (mul(cdiv(shape.rows, cfg.block_m), cdiv(shape.c_out, cfg.block_n)), 1, 1)
