"""Layout ops with PyTorch semantics: reshape/view (-1), permute, squeeze, expand, cat, split, matmul, ..."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aotc.frontend.context import Tracer, trace_error
from aotc.frontend.elementwise import as_tensor, result_type, tracer_of, value_of, wrap
from aotc.frontend.symint import SymInt, as_dim
from aotc.frontend.tensor_base import TensorBase
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import fmt_shape, numel
from aotc.ir.symbolic import SymExpr, add, floordiv, mod, to_infix
from aotc.ir.types import Shape, ShapeDim, Value


def shape_arg(args: Sequence[Any], what: str) -> list[ShapeDim]:
    """Sizes given as varargs (``view(2, -1)``) or one sequence (``view((2, -1))``)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    out: list[ShapeDim] = []
    for a in args:
        d = as_dim(a)
        if d is None:
            raise trace_error(f"{what}: sizes must be ints or dims of other tensors, got {type(a).__name__}")
        out.append(d)
    return out


def axis(dim: Any, rank: int, what: str = "dim") -> int:
    if isinstance(dim, SymInt) or isinstance(dim, bool) or not isinstance(dim, int):
        raise trace_error(f"{what} must be an int, got {dim!r}")
    n = max(rank, 1)
    if not -n <= dim < n:
        raise trace_error(f"{what} {dim} is out of range for a tensor of rank {rank}")
    return dim % n


def axes(dims: Any, rank: int) -> tuple[int, ...]:
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    out = tuple(axis(d, rank) for d in dims)
    if len(set(out)) != len(out):
        raise trace_error(f"repeated dim in {tuple(dims)}")
    return out


def _shape(x: TensorBase) -> Shape:
    return x._v().type.shape


def _emit(x: TensorBase, op: Op, **attrs: Any) -> TensorBase:
    tr = x._t()
    return wrap(tr.op(op, x._v(), **attrs), tr)


def reshape_to(x: TensorBase, shape: Sequence[ShapeDim]) -> TensorBase:
    shape = tuple(shape)
    return x if shape == _shape(x) else _emit(x, Op.RESHAPE, shape=shape)


def reshape(x: TensorBase, args: Sequence[Any]) -> TensorBase:
    shape = shape_arg(args, "reshape")
    src = _shape(x)
    holes = [i for i, d in enumerate(shape) if d == -1]
    if len(holes) > 1 or any(isinstance(d, int) and d < -1 for d in shape):
        raise trace_error(f"reshape: invalid shape {tuple(shape)} (one -1 at most, other sizes >= 0)")
    if holes:
        total = numel(src)
        known = numel(tuple(d for i, d in enumerate(shape) if i != holes[0]))
        q = x._t().ctx.exact_div(total, known) if known != 0 else None
        if q is None:
            if known == 0:
                raise trace_error(
                    f"reshape {fmt_shape(src)} to {fmt_shape(shape)}: -1 next to a size-0 dim is ambiguous"
                )
            if not isinstance(known, int):
                raise trace_error(_inexact(x, src, shape, total, known))
            if isinstance(total, int):
                raise trace_error(f"reshape: shape {tuple(shape)} is invalid for input of size {total}")
            # exact only for some sizes: guard the divisibility the hint shows
            x._t().require(mod(total, known), "==", 0, f"reshape {fmt_shape(src)} to {tuple(shape)}")
            q = floordiv(total, known)
        shape[holes[0]] = q
    return reshape_to(x, shape)


def _inexact(x: TensorBase, src: Shape, shape: Sequence[ShapeDim], total: ShapeDim, known: ShapeDim) -> str:
    ctx = x._t().ctx
    names = sorted(known.free_symbols() | (total.free_symbols() if isinstance(total, SymExpr) else set()))
    dims = ", ".join(
        f"{n} in [{ctx.ranges[n][0]}, {ctx.ranges[n][1]}]"
        + (f" multiple_of {ctx.multiples[n]}" if ctx.multiples.get(n, 1) > 1 else "")
        for n in names
        if n in ctx.ranges
    )
    return (
        f"reshape {fmt_shape(src)} to {fmt_shape(shape)}: cannot infer the -1 size: {to_infix(total)} elements "
        f"divided by {to_infix(known)} is not a whole number for every value of {dims or ', '.join(names)}; "
        "declare the multiple_of that makes it exact on the Dim, or give the size explicitly"
    )


def permute(x: TensorBase, dims: Sequence[Any]) -> TensorBase:
    perm = axes(dims, x.ndim)
    if len(perm) != x.ndim:
        raise trace_error(f"permute: {tuple(perm)} does not name each of the {x.ndim} dims once")
    return x if perm == tuple(range(x.ndim)) else _emit(x, Op.PERMUTE, perm=perm)


def transpose(x: TensorBase, dim0: int, dim1: int) -> TensorBase:
    if x.ndim == 0:
        return x
    a, b = axis(dim0, x.ndim), axis(dim1, x.ndim)
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, (perm,))


