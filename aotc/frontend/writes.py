"""Indexed writes (``index_copy``, ``x[...] = value`` on a state): the SCATTER each one is, with PyTorch's rules for
where it lands (positions in ``[0, size)``, never counted from the end). Positions given by ints and slices are
proved inside the tensor at trace time (a guard where they are dynamic, a TraceError at the user's line where they
can't hold); positions given by a tensor are checked by every backend at the call. Below ``tensor``: the tensor's
``index_copy`` and the states of frontend/state.py both write through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aotc.frontend.context import Tracer, active_tracer, trace_error
from aotc.frontend.elementwise import as_tensor, value_of
from aotc.frontend.indexing import _position, _slice
from aotc.frontend.symint import as_dim
from aotc.frontend.tensor_base import TensorBase, _axis
from aotc.ir.dtypes import DType
from aotc.ir.gather_ids import NEGATIVE_INDICES
from aotc.ir.ops import Op
from aotc.ir.symbolic import to_infix
from aotc.ir.types import ShapeDim, Value

I64 = DType.int64


def index_copy(x: TensorBase, dim: int, index: Any, source: Any) -> TensorBase:
    """``torch.index_copy``: a copy of ``x`` whose rows ``index`` along ``dim`` are ``source``'s."""
    tr = x._t()
    items = (slice(None),) * _axis(dim, x.ndim) + (_index_tensor(index, tr, "index_copy"),)
    return tr.tensor(write(x, items, source, exact=True))


