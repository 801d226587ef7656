"""The tracing ``Tensor``: PyTorch's tensor API, recording graph nodes instead of computing.

The methods are thin: elementwise math lives in ``elementwise``, layout in ``layout``,
indexing in ``indexing`` and reductions in ``reductions``.
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from aotc.frontend import elementwise as ew
from aotc.frontend import functions, indexing, layout, reductions, writes
from aotc.frontend.context import trace_error
from aotc.frontend.tensor_base import TensorBase, _axis
from aotc.frontend.tensor_methods import table_methods
from aotc.ir.ops import Op


class Tensor(TensorBase):
    """A traced tensor: PyTorch's tensor API over a graph value, recording nodes instead of computing."""

    __slots__ = ()

    # -- arithmetic -----------------------------------------------------------------------------------
    def __add__(self, o: Any) -> Tensor:
        return ew.binary(Op.ADD, self, o)

    def __radd__(self, o: Any) -> Tensor:
        return ew.binary(Op.ADD, o, self)

    def __sub__(self, o: Any) -> Tensor:
        return ew.binary(Op.SUB, self, o)

    def __rsub__(self, o: Any) -> Tensor:
        return ew.binary(Op.SUB, o, self)

    def __mul__(self, o: Any) -> Tensor:
        return ew.binary(Op.MUL, self, o)

    def __rmul__(self, o: Any) -> Tensor:
        return ew.binary(Op.MUL, o, self)

    def __truediv__(self, o: Any) -> Tensor:
        return ew.binary(Op.DIV, self, o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return ew.binary(Op.DIV, o, self)

    def __floordiv__(self, o: Any) -> Tensor:
        return ew.floor_divide(self, o)

    def __rfloordiv__(self, o: Any) -> Tensor:
        return ew.floor_divide(o, self)

    def __mod__(self, o: Any) -> Tensor:
        return ew.binary(Op.MOD, self, o)

    def __rmod__(self, o: Any) -> Tensor:
        return ew.binary(Op.MOD, o, self)

    def __pow__(self, o: Any) -> Tensor:
        return ew.pow_(self, o)

    def __rpow__(self, o: Any) -> Tensor:
        return ew.pow_(o, self)

    def __matmul__(self, o: Any) -> Tensor:
        return layout.matmul(self, o)

    def __rmatmul__(self, o: Any) -> Tensor:
        return layout.matmul(o, self)

    def __neg__(self) -> Tensor:
        return ew.unary(Op.NEG, self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return ew.unary(Op.ABS, self)

    def __invert__(self) -> Tensor:
        return ew.unary(Op.NOT, self)

    def __and__(self, o: Any) -> Tensor:
        return ew.binary(Op.AND, self, o)

    __rand__ = __and__

    def __or__(self, o: Any) -> Tensor:
        return ew.binary(Op.OR, self, o)

    __ror__ = __or__

    def __xor__(self, o: Any) -> Tensor:
        return ew.binary(Op.XOR, self, o)

    __rxor__ = __xor__

    def _compare(self, op: Op, o: Any) -> Any:
        if not (isinstance(o, Tensor) or ew.is_scalar(o) or isinstance(o, np.ndarray)):
            return NotImplemented
        return ew.binary(op, self, o)

    def __eq__(self, o: object) -> Any:  # type: ignore[override]
        return self._compare(Op.EQ, o)

    def __ne__(self, o: object) -> Any:  # type: ignore[override]
        return self._compare(Op.NE, o)

    def __lt__(self, o: Any) -> Any:
        return self._compare(Op.LT, o)

    def __le__(self, o: Any) -> Any:
        return self._compare(Op.LE, o)

    def __gt__(self, o: Any) -> Any:
        return self._compare(Op.GT, o)

    def __ge__(self, o: Any) -> Any:
        return self._compare(Op.GE, o)

    # named forms of the operators
    def add(self, o: Any, alpha: Any = 1) -> Tensor:
        return self + (o if alpha == 1 else o * alpha)

    def sub(self, o: Any, alpha: Any = 1) -> Tensor:
        return self - (o if alpha == 1 else o * alpha)

    def mul(self, o: Any) -> Tensor:
        return self * o

    def div(self, o: Any, rounding_mode: str | None = None) -> Tensor:
        if rounding_mode is None:
            return self / o
        if rounding_mode == "floor":
            return self // o
        if rounding_mode == "trunc":
            q = self / o
            return q.trunc().to(ew.result_type(self, o))
        raise trace_error(f"div rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")

    def trunc(self) -> Tensor:
        return ew.where(self < 0, self.ceil(), self.floor()) if self.dtype.is_float else self

    def floor_divide(self, o: Any) -> Tensor:
        return self // o

    def remainder(self, o: Any) -> Tensor:
        return self % o

    def pow(self, o: Any) -> Tensor:
        return ew.pow_(self, o)

    def matmul(self, o: Any) -> Tensor:
        return layout.matmul(self, o)

    def logical_and(self, o: Any) -> Tensor:
        return ew.binary(Op.AND, self.bool(), ew.as_tensor(o, self._t()).bool())

    def logical_or(self, o: Any) -> Tensor:
        return ew.binary(Op.OR, self.bool(), ew.as_tensor(o, self._t()).bool())

    def logical_not(self) -> Tensor:
        return ew.unary(Op.NOT, self.bool())

    def bitwise_and(self, o: Any) -> Tensor:
        return ew.binary(Op.AND, self, o)

    def bitwise_or(self, o: Any) -> Tensor:
        return ew.binary(Op.OR, self, o)

    def bitwise_xor(self, o: Any) -> Tensor:
        return ew.binary(Op.XOR, self, o)

    def bitwise_not(self) -> Tensor:
        return ew.unary(Op.NOT, self)

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:
        return ew.clamp(self, min, max)

    clip = clamp

    def masked_fill(self, mask: Any, value: Any) -> Tensor:
        return layout.masked_fill(self, mask, value)

    def where(self, condition: Any, other: Any) -> Tensor:
        return ew.where(condition, self, other)

    # -- unary math: exp, log, sqrt, ... (and eq/ne/..., maximum/minimum, float/half/int/long/bool)
    # are generated from the tables in tensor_methods.py
    def square(self) -> Tensor:
        return self * self

    def isnan(self) -> Tensor:
        return ew.unary(Op.ISNAN, self)

    def isinf(self) -> Tensor:
        return ew.unary(Op.ISINF, self)

    def softmax(self, dim: int, dtype: Any = None) -> Tensor:
        x = self if dtype is None else self.to(dtype)
        return ew.unary(Op.SOFTMAX, x, axis=_axis(dim, x.ndim))

    def log_softmax(self, dim: int, dtype: Any = None) -> Tensor:
        x = self if dtype is None else self.to(dtype)
        return ew.unary(Op.LOG_SOFTMAX, x, axis=_axis(dim, x.ndim))

    # -- dtype conversion -------------------------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """``to(dtype)``, ``to(other_tensor)``; device arguments are accepted and ignored."""
        dtype = kwargs.pop("dtype", None)
        kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        kwargs.pop("copy", None)
        if kwargs:
            raise trace_error(f"Tensor.to got unexpected arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, str) and (a in ("cpu", "cuda") or a.startswith("cuda:")):
                continue
            elif a is not None:
                dtype = a
        return self if dtype is None else ew.cast(self, dtype)

    def type_as(self, other: Tensor) -> Tensor:
        return ew.cast(self, other.dtype)

    def new_full(self, size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
        return functions.full(size, fill_value, dtype=dtype or self.dtype)

    def new_zeros(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return functions.zeros(*size, dtype=dtype or self.dtype)

    def new_ones(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return functions.ones(*size, dtype=dtype or self.dtype)

    def double(self) -> Tensor:
        raise trace_error("float64 is not supported by aotc; use .float()")

    # -- layout ------------------------------------------------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        return layout.reshape(self, shape)

    view = reshape

    def view_as(self, other: Tensor) -> Tensor:
        return layout.reshape(self, (other.shape,))

    reshape_as = view_as

    def permute(self, *dims: Any) -> Tensor:
        return layout.permute(self, dims)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return layout.transpose(self, dim0, dim1)

    swapaxes = transpose

    @property
    def T(self) -> Tensor:
        return layout.permute(self, (tuple(range(self.ndim - 1, -1, -1)),))

    @property
    def mT(self) -> Tensor:
        if self.ndim < 2:
            raise trace_error(f"tensor.mT needs at least 2 dims, got {self.ndim}")
        return layout.transpose(self, -2, -1)

    def unsqueeze(self, dim: int) -> Tensor:
        return layout.unsqueeze(self, dim)

    def squeeze(self, dim: Any = None) -> Tensor:
        return layout.squeeze(self, dim)

    def expand(self, *sizes: Any) -> Tensor:
        return layout.expand(self, sizes)

    def expand_as(self, other: Tensor) -> Tensor:
        return layout.expand(self, (other.shape,))

    def broadcast_to(self, shape: Any) -> Tensor:
        return layout.expand(self, (shape,))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        return layout.flatten(self, start_dim, end_dim)

    def repeat(self, *sizes: Any) -> Tensor:
        return layout.repeat(self, sizes)

    def contiguous(self, *args: Any, **kwargs: Any) -> Tensor:
        return self  # traced values have no strides

    def clone(self, *args: Any, **kwargs: Any) -> Tensor:
        return self

    def detach(self) -> Tensor:
        return self

    def split(self, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
        return layout.split(self, split_size_or_sections, dim)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        return layout.chunk(self, chunks, dim)

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        return layout.unbind(self, dim)

    def flip(self, *dims: Any) -> Tensor:
        return layout.flip(self, dims)

    def tril(self, diagonal: int = 0) -> Tensor:
        return layout.tri(self, diagonal, lower=True)

    def triu(self, diagonal: int = 0) -> Tensor:
        return layout.tri(self, diagonal, lower=False)

    def index_select(self, dim: int, index: Any) -> Tensor:
        return layout.index_select(self, dim, index)

    def __getitem__(self, idx: Any) -> Tensor:
        return indexing.getitem(self, idx)

    def __setitem__(self, idx: Any, value: Any) -> NoReturn:
        raise trace_error(
            "in-place assignment (tensor[...] = ...) is only for a module's state (self.state(...)); "
            "build the value with aotc.where, cat or index_copy"
        )

    def index_copy(self, dim: int, index: Any, source: Any) -> Tensor:
        return writes.index_copy(self, dim, index, source)  # type: ignore[return-value]

    def index_copy_(self, dim: int, index: Any, source: Any) -> NoReturn:
        raise trace_error(
            "in-place index_copy_ is only for a module's state (self.state(...)); use index_copy, which returns "
            "the new tensor"
        )

    # -- reductions ---------------------------------------------------------------------------------
    def sum(self, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        return reductions.sum_(self, dim, keepdim, dtype)

    def mean(self, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        return reductions.mean(self, dim, keepdim, dtype)

    def prod(self, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        return reductions.prod(self, dim, keepdim, dtype)

    def amax(self, dim: Any = (), keepdim: bool = False) -> Tensor:
        return reductions.extreme(self, Op.REDUCE_MAX, dim, keepdim)

    def amin(self, dim: Any = (), keepdim: bool = False) -> Tensor:
        return reductions.extreme(self, Op.REDUCE_MIN, dim, keepdim)

    def max(self, dim: Any = None, keepdim: bool = False) -> Any:
        return reductions.max_min(self, dim, keepdim, largest=True)

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        return reductions.max_min(self, dim, keepdim, largest=False)

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        return reductions.arg(self, Op.ARGMAX, dim, keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        return reductions.arg(self, Op.ARGMIN, dim, keepdim)

    def var(
        self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *, correction: Any = None
    ) -> Tensor:
        return reductions.var(self, dim, unbiased, keepdim, correction)

    def std(
        self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *, correction: Any = None
    ) -> Tensor:
        return reductions.var(self, dim, unbiased, keepdim, correction).sqrt()

    def all(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return reductions.all_any(self, dim, keepdim, every=True)

    def any(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return reductions.all_any(self, dim, keepdim, every=False)

    def logsumexp(self, dim: Any, keepdim: bool = False) -> Tensor:
        return reductions.logsumexp(self, dim, keepdim)


for _name, _method in table_methods().items():  # exp, eq, float, ...: one line of a table each
    setattr(Tensor, _name, _method)