def unsqueeze(x: TensorBase, dim: int) -> TensorBase:
    d = axis(dim, x.ndim + 1)
    s = list(_shape(x))
    s.insert(d, 1)
    return reshape_to(x, s)


def squeeze(x: TensorBase, dim: Any = None) -> TensorBase:
    src = _shape(x)
    if dim is None:
        picked = range(len(src))
    else:
        picked = axes(dim if isinstance(dim, (tuple, list)) else (dim,), len(src)) if src else ()
    tr = x._t()
    drop = {i for i in picked if tr.decide(src[i], "==", 1)}
    return reshape_to(x, [d for i, d in enumerate(src) if i not in drop])


def expand(x: TensorBase, args: Sequence[Any]) -> TensorBase:
    sizes = shape_arg(args, "expand")
    src = _shape(x)
    if len(sizes) < len(src):
        raise trace_error(f"expand: {len(sizes)} sizes for a tensor of rank {len(src)}")
    lead = len(sizes) - len(src)
    out: list[ShapeDim] = []
    for i, d in enumerate(sizes):
        if d == -1:
            if i < lead:
                raise trace_error("expand: -1 is not allowed for a new leading dim")
            d = src[i - lead]
        out.append(d)
    return x if tuple(out) == src else _emit(x, Op.BROADCAST, shape=tuple(out))


