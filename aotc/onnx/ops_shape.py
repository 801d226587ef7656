"""ONNX shape and data-movement ops -> aotc layout ops; shapes computed at import time stay symbolic."""

from __future__ import annotations

from typing import Any

import numpy as np

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import norm_axis, numel
from aotc.ir.symbolic import SymExpr, floordiv, smax, smin
from aotc.ir.types import Shape, ShapeDim, Value
from aotc.onnx._common import dtype_from_np
from aotc.onnx.node import Known, OnnxNode, Operand
from aotc.onnx.ops_math import Converter, values

Importer = Any
# ConstantOfShape results up to this many elements are kept as known tensors (they often feed shape arithmetic);
# larger ones become FULL nodes so a huge constant is never stored.
MAX_KNOWN_FILL = 1024
INT64 = np.dtype(np.int64)


# -- symbolic helpers --------------------------------------------------------------------------------------


def sym_min(imp: Importer, a: ShapeDim, b: ShapeDim) -> ShapeDim:
    lo, hi = imp.ctx.bounds(a - b)
    return a if hi <= 0 else b if lo >= 0 else smin(a, b)


def sym_max(imp: Importer, a: ShapeDim, b: ShapeDim) -> ShapeDim:
    lo, hi = imp.ctx.bounds(a - b)
    return a if lo >= 0 else b if hi <= 0 else smax(a, b)


def infer_dim(imp: Importer, node: OnnxNode, src: Shape, others: list[ShapeDim]) -> ShapeDim:
    """The -1 dim of a reshape of ``src`` whose other target dims are ``others``."""
    rest = list(src)
    den: list[ShapeDim] = []
    for d in others:
        if d in rest and isinstance(d, SymExpr):
            rest.remove(d)  # cancel dims both sides share literally: (B, S, 768) -> (B, S, 12, -1)
        else:
            den.append(d)
    num, divisor = numel(tuple(rest)), numel(tuple(den))
    if isinstance(divisor, int):
        if divisor == 0:
            raise node.fail("Reshape with -1 next to a zero-sized dim is ambiguous")
        if isinstance(num, int) and num % divisor:
            raise ShapeError(f"{node.label}: cannot reshape {num} elements into groups of {divisor}")
        return floordiv(num, divisor)
    if num == divisor:
        return 1
    q = imp.ctx.exact_div(num, divisor)
    if q is None:
        raise node.fail(f"cannot infer the -1 dim: {num} / {divisor} is not exact symbolically")
    return q


# -- shape sources -----------------------------------------------------------------------------------------


def _constant(imp: Importer, node: OnnxNode) -> list[Operand]:
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in node.attrs:
            v = node.attrs[key]
            if key == "value":
                return [Known.of(v)]
            dt = np.float32 if "float" in key else np.int64
            return [Known.of(np.asarray(v, dtype=dt))]
    raise node.fail(f"only tensor/float/int constants are supported, got attributes {sorted(node.attrs)}")


def _shape(imp: Importer, node: OnnxNode) -> list[Operand]:
    x = node.inputs[0]
    dims = x.type.shape if isinstance(x, Value) else x.shape
    dims = dims[slice(node.attr("start", 0), node.attr("end"))]
    return [Known.of(np.asarray(list(dims), dtype=object).reshape(len(dims)), INT64)]


def _size(imp: Importer, node: OnnxNode) -> list[Operand]:
    x = node.inputs[0]
    n = numel(x.type.shape) if isinstance(x, Value) else x.array.size
    return [Known.of(np.asarray(n, dtype=object), INT64)]


def _constant_of_shape(imp: Importer, node: OnnxNode) -> list[Operand]:
    shape = node.ints(0, "shape")
    fill = node.attr("value")
    fill = np.zeros(1, np.float32) if fill is None else np.asarray(fill).reshape(-1)
    if all(isinstance(d, int) for d in shape) and int(np.prod(shape, dtype=np.int64)) <= MAX_KNOWN_FILL:
        return [Known.of(np.full(shape, fill[0], dtype=fill.dtype))]
    dt = dtype_from_np(fill.dtype, f"{node.label} value")
    return [imp.full(fill[0].item(), dt, tuple(shape))]


def _range(imp: Importer, node: OnnxNode) -> list[Operand]:
    start, limit, delta = (node.scalar(i, what) for i, what in enumerate(("start", "limit", "delta")))
    k = node.known(0, "start")
    dt = dtype_from_np(k.dtype, f"{node.label} start")
    if not isinstance(delta, int) or delta == 0:
        raise node.fail(f"a dynamic Range needs a non-zero integer delta, got {delta}")
    span = limit - start if delta > 0 else start - limit
    n = floordiv(span + abs(delta) - 1, abs(delta))
    n = n if imp.ctx.bounds(n)[0] >= 0 else smax(n, 0)
    y = imp.b.op(Op.IOTA, shape=(n,), axis=0, dtype=dt)
    if delta != 1:
        y = imp.b.op(Op.MUL, y, imp.full(delta, dt))
    if start != 0:
        y = imp.b.op(Op.ADD, y, imp.full(start, dt))
    return [y]


