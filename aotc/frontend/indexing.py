"""``tensor[...]``: ints (negative ok), slices with positive steps, None, ``...``, and one int index tensor."""

from __future__ import annotations

from typing import Any

import numpy as np

from aotc.frontend.context import Tracer, trace_error
from aotc.frontend.elementwise import as_tensor, wrap
from aotc.frontend.layout import reshape_to
from aotc.frontend.symint import as_dim
from aotc.frontend.tensor_base import TensorBase
from aotc.ir.ops import Op
from aotc.ir.symbolic import smax, smin, to_infix
from aotc.ir.types import ShapeDim

_NEW, _DROP = "new", "drop"


def getitem(x: TensorBase, idx: Any) -> TensorBase:
    items = idx if isinstance(idx, tuple) else (idx,)
    if any(isinstance(i, (TensorBase, np.ndarray, list)) for i in items):
        return _take(x, items)
    if sum(i is Ellipsis for i in items) > 1:
        raise trace_error("an index can only have a single ellipsis ('...')")
    src = x._v().type.shape
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > len(src):
        raise trace_error(f"too many indices for a tensor of rank {len(src)}: {used} given")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items = items[:at] + (slice(None),) * (len(src) - used) + items[at + 1 :]
    else:
        items = items + (slice(None),) * (len(src) - used)

    tr = x._t()
    starts, stops, steps = [], [], []
    plan: list[str | int] = []  # per output entry: _NEW, _DROP or the source axis kept
    ax = 0
    for it in items:
        if it is None:
            plan.append(_NEW)
            continue
        d = src[ax]
        if isinstance(it, slice):
            start, stop, step = _slice(tr, it, d)
            plan.append(ax)
        elif isinstance(it, bool) or as_dim(it) is None:
            raise trace_error(f"unsupported index {it!r} ({type(it).__name__}); use ints, slices, None or ...")
        else:
            start = _position(tr, as_dim(it), d, ax)
            stop, step = start + 1, 1
            plan.append(_DROP)
        starts.append(start)
        stops.append(stop)
        steps.append(step)
        ax += 1

    y = x
    if any(s != 0 for s in starts) or any(e != d for e, d in zip(stops, src)) or any(s != 1 for s in steps):
        y = wrap(tr.op(Op.SLICE, x._v(), starts=tuple(starts), stops=tuple(stops), steps=tuple(steps)), tr)
    sliced = y._v().type.shape
    return reshape_to(y, [1 if p == _NEW else sliced[p] for p in plan if p != _DROP])


def _position(tr: Tracer, i: ShapeDim, d: ShapeDim, ax: int) -> ShapeDim:
    """A Python index into a dim of size d as a position in [0, d)."""
    if isinstance(i, int) and isinstance(d, int):
        if not -d <= i < d:
            raise trace_error(f"index {i} is out of bounds for dim {ax} with size {d}")
        return i % d
    what = f"index {to_infix(i)} into dim {ax} of size {to_infix(d)}"
    if tr.decide(i, ">=", 0):
        tr.require(i, "<", d, what)
        return i
    pos = d + i
    tr.require(pos, ">=", 0, what)
    return pos


def _slice(tr: Tracer, s: slice, d: ShapeDim) -> tuple[ShapeDim, ShapeDim, int]:
    step = 1 if s.step is None else as_dim(s.step)
    if not isinstance(step, int) or step <= 0:
        raise trace_error(f"slice step must be a positive int, got {s.step!r} (use flip() to reverse)")
    start = 0 if s.start is None else _bound(tr, s.start, d, is_stop=False)
    stop = d if s.stop is None else _bound(tr, s.stop, d, is_stop=True)
    return start, stop, step


def _bound(tr: Tracer, value: Any, d: ShapeDim, is_stop: bool) -> ShapeDim:
    """Python's clamping of a slice bound into [0, d]."""
    v = as_dim(value)
    if v is None or isinstance(value, bool):
        raise trace_error(f"slice bounds must be ints or dims, got {value!r}")
    if isinstance(v, int) and isinstance(d, int):
        return max(v + d, 0) if v < 0 else min(v, d)
    if not tr.decide(v, ">=", 0):
        w = d + v
        if tr.ctx.proves(w, ">=", 0):
            return w
        # a start may stay a max() expression; a stop must be provably <= d, so decide by the hint
        if not is_stop:
            return smax(w, 0)
        return w if tr.decide(w, ">=", 0) else 0
    if tr.ctx.proves(v, "<=", d):
        return v
    if not is_stop:
        return smin(v, d)
    return v if tr.decide(v, "<=", d) else d


def _take(x: TensorBase, items: tuple[Any, ...]) -> TensorBase:
    """One int index tensor along one axis (others ``:`` / ``...``): numpy take semantics."""
    tensors = [k for k, i in enumerate(items) if isinstance(i, (TensorBase, np.ndarray, list))]
    if len(tensors) != 1 or any(
        not (i is Ellipsis or (isinstance(i, slice) and i == slice(None)))
        for k, i in enumerate(items)
        if k != tensors[0]
    ):
        raise trace_error(
            "advanced indexing supports one int index tensor with only ':' or '...' elsewhere; "
            "use index_select, where or masks"
        )
    tr = x._t()
    raw = items[tensors[0]]
    idx = as_tensor(np.asarray(raw) if isinstance(raw, list) else raw, tr)
    if not idx.dtype.is_int:
        raise trace_error(f"indexing with a {idx.dtype.value} tensor is not supported (only int index tensors)")
    k = tensors[0]
    if Ellipsis in items and items.index(Ellipsis) < k:
        ax = x.ndim - (len(items) - k)
    else:
        ax = k
    if not 0 <= ax < x.ndim:
        raise trace_error(f"index tensor position is out of range for a tensor of rank {x.ndim}")
    # x[ids] takes ids in [-n, n) as PyTorch's advanced indexing does (index_select and embedding do not)
    return wrap(tr.op(Op.GATHER, x._v(), idx._v(), axis=ax, negative_indices=True), tr)
