"""ATen views, layout and indexing -> aotc's frontend: view/reshape, permute, expand, cat, split, slice, select,
advanced indexing (``aten.index``), gather, roll, pad and the functional scatters ``slice_scatter`` and
``select_scatter`` that torch.export makes of in-place writes to fresh tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aotc.frontend import elementwise as ew
from aotc.frontend import functional as F
from aotc.frontend import functions as T
from aotc.frontend import layout
from aotc.frontend.context import trace_error
from aotc.frontend.symint import SymInt, as_dim
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import numel
from aotc.ir.symbolic import SymExpr

Cx = Any
I64 = DType.int64
# torch writes "to the end" as the largest int64
_END = 2**62


def view(cx: Cx, x: Tensor, size: Sequence[Any]) -> Tensor:
    return layout.reshape(x, (list(size),))


def permute(cx: Cx, x: Tensor, dims: Sequence[int]) -> Tensor:
    return layout.permute(x, (tuple(dims),))


def transpose(cx: Cx, x: Tensor, dim0: int, dim1: int) -> Tensor:
    return layout.transpose(x, dim0, dim1)


def t(cx: Cx, x: Tensor) -> Tensor:
    return x if x.ndim < 2 else layout.transpose(x, 0, 1)


def unsqueeze(cx: Cx, x: Tensor, dim: int) -> Tensor:
    return layout.unsqueeze(x, dim)


def squeeze(cx: Cx, x: Tensor, dim: Any = None) -> Tensor:
    return layout.squeeze(x, dim)


def expand(cx: Cx, x: Tensor, size: Sequence[Any], implicit: bool = False) -> Tensor:
    return layout.expand(x, (list(size),))


def expand_as(cx: Cx, x: Tensor, other: Tensor) -> Tensor:
    return layout.expand(x, (list(other.shape),))


def flatten(cx: Cx, x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    return layout.flatten(x, start_dim, end_dim)


def unflatten(cx: Cx, x: Tensor, dim: int, sizes: Sequence[Any]) -> Tensor:
    ax = layout.axis(dim, x.ndim)
    shape = list(x.shape)
    return layout.reshape(x, ([*shape[:ax], *sizes, *shape[ax + 1 :]],))


def cat(cx: Cx, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    # torch skips 1-D empty tensors in cat (a legacy rule); they carry no elements
    kept = [x for x in tensors if not (x.ndim == 1 and isinstance(x.shape[0], int) and x.shape[0] == 0)]
    return layout.cat(kept or list(tensors), dim)


def stack(cx: Cx, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    return layout.stack(list(tensors), dim)


def split(cx: Cx, x: Tensor, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
    return layout.split(x, split_size, dim)


def split_with_sizes(cx: Cx, x: Tensor, sizes: Sequence[Any], dim: int = 0) -> tuple[Tensor, ...]:
    return layout.split(x, list(sizes), dim)


def chunk(cx: Cx, x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    return layout.chunk(x, chunks, dim)


def unbind(cx: Cx, x: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    return layout.unbind(x, dim)


def _at(x: Tensor, ax: int, item: Any) -> Tensor:
    return x[(slice(None),) * ax + (item,)]


def _bound(v: Any) -> Any:
    d = as_dim(v)
    if isinstance(d, int) and d >= _END:
        return None
    return v


def slice_(cx: Cx, x: Tensor, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1) -> Tensor:
    ax = layout.axis(dim, x.ndim)
    return _at(x, ax, slice(_bound(start), _bound(end), step))


def select(cx: Cx, x: Tensor, dim: int, index: Any) -> Tensor:
    return _at(x, layout.axis(dim, x.ndim), index)


def narrow(cx: Cx, x: Tensor, dim: int, start: Any, length: Any) -> Tensor:
    return _at(x, layout.axis(dim, x.ndim), slice(start, start + length))


def flip(cx: Cx, x: Tensor, dims: Sequence[int]) -> Tensor:
    return layout.flip(x, (tuple(dims),))


def repeat(cx: Cx, x: Tensor, repeats: Sequence[Any]) -> Tensor:
    return layout.repeat(x, (list(repeats),))


def repeat_interleave(cx: Cx, x: Tensor, repeats: Any, dim: int | None = None, output_size: Any = None) -> Tensor:
    """``repeat_interleave.self_int``: each slice along ``dim`` (of the flattened tensor when None) ``repeats`` times
    in a row."""
    if isinstance(repeats, int) and repeats < 0:
        raise trace_error(f"repeat_interleave: repeats must be non-negative, got {repeats}")
    t = layout.flatten(x) if dim is None else x
    ax = layout.axis(0 if dim is None else dim, t.ndim)
    src, r = list(t._v().type.shape), as_dim(repeats)
    y = layout.expand(layout.unsqueeze(t, ax + 1), (src[: ax + 1] + [r] + src[ax + 1 :],))
    return layout.reshape_to(y, src[:ax] + [src[ax] * r] + src[ax + 1 :])


def diff(cx: Cx, x: Tensor, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
    """``torch.diff``: ``n`` times the difference of neighbours along ``dim`` (``!=`` for bools), after ``prepend``
    and ``append`` are joined on."""
    ax = layout.axis(dim, x.ndim)
    parts = [p for p in (prepend, x, append) if p is not None]
    y = layout.cat(parts, ax) if len(parts) > 1 else x
    for _ in range(n):
        size = y.shape[ax]
        hi, lo = _at(y, ax, slice(1, None)), _at(y, ax, slice(None, size - 1))
        y = T.ne(hi, lo) if y.dtype is DType.bool else hi - lo
    return y


def tril(cx: Cx, x: Tensor, diagonal: int = 0) -> Tensor:
    return layout.tri(x, diagonal, True)


def triu(cx: Cx, x: Tensor, diagonal: int = 0) -> Tensor:
    return layout.tri(x, diagonal, False)


def roll(cx: Cx, x: Tensor, shifts: Sequence[Any], dims: Sequence[int] = ()) -> Tensor:
    """Each shift as two slices joined in the other order (a dynamic dim's shift is taken modulo its size)."""
    if not dims:
        flat = layout.flatten(x)
        return layout.reshape(roll(cx, flat, shifts, [0]), (list(x.shape),))
    if len(shifts) != len(dims):
        raise trace_error("roll needs one shift per dim")
    y = x
    for s, d in zip(shifts, dims):
        ax = layout.axis(d, x.ndim)
        n = y.shape[ax]
        if isinstance(s, int) and not isinstance(n, int):
            if s == 0:
                continue
            # a shift by less than the dim's size (guarded where the range allows more), forward or back
            cx.tracer.require(as_dim(n), ">=", abs(s), "roll by more than the dim's size")
            k = s if s > 0 else n + s
        else:
            k = s % n
        if isinstance(k, int) and k == 0:
            continue
        y = layout.cat([_at(y, ax, slice(n - k, None)), _at(y, ax, slice(None, n - k))], ax)
    return y


def constant_pad_nd(cx: Cx, x: Tensor, pad: Sequence[Any], value: Any = 0) -> Tensor:
    """F.pad; negative amounts crop, as in torch."""
    amounts = list(pad)
    crops: list[tuple[int, Any, Any]] = []
    grow: list[Any] = []
    for i in range(len(amounts) // 2):
        ax = x.ndim - 1 - i
        lo, hi = amounts[2 * i], amounts[2 * i + 1]
        cut_lo = isinstance(lo, int) and lo < 0
        cut_hi = isinstance(hi, int) and hi < 0
        if cut_lo or cut_hi:
            crops.append((ax, -lo if cut_lo else 0, -hi if cut_hi else 0))
        grow += [0 if cut_lo else lo, 0 if cut_hi else hi]
    for ax, lo, hi in crops:
        x = _at(x, ax, slice(lo, x.shape[ax] - hi))
    if all(isinstance(a, int) and a == 0 for a in grow):
        return x
    return F.pad(x, grow, value=float(value) if x.dtype.is_float else value)


def pad(cx: Cx, x: Tensor, pad: Sequence[Any], mode: str = "constant", value: Any = None) -> Tensor:
    if mode != "constant":
        raise trace_error(f"pad mode {mode!r} is not supported (only 'constant')")
    return constant_pad_nd(cx, x, pad, 0 if value is None else value)


# -- indexing ---------------------------------------------------------------------------------------------


def _wrapped(idx: Tensor, n: Any) -> Tensor:
    """Negative indices count from the end, as in torch."""
    idx = idx.long() if idx.dtype is not I64 else idx
    return ew.where(idx < 0, idx + n, idx)


def index(cx: Cx, x: Tensor, indices: Sequence[Tensor | None]) -> Tensor:
    """``x[i0, i1, ...]`` with int index tensors (None keeps a dim): one gather over the indexed dims flattened."""
    items = list(indices)
    picked = [i for i, t in enumerate(items) if t is not None]
    if not picked:
        return x
    if any(items[i].dtype is DType.bool for i in picked):
        raise trace_error("indexing with a bool mask gives a data-dependent shape; use torch.where instead")
    adjacent = picked == list(range(picked[0], picked[-1] + 1))
    if not adjacent:  # torch puts the broadcast index dims first
        rest = [i for i in range(x.ndim) if i not in picked]
        x = layout.permute(x, (picked + rest,))
        items = [items[i] for i in picked] + [None] * len(rest)
        picked = list(range(len(picked)))
    first, last = picked[0], picked[-1] + 1
    shape = list(x.shape)
    dims = shape[first:last]
    linear: Any = None
    for k, i in enumerate(range(first, last)):
        stride = numel(tuple(as_dim(d) for d in dims[k + 1 :]))
        term = _wrapped(items[i], dims[k])
        if not (isinstance(stride, int) and stride == 1):
            term = term * (SymInt(stride, cx.tracer.ctx) if isinstance(stride, SymExpr) else stride)
        linear = term if linear is None else linear + term
    flat = layout.reshape(x, ([*shape[:first], numel(tuple(as_dim(d) for d in dims)), *shape[last:]],))
    tr = cx.tracer
    return ew.wrap(tr.op(Op.GATHER, flat._v(), linear._v(), axis=first), tr)


def index_select(cx: Cx, x: Tensor, dim: int, idx: Tensor) -> Tensor:
    return layout.index_select(x, dim, idx)


def gather(cx: Cx, x: Tensor, dim: int, idx: Tensor, sparse_grad: bool = False) -> Tensor:
    """torch.gather: out[i][j][k] = x[i][idx[i][j][k]][k] for dim 1, as one flat gather."""
    ax = layout.axis(dim, x.ndim)
    if idx.ndim != x.ndim:
        raise trace_error(f"gather needs an index of the input's rank {x.ndim}, got {idx.ndim}")
    shape = [as_dim(d) for d in x.shape]
    out = list(idx.shape)
    linear: Any = None
    for d in range(x.ndim):
        coord = _wrapped(idx, x.shape[d]) if d == ax else _iota(cx, out, d)
        stride = numel(tuple(shape[d + 1 :]))
        if not (isinstance(stride, int) and stride == 1):
            coord = coord * (SymInt(stride, cx.tracer.ctx) if isinstance(stride, SymExpr) else stride)
        linear = coord if linear is None else linear + coord
    flat = layout.flatten(x)
    tr = cx.tracer
    return ew.wrap(tr.op(Op.GATHER, flat._v(), linear._v(), axis=0), tr)


def _iota(cx: Cx, shape: Sequence[Any], axis: int) -> Tensor:
    tr = cx.tracer
    return ew.wrap(tr.op(Op.IOTA, shape=tuple(as_dim(d) for d in shape), axis=axis, dtype=I64), tr)


def scatter_value(cx: Cx, x: Tensor, dim: int, idx: Tensor, value: Any) -> Tensor:
    """``x.scatter(dim, idx, value)`` where the index spans ``x`` in every other dim (an MoE router marking its
    chosen groups): a position along ``dim`` takes ``value`` where any of the index's entries names it. Repeated
    indices write the same value, so their order does not matter."""
    ax = layout.axis(dim, x.ndim)
    if idx.ndim != x.ndim:
        raise trace_error(f"scatter needs an index of the input's rank {x.ndim}, got rank {idx.ndim}")
    for d in range(x.ndim):
        if d != ax:
            cx.tracer.require(
                idx._v().type.shape[d], "==", x._v().type.shape[d], f"scatter's index must span the input in dim {d}"
            )
    here = layout.unsqueeze(_wrapped(idx, x.shape[ax]), ax + 1)  # (..., k, 1, ...) against (..., 1, n, ...)
    shape = [1] * (x.ndim + 1)
    shape[ax + 1] = x.shape[ax]
    hit = T.any(here == _iota(cx, shape, ax + 1), ax)
    y = T.where(hit, value, x)
    return y if y.dtype is x.dtype else ew.cast(y, x.dtype)


def slice_scatter(cx: Cx, x: Tensor, src: Tensor, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1):
    """``x`` with ``x[start:end:step]`` along ``dim`` replaced by ``src``: a mask over positions selects src, which
    is placed by padding (step 1) or by a gather of its rows (any step)."""
    ax = layout.axis(dim, x.ndim)
    n = x.shape[ax]
    lo = 0 if _bound(start) is None else start
    hi = n if _bound(end) is None else end
    lo = lo + n if isinstance(lo, int) and lo < 0 else lo
    hi = hi + n if isinstance(hi, int) and hi < 0 else hi
    src = ew.cast(src, x.dtype) if src.dtype is not x.dtype else src
    if step == 1:
        if isinstance(lo, int) and lo == 0 and (hi is n or (isinstance(hi, int) and hi == n)):
            return layout.expand(src, (list(x.shape),))
        parts = [_at(x, ax, slice(None, lo)), src, _at(x, ax, slice(hi, None))]
        return layout.cat(parts, ax)
    pos = T.arange(n)
    inside = (pos >= lo) & (pos < hi) & ((pos - lo) % step == 0)
    row = ew.clamp((pos - lo) // step, 0, src.shape[ax] - 1)
    picked = layout.index_select(src, ax, row)
    mask = layout.reshape(inside, ([n if i == ax else 1 for i in range(x.ndim)],))
    return ew.where(mask, picked, x)


def select_scatter(cx: Cx, x: Tensor, src: Tensor, dim: int, index: Any) -> Tensor:
    ax = layout.axis(dim, x.ndim)
    i = index + x.shape[ax] if isinstance(index, int) and index < 0 else index
    return slice_scatter(cx, x, layout.unsqueeze(src, ax), ax, i, i + 1, 1)


def fill_scalar(cx: Cx, x: Tensor, value: Any) -> Tensor:
    return T.full(tuple(x.shape), value, dtype=x.dtype)


def copy(cx: Cx, x: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    """Functional copy: ``src`` broadcast to ``x``'s shape, in ``x``'s dtype."""
    s = ew.as_tensor(src, cx.tracer, x.dtype)
    return layout.expand(s, (list(x.shape),))
