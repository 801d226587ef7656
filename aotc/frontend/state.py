"""State that lives across calls (``Module.state``, a KV cache) and the indexed writes that update it in place.

Inside ``forward`` a state reads as a tensor whose value is the state's latest: every read sees the writes made
before it in the call. ``index_copy_`` and ``state[...] = value`` write it; each write is a SCATTER from the
state's latest value (aotc/ir/state.py: the chain every backend runs in place), with PyTorch's rules for where it
lands: positions in ``[0, size)``, never counted from the end. Positions given by ints and slices are proved inside
the state at trace time (a guard where they are dynamic, a TraceError at the user's line where they can't hold);
positions given by a tensor are checked by every backend at the call, an ExecError naming the write's line.

The same writes on an ordinary tensor (``index_copy``, not in place) return a new tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aotc.frontend.context import Tracer, active_tracer, as_supported_array, current_tracer, trace_error
from aotc.frontend.spec import Dim
from aotc.frontend.symint import Size
from aotc.frontend.tensor import Tensor
from aotc.frontend.tensor_base import _axis
from aotc.frontend.writes import _index_tensor, write
from aotc.ir.dtypes import DType, dtype_of
from aotc.ir.types import Value


class StateTensor(Tensor):
    """A module's state (``Module.state``): its shape, dtype and initial value outside a trace; inside one, a tensor
    over the state's latest value that ``index_copy_`` and item assignment update in place."""

    __slots__ = ("init", "spec", "state_dtype")

    def __init__(self, shape: Sequence[int | Dim], dtype: Any = "float32", init: Any = None) -> None:
        if isinstance(shape, (int, Dim)):
            shape = (shape,)
        spec = tuple(shape)
        for d in spec:
            if not isinstance(d, Dim) and (isinstance(d, bool) or not isinstance(d, int) or d < 0):
                raise trace_error(f"a state's shape holds ints >= 0 and Dims, got {d!r} in {spec}")
        self.spec = spec
        self.state_dtype = dtype_of(dtype)
        if init is None:
            arr = np.zeros((), self.state_dtype.np)
        else:
            arr = np.asarray(as_supported_array(np.asarray(init)), dtype=self.state_dtype.np)
            try:
                np.broadcast_shapes(arr.shape, tuple(1 if isinstance(d, Dim) else d for d in spec))
            except ValueError:
                raise trace_error(
                    f"a state's initial value of shape {arr.shape} does not broadcast to {spec}"
                ) from None
            for a, d in zip(reversed(arr.shape), reversed(spec)):
                if isinstance(d, Dim) and a != 1:
                    raise trace_error(f"a state's initial value must have size 1 along the dynamic dim {d.name}")
        self.init = arr

    def _t(self) -> Tracer:
        return active_tracer("using a state")

    def _v(self) -> Value:
        return self._t().state_value(self)

    @property
    def shape(self) -> Size:
        if current_tracer() is None:
            return Size(self.spec)
        return super().shape

    @property
    def dtype(self) -> DType:
        return self.state_dtype

    def index_copy_(self, dim: int, index: Any, source: Any) -> StateTensor:
        """``state.index_copy_(dim, index, source)``: rows ``index`` (a 1-D int tensor) along ``dim`` take
        ``source``'s, in place."""
        items = (slice(None),) * _axis(dim, self.ndim) + (_index_tensor(index, self._t(), "index_copy_"),)
        self._t().write_state(self, write(self, items, source, exact=True))
        return self

    def __setitem__(self, idx: Any, value: Any) -> None:
        self._t().write_state(self, write(self, idx, value, exact=False))

    def copy_(self, src: Any) -> StateTensor:
        """Overwrite the whole state with ``src`` (broadcast to its shape)."""
        self[...] = src
        return self

    def __repr__(self) -> str:
        return f"StateTensor(shape={self.spec}, dtype={self.state_dtype.value})"