# -- reshapes ----------------------------------------------------------------------------------------------


def reshape_target(imp: Importer, node: OnnxNode, src: Shape, spec: tuple[ShapeDim, ...], allowzero: bool) -> Shape:
    out: list[ShapeDim] = []
    for i, d in enumerate(spec):
        if isinstance(d, int) and d == 0 and not allowzero:
            if i >= len(src):
                raise ShapeError(f"{node.label}: target dim {i} is 0 (copy) but the input has rank {len(src)}")
            out.append(src[i])
        elif isinstance(d, int) and d < -1:
            raise ShapeError(f"{node.label}: invalid target dim {d}")
        else:
            out.append(d)
    holes = [i for i, d in enumerate(out) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ShapeError(f"{node.label}: more than one -1 in the target shape")
    if holes:
        out[holes[0]] = infer_dim(imp, node, src, [d for i, d in enumerate(out) if i != holes[0]])
    return tuple(out)


def _reshape(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    spec = node.ints(1, "shape") if node.opset >= 5 else tuple(node.attr("shape"))
    return [imp.b.reshape(x, reshape_target(imp, node, x.type.shape, spec, bool(node.attr("allowzero", 0))))]


def _flatten(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    rank = x.type.rank
    axis = node.attr("axis", 1)
    if not -rank <= axis <= rank:
        raise ShapeError(f"{node.label}: axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return [imp.b.reshape(x, (numel(x.type.shape[:axis]), numel(x.type.shape[axis:])))]


def _transpose(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    perm = node.attr("perm")
    perm = tuple(reversed(range(x.type.rank))) if perm is None else tuple(norm_axis(p, x.type.rank) for p in perm)
    return [imp.b.permute(x, perm)]


def _squeeze(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    axes = node.axes(1, since=13)
    shape = x.type.shape
    if axes is None:
        axes = tuple(i for i, d in enumerate(shape) if isinstance(d, int) and d == 1)
    axes = {norm_axis(a, x.type.rank) for a in axes}
    for a in axes:
        if not imp.ctx.known_equal(shape[a], 1):
            raise ShapeError(f"{node.label}: cannot squeeze axis {a} of size {shape[a]}")
    return [imp.b.reshape(x, tuple(d for i, d in enumerate(shape) if i not in axes))]


def _unsqueeze(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    axes = node.axes(1, since=13)
    if not axes:
        raise node.fail("Unsqueeze needs axes")
    rank = x.type.rank + len(axes)
    norm = sorted({norm_axis(a, rank) for a in axes})
    if len(norm) != len(axes):
        raise ShapeError(f"{node.label}: repeated axes {axes}")
    dims = iter(x.type.shape)
    return [imp.b.reshape(x, tuple(1 if i in norm else next(dims) for i in range(rank)))]


# -- joining and splitting ---------------------------------------------------------------------------------


def _concat(imp: Importer, node: OnnxNode) -> list[Operand]:
    xs = values(imp, node, *[i for i, x in enumerate(node.inputs) if x is not None])
    if len(xs) == 1:
        return [xs[0]]
    return [imp.b.op(Op.CONCAT, *xs, axis=norm_axis(node.attr("axis", 0), xs[0].type.rank))]


def slice_axis(imp: Importer, x: Value, axis: int, start: ShapeDim, stop: ShapeDim, step: int = 1) -> Value:
    shape = x.type.shape
    starts = tuple(start if i == axis else 0 for i in range(len(shape)))
    stops = tuple(stop if i == axis else d for i, d in enumerate(shape))
    steps = tuple(step if i == axis else 1 for i in range(len(shape)))
    return imp.b.op(Op.SLICE, x, starts=starts, stops=stops, steps=steps)


def _split(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    axis = norm_axis(node.attr("axis", 0), x.type.rank)
    d = x.type.shape[axis]
    sizes = node.ints(1, "split") if node.opset >= 13 else node.attr("split")
    n = len(node.outputs)
    if sizes is None:
        n = node.attr("num_outputs", n)
        if not isinstance(d, int):
            raise node.fail(f"an even Split of dynamic dim {d} is not supported; give split sizes")
        chunk = -(-d // n)
        sizes = [chunk] * (n - 1) + [d - chunk * (n - 1)]
        if sizes[-1] < 0:
            raise ShapeError(f"{node.label}: cannot split {d} into {n} parts")
    outs: list[Operand] = []
    offset: ShapeDim = 0
    for size in sizes:
        outs.append(slice_axis(imp, x, axis, offset, offset + size))
        offset = offset + size
    imp.ctx.require_equal(offset, d, f"{node.label}: split sizes don't add up to the dim")
    return outs


def _clamp_index(imp: Importer, node: OnnxNode, v: ShapeDim, d: ShapeDim) -> ShapeDim:
    """An ONNX slice bound (negative counts from the end, clamped to [0, d]) for positive steps."""
    lo, hi = imp.ctx.bounds(v)
    if lo >= 0:
        return sym_min(imp, v, d)
    if hi < 0:
        return sym_max(imp, d + v, 0)
    raise node.fail(f"slice bound {v} may be negative or not: its sign must be known")


def _slice(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    shape = x.type.shape
    if node.opset >= 10:
        starts, ends = node.ints(1, "starts"), node.ints(2, "ends")
        axes, steps = node.static_ints(3, "axes"), node.static_ints(4, "steps")
    else:
        starts, ends, axes, steps = tuple(node.attr("starts")), tuple(node.attr("ends")), node.attr("axes"), None
    axes = tuple(norm_axis(a, x.type.rank) for a in axes) if axes is not None else tuple(range(len(starts)))
    steps = tuple(steps) if steps is not None else (1,) * len(starts)
    lo: list[ShapeDim] = [0] * len(shape)
    hi: list[ShapeDim] = list(shape)
    st = [1] * len(shape)
    flips = []
    for a, s, e, k in zip(axes, starts, ends, steps):
        d = shape[a]
        if k == 0:
            raise ShapeError(f"{node.label}: slice step must not be 0")
        if k > 0:
            lo[a], hi[a], st[a] = _clamp_index(imp, node, s, d), _clamp_index(imp, node, e, d), k
            continue
        if all(isinstance(v, int) for v in (d, s, e)):
            r = range(d)[slice(s, e, k)]
            if len(r) == 0:
                lo[a], hi[a] = 0, 0
            else:
                lo[a], hi[a], st[a] = r[-1], r[0] + 1, -k
                flips.append(a)
        elif k == -1 and isinstance(s, int) and isinstance(e, int) and (s == -1 or s >= 2**31 - 1) and e <= -(2**31):
            flips.append(a)  # the whole axis reversed: x[::-1]
        else:
            raise node.fail("a negative slice step over a dynamic dim is supported only for reversing the whole axis")
    y = x
    if any(lo[i] != 0 or hi[i] != shape[i] or st[i] != 1 for i in range(len(shape))):
        y = imp.b.op(Op.SLICE, x, starts=tuple(lo), stops=tuple(hi), steps=tuple(st))
    if flips:
        y = imp.b.op(Op.FLIP, y, axes=tuple(sorted(flips)))
    return [y]


def _gather(imp: Importer, node: OnnxNode) -> list[Operand]:
    data, idx = node.inputs[0], node.inputs[1]
    x = imp.value(data, what=f"{node.label} data")
    axis = norm_axis(node.attr("axis", 0), x.type.rank)
    d = x.type.shape[axis]
    if isinstance(idx, Known) and not idx.symbolic and idx.array.ndim == 0:
        i = int(idx.array)
        start = i if i >= 0 else (i + d if isinstance(d, int) else d + i)
        if imp.ctx.bounds(start)[0] >= 0 and imp.ctx.bounds(d - start)[0] >= 1:
            # a constant scalar index is a slice (a view), not a gather
            s = slice_axis(imp, x, axis, start, start + 1)
            return [imp.b.reshape(s, x.type.shape[:axis] + x.type.shape[axis + 1 :])]
    index = imp.value(idx, DType.int64 if isinstance(idx, Known) else None, what=f"{node.label} indices")
    # ONNX Gather takes ids in [-n, n), a negative one counting from the end
    return [imp.b.op(Op.GATHER, x, index, axis=axis, negative_indices=True)]


# -- broadcasting --------------------------------------------------------------------------------------------


def _expand(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    spec = node.ints(1, "shape")
    from aotc.ir.shapes import broadcast_shapes

    out = broadcast_shapes(imp.ctx, x.type.shape, tuple(spec))
    return [x if out == x.type.shape else imp.b.op(Op.BROADCAST, x, shape=out)]


CONVERTERS: dict[str, Converter] = {
    "Constant": _constant,
    "Shape": _shape,
    "Size": _size,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Transpose": _transpose,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "Expand": _expand,
}
