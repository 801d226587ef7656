"""ATen's indexed writes -> aotc's frontend: ``index_put`` (``x[mask] = v``, ``x[i] = v``, ``x[i] += v`` as
torch.export leaves them), ``scatter_reduce.two`` (``x.scatter_reduce(dim, index, src, reduce)``) and its two
special cases ``scatter.src`` (a plain write) and ``scatter_add``.

A bool mask selects a data-dependent number of elements, but when the value broadcasts over them (its shape
does not depend on the count) the write is a ``where`` over the mask: no shape depends on the data. Integer
indices and scatter_reduce become aotc's SCATTER primitive (aotc/ir/ops/scatter.py, ScatterND semantics), whose
reductions (add, mul, max, min) every backend runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aotc.frontend import elementwise as ew
from aotc.frontend import functions as T
from aotc.frontend import layout
from aotc.frontend.context import trace_error
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import DType
from aotc.ir.gather_ids import NEGATIVE_INDICES
from aotc.ir.ops import Op
from aotc.ir.shapes import broadcast_shapes
from aotc.ir.symbolic import to_infix
from aotc.ir.types import ShapeDim

Cx = Any
I64 = DType.int64
# scatter_reduce's reduce -> the SCATTER reduction it combines with ("mean" is a sum divided by a count)
_REDUCTION = {"sum": "add", "mean": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _fmt(shape: Sequence[ShapeDim]) -> str:
    return "(" + ", ".join(to_infix(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _shape(x: Tensor) -> tuple[ShapeDim, ...]:
    return tuple(x._v().type.shape)


def _scatter(cx: Cx, x: Tensor, coords: Tensor, upd: Tensor, reduction: str, negative: bool) -> Tensor:
    tr = cx.tracer
    attrs = {"reduction": reduction, NEGATIVE_INDICES: negative}
    return ew.wrap(tr.op(Op.SCATTER, x._v(), coords._v(), upd._v(), **attrs), tr)


def _coordinates(cx: Cx, columns: Sequence[Tensor]) -> Tensor:
    """Index tensors of one shape ``B`` stacked on a new last axis: the ``(*B, k)`` coordinates of a SCATTER."""
    tr = cx.tracer
    cols = [layout.reshape_to(c if c.dtype is I64 else c.long(), (*_shape(c), 1)) for c in columns]
    if len(cols) == 1:
        return cols[0]
    return ew.wrap(tr.op(Op.CONCAT, *[c._v() for c in cols], axis=len(_shape(columns[0]))), tr)


# -- index_put ------------------------------------------------------------------------------------------------


def index_put(cx: Cx, x: Tensor, indices: Sequence[Tensor | None], values: Any, accumulate: bool = False) -> Tensor:
    """``x[indices] = values`` (``+=`` with ``accumulate``), functional: torch's advanced indexing, where a None
    keeps a dim and the index tensors broadcast together."""
    items = list(indices)
    if len(items) > x.ndim:
        raise trace_error(f"index_put: {len(items)} indices for a tensor of rank {x.ndim}")
    picked = [i for i, t in enumerate(items) if t is not None]
    v = ew.as_tensor(values, cx.tracer, x.dtype)
    if not picked:
        return layout.expand(v, (list(x.shape),)) if not accumulate else x + v
    masks = [i for i in picked if items[i].dtype is DType.bool]
    if masks:
        if len(picked) != 1:
            raise trace_error(
                "index_put with a bool mask beside other index tensors pairs the mask's data-dependent positions "
                "with them; aotc takes one bool mask alone (None for the other dims)"
            )
        return _put_masked(cx, x, picked[0], items[picked[0]], v, accumulate)
    return _put_indexed(cx, x, items, picked, v, accumulate)


def _put_masked(cx: Cx, x: Tensor, first: int, mask: Tensor, v: Tensor, accumulate: bool) -> Tensor:
    """``x[:, ..., mask] = v`` as ``where(mask, v, x)``: the mask covers dims ``[first, first + m)`` and the
    selection torch shows the value is ``x.shape[:first] + (count,) + x.shape[first + m:]``; a value broadcasts
    to it without depending on the count when its dim at the count's place is 1 (or absent)."""
    m = mask.ndim
    xs = _shape(x)
    if first + m > len(xs):
        raise trace_error(f"index_put: a bool mask of rank {m} at dim {first} overruns a tensor of rank {len(xs)}")
    for k in range(m):
        cx.tracer.require(
            _shape(mask)[k],
            "==",
            xs[first + k],
            f"index_put's bool mask {_fmt(_shape(mask))} must match dim {first + k}",
        )
    rest = len(xs) - first - m
    rank = first + 1 + rest  # the selection's rank
    vs = _shape(v)
    if len(vs) > rank:
        raise trace_error(
            f"index_put: a value of shape {_fmt(vs)} cannot be written into a selection of rank {rank} "
            f"(the tensor's {_fmt(xs)} through a bool mask of rank {m})"
        )
    vs = (1,) * (rank - len(vs)) + vs
    if not (isinstance(vs[first], int) and vs[first] == 1):
        raise trace_error(
            f"index_put: the value's shape {_fmt(_shape(v))} has {to_infix(vs[first])} in the place of the bool mask's "
            "count of selected elements, so it depends on the mask's data; aotc writes through a mask a value that "
            "broadcasts over the selected elements (size 1 or absent there)"
        )
    v = layout.reshape_to(v, (*vs[:first], *(1,) * m, *vs[first + 1 :]))
    where = layout.reshape_to(mask, ((1,) * first + _shape(mask) + (1,) * rest))
    out = ew.where(where, x + v if accumulate else v, x)
    out = out if out.dtype is x.dtype else ew.cast(out, x.dtype)
    return layout.expand(out, (list(x.shape),))