def write(x: TensorBase, idx: Any, value: Any, exact: bool) -> Value:
    """The SCATTER writing ``value`` at ``x[idx]`` (ints, slices with positive steps, ``...`` and at most one 1-D int
    tensor), PyTorch's setitem: ``value`` cast to ``x``'s dtype and broadcast to what the index selects. ``exact``:
    ``value`` must have the selection's shape (index_copy's source), not merely broadcast to it."""
    tr = x._t()
    shape = x._v().type.shape
    items = _expand(idx if isinstance(idx, tuple) else (idx,), len(shape))
    last = max((j for j, it in enumerate(items) if not _full(it)), default=0)
    counts: list[ShapeDim] = []
    coords: list[Value] = []
    kept: list[bool] = []  # per leading axis: whether the value has it (an int index drops it)
    plans = []
    for j, it in enumerate(items[: last + 1]):
        d = shape[j]
        if isinstance(it, TensorBase):
            plans.append(("tensor", it))
            counts.append(it._v().type.shape[0])
            kept.append(True)
        elif isinstance(it, slice):
            start, stop, step = _write_slice(tr, it, d, j)
            plans.append(("slice", (start, step)))
            counts.append((stop - start + step - 1) // step if step != 1 else stop - start)
            kept.append(True)
        else:
            plans.append(("int", _position(tr, as_dim(it), d, j)))
            counts.append(1)
            kept.append(False)
    lead = tuple(counts)
    for j, (kind, arg) in enumerate(plans):
        if kind == "tensor":
            ids = tr.cast(arg._v(), I64)
            view = [1] * len(lead)
            view[j] = lead[j]
            c = tr.op(Op.BROADCAST, tr.op(Op.RESHAPE, ids, shape=tuple(view)), shape=lead)
        elif kind == "slice":
            start, step = arg
            c = tr.op(Op.IOTA, shape=lead, axis=j, dtype=I64)
            if step != 1:
                c = tr.op(Op.MUL, c, tr.full(step, I64, lead))
            if start != 0:
                c = tr.op(Op.ADD, c, tr.full(start, I64, lead))
        else:
            c = tr.full(arg, I64, lead)
        coords.append(tr.op(Op.RESHAPE, c, shape=(*lead, 1)))
    index = coords[0] if len(coords) == 1 else tr.op(Op.CONCAT, *coords, axis=len(lead))
    tail = tuple(shape[last + 1 :])
    selected = (*lead, *tail)
    seen = tuple(n for n, k in zip(lead, kept) if k) + tail  # the shape torch shows the value
    upd = value_of(value, x.dtype, tr)
    if exact:
        t = upd.type.shape
        if len(t) != len(seen):
            raise trace_error(f"the written value has shape {_fmt(t)}, expected {_fmt(seen)}")
        for a, b in zip(t, seen):
            tr.require(a, "==", b, f"the written value {_fmt(t)} must have shape {_fmt(seen)}")
    elif upd.type.shape != seen:
        if len(upd.type.shape) > len(seen):
            raise trace_error(f"a value of shape {_fmt(upd.type.shape)} cannot be written into {_fmt(seen)}")
        upd = tr.op(Op.BROADCAST, upd, shape=seen)
    if seen != selected:
        upd = tr.op(Op.RESHAPE, upd, shape=selected)
    return tr.op(Op.SCATTER, x._v(), index, upd, **{NEGATIVE_INDICES: False})


def _write_slice(tr: Tracer, s: slice, d: ShapeDim, axis: int) -> tuple[ShapeDim, ShapeDim, int]:
    """A written slice's (start, stop, step). Static bounds follow Python (clamped into the dim, as PyTorch's setitem
    takes them); a dynamic bound is never clamped, since which way a clamp goes would depend on the trace's hints:
    it must lie inside the dim, proved or guarded at the user's line (a TraceError where it cannot hold)."""
    ints = [as_dim(b) for b in (s.start, s.stop)]
    if all(b is None or isinstance(b, int) for b in ints) and isinstance(d, int):
        start, stop, step = _slice(tr, s, d)
    else:
        step = 1 if s.step is None else as_dim(s.step)
        if not isinstance(step, int) or step <= 0:
            raise trace_error(f"slice step must be a positive int, got {s.step!r}")
        start = 0 if s.start is None else ints[0]
        stop = d if s.stop is None else ints[1]
        if start is None or stop is None:
            raise trace_error(f"slice bounds must be ints or dims, got {s!r}")
        what = f"slice [{to_infix(start)}:{to_infix(stop)}] written into dim {axis} of size {to_infix(d)}"
        tr.require(start, ">=", 0, what)
        tr.require(stop, "<=", d, what)
    tr.require(start, "<=", stop, f"slice [{to_infix(start)}:{to_infix(stop)}] written into dim {axis}")
    return start, stop, step


def _index_tensor(index: Any, tr: Tracer, what: str) -> TensorBase:
    idx = as_tensor(np.asarray(index) if isinstance(index, list) else index, tr)
    if idx.ndim != 1 or not idx.dtype.is_int:
        raise trace_error(f"{what} needs a 1-D int index, got {idx.dtype.value} of rank {idx.ndim}")
    return idx


def _expand(items: tuple[Any, ...], rank: int) -> tuple[Any, ...]:
    """The index with ``...`` spelled out as full slices, one item per axis; no ``None``, one tensor at most."""
    if any(it is None for it in items):
        raise trace_error("an index that is written into cannot hold None")
    if sum(it is Ellipsis for it in items) > 1:
        raise trace_error("an index can only have a single ellipsis ('...')")
    tensors = [it for it in items if isinstance(it, (TensorBase, np.ndarray, list))]
    if len(tensors) > 1:
        raise trace_error("a write takes one index tensor at most; write the others with slices or ints")
    used = sum(1 for it in items if it is not Ellipsis)
    if used > rank:
        raise trace_error(f"too many indices for a tensor of rank {rank}: {used} given")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items = items[:at] + (slice(None),) * (rank - used) + items[at + 1 :]
    items = items + (slice(None),) * (rank - len(items))
    tr = active_tracer("writing into a tensor")
    return tuple(
        _index_tensor(it, tr, "a write") if isinstance(it, (TensorBase, np.ndarray, list)) else it for it in items
    )


def _full(it: Any) -> bool:
    return isinstance(it, slice) and it == slice(None)


def _fmt(shape: Sequence[ShapeDim]) -> str:
    return "(" + ", ".join(to_infix(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
