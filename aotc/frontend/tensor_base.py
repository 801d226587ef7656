"""The data side of a traced tensor (``TensorBase``), below the op modules: they take and make tensors of it, and
``tensor.Tensor`` (PyTorch's tensor API) derives from it, so no op module imports the class whose methods call it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from aotc.frontend.context import trace_error
from aotc.frontend.symint import Size, SymInt
from aotc.ir.dtypes import DType
from aotc.ir.symbolic import SymExpr

if TYPE_CHECKING:
    from aotc.frontend.context import Tracer
    from aotc.ir.types import Value


class TensorBase:
    """A traced tensor's data: a graph value plus the trace it belongs to, its metadata, and the refusals of
    everything that needs values. The op modules (elementwise, layout, indexing, reductions, functions) take and
    make tensors through this class and ``Tracer.tensor``; ``tensor.Tensor`` adds PyTorch's methods over them."""

    __slots__ = ("_tracer", "_value")
    # numpy defers to our reflected operators (array + tensor -> Tensor.__radd__)
    __array_ufunc__ = None

    def __init__(self, value: Value, tracer: Tracer) -> None:
        self._value = value
        self._tracer = tracer

    def _v(self) -> Value:
        return self._value

    def _t(self) -> Tracer:
        return self._tracer

    # -- metadata ----------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        ctx = self._t().ctx
        return Size(SymInt(d, ctx) if isinstance(d, SymExpr) else d for d in self._v().type.shape)

    def size(self, dim: int | None = None) -> Any:
        s = self.shape
        return s if dim is None else s[_axis(dim, len(s))]

    @property
    def dtype(self) -> DType:
        return self._v().type.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int | SymInt:
        return self.shape.numel()

    def is_floating_point(self) -> bool:
        return self.dtype.is_float

    @property
    def device(self) -> str:
        return "cpu"  # placement is the runtime's business; traced code sees one device

    def __len__(self) -> int:
        if not self.ndim:
            raise trace_error("len() of a 0-d tensor")
        n = self.shape[0]
        return n if isinstance(n, int) else n.__index__()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.unbind(0))  # type: ignore[attr-defined]  # Tensor's

    def __repr__(self) -> str:
        return f"Tensor({self._v()}: {self._v().type})"  # users only ever see Tensor

    __hash__ = object.__hash__

    # -- values are unknown while tracing ------------------------------------------------------------
    def _value_needed(self, what: str) -> NoReturn:
        raise trace_error(
            f"{what} needs the tensor's values, which don't exist while tracing: control flow depends on "
            "tensor values; use aotc.where / masks instead"
        )

    def __bool__(self) -> bool:
        self._value_needed("bool(tensor) (an if/while on a tensor)")

    def item(self) -> Any:
        self._value_needed("tensor.item()")

    def tolist(self) -> Any:
        self._value_needed("tensor.tolist()")

    def numpy(self) -> Any:
        self._value_needed("tensor.numpy()")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        self._value_needed("converting a tensor to a numpy array")

    def __int__(self) -> int:
        self._value_needed("int(tensor)")

    def __float__(self) -> float:
        self._value_needed("float(tensor)")

    def __index__(self) -> int:
        self._value_needed("using a tensor as a Python index")


def _axis(dim: Any, rank: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise trace_error(f"dim must be an int, got {dim!r}")
    n = max(rank, 1)
    if not -n <= dim < n:
        raise trace_error(f"dim {dim} is out of range for a tensor of rank {rank}")
    return dim % n