def _put_indexed(
    cx: Cx, x: Tensor, items: list[Tensor | None], picked: list[int], v: Tensor, accumulate: bool
) -> Tensor:
    """Integer index tensors as one SCATTER over ``x`` with its indexed dims moved first. torch places the
    broadcast index shape ``B`` where the first indexed dim was when the indexed dims are adjacent, else first;
    the value, broadcast to that selection, is moved to ``(*B, rest)`` to match the scatter's updates."""
    tr = cx.tracer
    xs = _shape(x)
    for i in picked:
        if not items[i].dtype.is_int:
            raise trace_error(f"index_put: index {i} must be an int or bool tensor, got {items[i].dtype.value}")
    b = broadcast_shapes(tr.ctx, *[_shape(items[i]) for i in picked])
    nb = len(b)
    cols = [items[i] if _shape(items[i]) == tuple(b) else layout.expand(items[i], (list(b),)) for i in picked]
    rest = [d for d in range(len(xs)) if d not in picked]
    adjacent = picked == list(range(picked[0], picked[-1] + 1))
    lead = picked[0] if adjacent else 0  # where B sits in the selection torch shows the value
    before = [xs[d] for d in rest if d < lead] if adjacent else []
    after = [xs[d] for d in rest if d >= lead] if adjacent else [xs[d] for d in rest]
    seen = (*before, *b, *after)
    if len(_shape(v)) > len(seen):
        raise trace_error(f"index_put: a value of shape {_fmt(_shape(v))} cannot be written into {_fmt(seen)}")
    upd = v if _shape(v) == seen else layout.expand(v, (list(seen),))
    if before:
        nbf = len(before)
        upd = layout.permute(
            upd, (tuple(range(nbf, nbf + nb)) + tuple(range(nbf)) + tuple(range(nbf + nb, len(seen))),)
        )
    perm = picked + rest
    moved = x if perm == list(range(len(xs))) else layout.permute(x, (tuple(perm),))
    # torch counts a negative index from the end, as the SCATTER's default rule does
    out = _scatter(cx, moved, _coordinates(cx, cols), upd, "add" if accumulate else "none", True)
    if moved is x:
        return out
    return layout.permute(out, (tuple(int(k) for k in np.argsort(perm)),))


# -- scatter_reduce -------------------------------------------------------------------------------------------