def flatten(x: TensorBase, start_dim: int = 0, end_dim: int = -1) -> TensorBase:
    src = _shape(x)
    if not src:
        return reshape_to(x, (1,))
    a, b = axis(start_dim, len(src), "start_dim"), axis(end_dim, len(src), "end_dim")
    if a > b:
        raise trace_error(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return reshape_to(x, [*src[:a], numel(src[a : b + 1]), *src[b + 1 :]])


def repeat(x: TensorBase, args: Sequence[Any]) -> TensorBase:
    reps = shape_arg(args, "repeat")
    if len(reps) < x.ndim:
        raise trace_error(f"repeat: {len(reps)} repeats for a tensor of rank {x.ndim}")
    src = (1,) * (len(reps) - x.ndim) + _shape(x)
    inter: list[ShapeDim] = []
    target: list[ShapeDim] = []
    for r, d in zip(reps, src):
        inter += [1, d]
        target += [r, d]
    y = expand(reshape_to(x, inter), (target,))
    return reshape_to(y, [r * d for r, d in zip(reps, src)])


def slice_axis(x: TensorBase, ax: int, start: ShapeDim, stop: ShapeDim, step: int = 1) -> TensorBase:
    src = _shape(x)
    starts = tuple(start if i == ax else 0 for i in range(len(src)))
    stops = tuple(stop if i == ax else d for i, d in enumerate(src))
    steps = tuple(step if i == ax else 1 for i in range(len(src)))
    if starts == (0,) * len(src) and stops == src and steps == (1,) * len(src):
        return x
    return _emit(x, Op.SLICE, starts=starts, stops=stops, steps=steps)


def split(x: TensorBase, size_or_sections: Any, dim: int = 0) -> tuple[TensorBase, ...]:
    ax = axis(dim, x.ndim)
    n = _shape(x)[ax]
    tr = x._t()
    if isinstance(size_or_sections, (list, tuple)):
        sizes = shape_arg((size_or_sections,), "split")
        total: ShapeDim = 0
        for s in sizes:
            total = total + s
        tr.require(total, "==", n, f"split sizes {tuple(size_or_sections)} must add up to dim {ax}")
    else:
        size = as_dim(size_or_sections)
        pieces = (
            tr.ctx.exact_div(n, size) if isinstance(size, SymExpr) and tr.ctx.proves_nonneg(add(size, -1)) else None
        )
        if isinstance(pieces, int) and pieces > 0:  # a dynamic size that divides the dim: chunk(k) of k*seq
            sizes = [size] * pieces
        elif not isinstance(size, int) or size <= 0:
            raise trace_error(f"split size must be a positive int or a dim that divides {n}, got {size_or_sections!r}")
        elif not isinstance(n, int):
            raise trace_error(
                f"split({size}) of the dynamic dim {n} gives a number of pieces that depends on it; "
                "pass a list of sizes or use chunk()"
            )
        else:
            sizes = [min(size, n - i) for i in range(0, n, size)] or [0]
    out, start = [], 0
    for s in sizes:
        out.append(slice_axis(x, ax, start, start + s))
        start = start + s
    return tuple(out)


def chunk(x: TensorBase, chunks: int, dim: int = 0) -> tuple[TensorBase, ...]:
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks <= 0:
        raise trace_error(f"chunk needs a positive int count, got {chunks!r}")
    ax = axis(dim, x.ndim)
    n = _shape(x)[ax]
    if isinstance(n, int):
        return split(x, max(-(-n // chunks), 1), ax)
    x._t().require(mod(n, chunks), "==", 0, f"chunk({chunks}) of the dynamic dim {n} needs equal pieces")
    q = floordiv(n, chunks)
    return split(x, [q if isinstance(q, int) else SymInt(q, x._t().ctx)] * chunks, ax)


def unbind(x: TensorBase, dim: int = 0) -> tuple[TensorBase, ...]:
    ax = axis(dim, x.ndim)
    n = _shape(x)[ax]
    if not isinstance(n, int):
        raise trace_error(f"unbinding (or iterating over) the dynamic dim {n} would specialize it")
    rest = [d for i, d in enumerate(_shape(x)) if i != ax]
    return tuple(reshape_to(slice_axis(x, ax, i, i + 1), rest) for i in range(n))


def flip(x: TensorBase, dims: Sequence[Any]) -> TensorBase:
    ax = tuple(sorted(axes(dims, x.ndim)))
    return _emit(x, Op.FLIP, axes=ax) if ax else x


def tri(x: TensorBase, diagonal: int, lower: bool) -> TensorBase:
    if isinstance(diagonal, bool) or not isinstance(diagonal, int):
        raise trace_error(f"tril/triu diagonal must be an int, got {diagonal!r}")
    if x.ndim < 2:
        raise trace_error(f"tril/triu needs a tensor of rank >= 2, got rank {x.ndim}")
    return _emit(x, Op.TRIL if lower else Op.TRIU, k=diagonal)


def index_select(x: TensorBase, dim: int, index: Any) -> TensorBase:
    idx = as_tensor(index, x._t())
    if idx.ndim != 1 or not idx.dtype.is_int:
        raise trace_error(f"index_select needs a 1-D int index, got {idx.dtype.value} of rank {idx.ndim}")
    tr = x._t()
    return wrap(tr.op(Op.GATHER, x._v(), idx._v(), axis=axis(dim, x.ndim)), tr)


def masked_fill(x: TensorBase, mask: Any, value: Any) -> TensorBase:
    tr = x._t()
    m = as_tensor(mask, tr)
    if m.dtype is not DType.bool:
        raise trace_error(f"masked_fill needs a bool mask, got {m.dtype.value}")
    if isinstance(value, TensorBase) and value.ndim:
        raise trace_error("masked_fill's value must be a number or a 0-d tensor")
    return wrap(tr.op(Op.WHERE, m._v(), value_of(value, x.dtype, tr), x._v()), tr)


# -- several tensors ------------------------------------------------------------------------------


def cat(tensors: Sequence[Any], dim: int = 0) -> TensorBase:
    if isinstance(tensors, TensorBase) or not isinstance(tensors, (list, tuple)) or not tensors:
        raise trace_error("cat needs a non-empty list or tuple of tensors")
    tr = tracer_of(*tensors)
    ts = [as_tensor(t, tr) for t in tensors]
    dt = result_type(*ts)
    ax = axis(dim, ts[0].ndim)
    if len(ts) == 1:
        return ts[0] if ts[0].dtype is dt else wrap(tr.cast(ts[0]._v(), dt), tr)
    return wrap(tr.op(Op.CONCAT, *[value_of(t, dt, tr) for t in ts], axis=ax), tr)


def stack(tensors: Sequence[Any], dim: int = 0) -> TensorBase:
    if isinstance(tensors, TensorBase) or not isinstance(tensors, (list, tuple)) or not tensors:
        raise trace_error("stack needs a non-empty list or tuple of tensors")
    tr = tracer_of(*tensors)
    ts = [as_tensor(t, tr) for t in tensors]
    ax = axis(dim, ts[0].ndim + 1)
    return cat([unsqueeze(t, ax) for t in ts], ax)


def matmul(a: Any, b: Any) -> TensorBase:
    """torch.matmul: 1-D operands are promoted to matrices and the added dim removed again."""
    tr = tracer_of(a, b)
    x, y = as_tensor(a, tr), as_tensor(b, tr)
    if x.ndim == 0 or y.ndim == 0:
        raise trace_error("matmul needs tensors of rank >= 1; use * for scalars")
    dt = result_type(x, y)
    xv, yv = value_of(x, dt, tr), value_of(y, dt, tr)
    xv2 = _reshape_value(tr, xv, (1, *xv.type.shape)) if x.ndim == 1 else xv
    yv2 = _reshape_value(tr, yv, (*yv.type.shape, 1)) if y.ndim == 1 else yv
    out = tr.op(Op.MATMUL, xv2, yv2)
    shape = list(out.type.shape)
    if y.ndim == 1:
        shape.pop(-1)
    if x.ndim == 1:
        shape.pop(-1 if y.ndim == 1 else -2)
    return reshape_to(wrap(out, tr), shape)


def _reshape_value(tr: Tracer, v: Value, shape: Sequence[ShapeDim]) -> Value:
    return tr.op(Op.RESHAPE, v, shape=tuple(shape))