def scatter_src(cx: Cx, x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """``x.scatter(dim, index, src)``: each ``src[p]`` written at ``p`` with its coordinate along ``dim`` replaced
    by ``index[p]`` (repeated positions keep one of their writes, which torch leaves undefined too)."""
    return _along(cx, x, dim, index, src, "scatter", lambda x, coords, upd: _scatter(cx, x, coords, upd, "none", False))


def scatter_add(cx: Cx, x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return scatter_reduce(cx, x, dim, index, src, "sum", True)


def scatter_reduce(
    cx: Cx, x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True
) -> Tensor:
    """``x.scatter_reduce(dim, index, src, reduce, include_self=...)`` as torch defines it: each ``src[p]`` (for
    ``p`` over the index's shape) combines into ``x`` at ``p`` with its coordinate along ``dim`` replaced by
    ``index[p]``. Without ``include_self`` the positions written start from the reduction's identity (torch's
    own rule), so ``x``'s value there is ignored; ``mean`` divides a sum by the count of what it summed (floored
    for ints), positions nothing was written to keeping ``x``."""
    if reduce not in _REDUCTION:
        raise trace_error(f"scatter_reduce: reduce must be one of {', '.join(_REDUCTION)}, got {reduce!r}")

    def combine(x: Tensor, coords: Tensor, upd: Tensor) -> Tensor:
        if not include_self:  # torch's rule: the written positions start from the identity
            start = T.full(tuple(upd.shape), _identity(reduce, x.dtype), dtype=x.dtype)
            x = _scatter(cx, x, coords, start, "none", False)
        out = _scatter(cx, x, coords, upd, _REDUCTION[reduce], False)
        if reduce != "mean":
            return out
        ones = T.full(tuple(upd.shape), 1, dtype=x.dtype)
        count = _scatter(cx, T.full(tuple(x.shape), int(include_self), dtype=x.dtype), coords, ones, "add", False)
        count = ew.where(count == 0, ew.as_tensor(1, cx.tracer, x.dtype), count)
        out = out / count if x.dtype.is_float else ew.floor_divide(out, count)
        return out if out.dtype is x.dtype else ew.cast(out, x.dtype)

    return _along(cx, x, dim, index, src, "scatter_reduce", combine)


def _along(cx: Cx, x: Tensor, dim: int, index: Tensor, src: Tensor, what: str, body: Any) -> Tensor:
    """``body(x, coords, updates)`` for a scatter along ``dim``: the SCATTER's full coordinates (``index`` on
    ``dim``, each other dim its own position) and the part of ``src`` (in ``x``'s dtype) the index covers."""
    if not index.dtype.is_int:
        raise trace_error(f"{what}: the index must be an int tensor, got {index.dtype.value}")
    if x.ndim == 0:  # torch treats a 0-d operand as 1-d of one element
        flat = [layout.reshape_to(t, (1,)) if t.ndim == 0 else t for t in (x, index, src)]
        return layout.reshape_to(_along(cx, flat[0], 0, flat[1], flat[2], what, body), ())
    ax = layout.axis(dim, x.ndim)
    if not index.ndim == src.ndim == x.ndim:
        raise trace_error(
            f"{what}: self, index and src need one rank, got {_fmt(_shape(x))}, {_fmt(_shape(index))} "
            f"and {_fmt(_shape(src))}"
        )
    tr, xs, ids = cx.tracer, _shape(x), _shape(index)
    for d, n in enumerate(ids):
        tr.require(
            n, "<=", _shape(src)[d], f"{what}'s index {_fmt(ids)} must not exceed src {_fmt(_shape(src))} in dim {d}"
        )
        if d != ax:
            tr.require(n, "<=", xs[d], f"{what}'s index {_fmt(ids)} must not exceed self {_fmt(xs)} in dim {d}")
    upd = src if src.dtype is x.dtype else ew.cast(src, x.dtype)
    if _shape(upd) != ids:  # only the part of src the index covers is written
        upd = upd[tuple(slice(0, n) for n in index.shape)]
    iota = [ew.wrap(tr.op(Op.IOTA, shape=ids, axis=d, dtype=I64), tr) for d in range(len(ids))]
    # torch refuses a negative scatter index, so the SCATTERs (negative_indices=False) do too
    return body(x, _coordinates(cx, [index if d == ax else iota[d] for d in range(len(ids))]), upd)


def _identity(reduce: str, dt: DType) -> Any:
    """The value a reduction starts from: what combines with any element to give that element."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dt is DType.bool:
        raise trace_error(f"scatter_reduce: reduce {reduce!r} on a bool tensor is not supported")
    if dt.is_float:
        return float("-inf") if reduce == "amax" else float("inf")
    info = np.iinfo(dt.np)
    return int(info.min) if reduce == "amax" else int(info.max)
