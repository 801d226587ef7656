"""ATen elementwise math, comparisons, reductions and tensor creation -> aotc's frontend (PyTorch semantics).

Each translation takes the importer's context and the op's schema arguments in order, defaults filled in;
tensors arrive as aotc ``Tensor``s, sizes as ints or ``SymInt``s, dtypes as aotc dtypes.
"""

from __future__ import annotations

from typing import Any

from aotc.frontend import elementwise as ew
from aotc.frontend import functional as F
from aotc.frontend import functions as T
from aotc.frontend import reductions as red
from aotc.frontend.context import trace_error
from aotc.frontend.symint import SymInt, as_dim
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op

Cx = Any


def _scaled(other: Any, alpha: Any) -> Any:
    return other if alpha == 1 else other * alpha


def add(cx: Cx, a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ew.binary(Op.ADD, a, _scaled(b, alpha))


def sub(cx: Cx, a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ew.binary(Op.SUB, a, _scaled(b, alpha))


def rsub(cx: Cx, a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ew.binary(Op.SUB, b, _scaled(a, alpha))


def binary(op: Op) -> Any:
    def fn(cx: Cx, a: Any, b: Any) -> Tensor:
        return ew.binary(op, a, b)

    return fn


def div(cx: Cx, a: Any, b: Any, rounding_mode: str | None = None) -> Tensor:
    return ew.as_tensor(a, ew.tracer_of(a, b)).div(b, rounding_mode=rounding_mode)


def floor_divide(cx: Cx, a: Any, b: Any) -> Tensor:
    return ew.floor_divide(a, b)


def pow_(cx: Cx, a: Any, b: Any) -> Tensor:
    return ew.pow_(a, b)


def unary(op: Op) -> Any:
    def fn(cx: Cx, x: Any) -> Tensor:
        return ew.unary(op, x)

    return fn


def log1p(cx: Cx, x: Tensor) -> Tensor:
    return (x + 1).log()


def expm1(cx: Cx, x: Tensor) -> Tensor:
    return x.exp() - 1


def gelu(cx: Cx, x: Tensor, approximate: str = "none") -> Tensor:
    return F.gelu(x, approximate=approximate)


def silu(cx: Cx, x: Tensor) -> Tensor:
    return F.silu(x)


def hardtanh(cx: Cx, x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return ew.clamp(x, min_val, max_val)


def hardsigmoid(cx: Cx, x: Tensor) -> Tensor:
    return ew.clamp(x + 3.0, 0.0, 6.0) / 6.0


def hardswish(cx: Cx, x: Tensor) -> Tensor:
    return x * (ew.clamp(x + 3.0, 0.0, 6.0) / 6.0)


def leaky_relu(cx: Cx, x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return F.leaky_relu(x, negative_slope)


def elu(cx: Cx, x: Tensor, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Tensor:
    if scale != 1.0 or input_scale != 1.0:
        raise trace_error("elu with scale or input_scale other than 1 is not supported")
    return F.elu(x, alpha)


def softplus(cx: Cx, x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return F.softplus(x, beta, threshold)


def clamp(cx: Cx, x: Tensor, lo: Any = None, hi: Any = None) -> Tensor:
    return ew.clamp(x, lo, hi)


def clamp_min(cx: Cx, x: Tensor, lo: Any) -> Tensor:
    return ew.clamp(x, lo, None)


def clamp_max(cx: Cx, x: Tensor, hi: Any) -> Tensor:
    return ew.clamp(x, None, hi)


def where(cx: Cx, cond: Tensor, a: Any, b: Any) -> Tensor:
    return ew.where(cond, a, b)


def masked_fill(cx: Cx, x: Tensor, mask: Tensor, value: Any) -> Tensor:
    return x.masked_fill(mask, value)


def logical(op: Op) -> Any:
    def fn(cx: Cx, a: Any, b: Any) -> Tensor:
        return ew.binary(op, ew.as_tensor(a, ew.tracer_of(a, b)).bool(), ew.as_tensor(b, ew.tracer_of(a, b)).bool())

    return fn


def bitwise(op: Op) -> Any:
    """bitwise_and/or/xor (Tensor and Scalar overloads, and the operators): torch's promotion, floats refused."""

    def fn(cx: Cx, a: Any, b: Any) -> Tensor:
        return ew.binary(op, a, b)

    return fn


def logical_not(cx: Cx, x: Tensor) -> Tensor:
    return ew.unary(Op.NOT, x.bool())


# Unsigned torch dtypes, carried in a wider signed aotc dtype (_torch._DTYPES), by their all-ones value.
_UNSIGNED_ONES = {"uint8": 0xFF}


def bitwise_not(cx: Cx, x: Tensor) -> Tensor:
    ones = _UNSIGNED_ONES.get(cx.out_torch_dtype() or "")
    if ones is not None:
        # ~x of a uint8 is 255 - x; in the int32 that carries it, ~x would be negative.
        return ew.binary(Op.XOR, x, ones)
    return ew.unary(Op.NOT, x)


# -- dtype conversions and copies --------------------------------------------------------------------------


def identity(cx: Cx, x: Any, *rest: Any) -> Any:
    return x


def to_copy(cx: Cx, x: Tensor, dtype: DType | None = None, *rest: Any) -> Tensor:
    return x if dtype is None else ew.cast(x, dtype)


def to_dtype(cx: Cx, x: Tensor, dtype: DType | None, *rest: Any) -> Tensor:
    return x if dtype is None else ew.cast(x, dtype)


def to_other(cx: Cx, x: Tensor, other: Tensor, *rest: Any) -> Tensor:
    return ew.cast(x, other.dtype)


def to_device(cx: Cx, x: Tensor, device: Any, dtype: DType | None, *rest: Any) -> Tensor:
    return x if dtype is None else ew.cast(x, dtype)


def type_as(cx: Cx, x: Tensor, other: Tensor) -> Tensor:
    return ew.cast(x, other.dtype)


def dropout(cx: Cx, x: Tensor, p: float = 0.5, train: bool | None = False) -> Tensor:
    if train:
        raise trace_error("dropout in training mode: call model.eval() before compiling")
    return x


def native_dropout(cx: Cx, x: Tensor, p: float, train: bool | None) -> tuple[Tensor, None]:
    return dropout(cx, x, p, train), None


# -- reductions --------------------------------------------------------------------------------------------


def _dims(dim: Any) -> Any:
    return None if dim is None or (isinstance(dim, (list, tuple)) and not dim) else dim


def sum_(cx: Cx, x: Tensor, dim: Any = None, keepdim: bool = False, dtype: DType | None = None) -> Tensor:
    return T.sum(x, _dims(dim), keepdim, dtype=dtype)


def sum_all(cx: Cx, x: Tensor, dtype: DType | None = None) -> Tensor:
    return T.sum(x, None, False, dtype=dtype)


def mean(cx: Cx, x: Tensor, dim: Any = None, keepdim: bool = False, dtype: DType | None = None) -> Tensor:
    return T.mean(x, _dims(dim), keepdim, dtype=dtype)


def mean_all(cx: Cx, x: Tensor, dtype: DType | None = None) -> Tensor:
    return T.mean(x, None, False, dtype=dtype)


def prod(cx: Cx, x: Tensor, dim: Any = None, keepdim: bool = False, dtype: DType | None = None) -> Tensor:
    return T.prod(x, dim, keepdim, dtype=dtype)


def amax(cx: Cx, x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return T.amax(x, dim, keepdim)


def amin(cx: Cx, x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return T.amin(x, dim, keepdim)


def max_dim(cx: Cx, x: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return tuple(T.max(x, dim, keepdim))  # type: ignore[return-value]


def min_dim(cx: Cx, x: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return tuple(T.min(x, dim, keepdim))  # type: ignore[return-value]


def max_all(cx: Cx, x: Tensor) -> Tensor:
    return T.amax(x, tuple(range(x.ndim)), False)


def min_all(cx: Cx, x: Tensor) -> Tensor:
    return T.amin(x, tuple(range(x.ndim)), False)


def argmax(cx: Cx, x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return T.argmax(x, dim, keepdim)


def argmin(cx: Cx, x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return T.argmin(x, dim, keepdim)


def topk(cx: Cx, x: Tensor, k: Any, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple:
    """The ``k`` largest (smallest) along ``dim``, in order, as ``k`` rounds of a max and the first index that
    holds it among those not yet taken (ties go to the lower index; a value taken once is never taken again, even
    where the rest tie with it at -inf). An MoE router's top-k over its experts is a few rounds over a short dim."""
    ax = dim % x.ndim if x.ndim else 0
    if isinstance(k, SymInt) and cx.tracer.ctx.proves(as_dim(k), "==", x._v().type.shape[ax]):
        return _sort_all(x, ax, largest)  # DeepSeek-V3.2's indexer: k = min(2048, seq) is all of seq <= 2048
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise trace_error(f"topk needs a static k >= 0 (or k equal to the dim's size), got k={k!r}")
    n = x.shape[ax]
    if isinstance(n, int) and k > n:
        raise trace_error(f"topk k={k} is larger than dim {dim}'s size {n}")
    if k == 0 or x.ndim == 0:
        raise trace_error(f"topk with k={k} over a {x.ndim}-D input is not supported (k >= 1 over a dim)")
    if not isinstance(n, int):
        cx.tracer.require(x._v().type.shape[ax], ">=", k, f"topk k={k} needs dim {dim} to hold at least {k}")
    work = x if largest else -x
    low = float("-inf") if x.dtype.is_float else -(2 ** (8 * x.dtype.np.itemsize - 1))
    shape = [1] * x.ndim
    shape[ax] = -1
    iota = T.arange(n).reshape(shape)
    taken = T.zeros_like(work).to(DType.bool)
    values, indices = [], []
    for _ in range(k):
        rest = T.where(taken, low, work)
        best = T.amax(rest, ax, True)
        first = T.amin(T.where((rest == best) & ~taken, iota, 2**62), ax, True)  # 2**62: past any index
        values.append(best if largest else -best)
        indices.append(first)
        taken = taken | (iota == first)
    return T.cat(values, ax), T.cat(indices, ax)


def _sort_all(x: Tensor, ax: int, largest: bool) -> tuple[Tensor, Tensor]:
    """All of dim ``ax`` in order, over a dynamic size: element i goes to place rank_i, the count of elements
    before it in order (larger, or equal at a lower index), then each place takes the one element ranked there.
    n x n comparisons per row: what a full sort over a dim of any size costs without a sort primitive."""
    xt = x.transpose(ax, -1) if ax != x.ndim - 1 else x
    n = xt.shape[-1]
    a, b = xt.unsqueeze(-1), xt.unsqueeze(-2)  # (..., i, 1) against (..., 1, j)
    iota = T.arange(n)
    first = (b > a) if largest else (b < a)
    rank = (first | ((b == a) & (iota.reshape(1, -1) < iota.reshape(-1, 1)))).to(DType.int64).sum(-1)  # (..., i)
    here = rank.unsqueeze(-1) == iota  # (..., i, place)
    low = float("-inf") if x.dtype.is_float else -(2 ** (8 * x.dtype.np.itemsize - 1))
    values = T.amax(T.where(here, a, low), -2)
    indices = T.amax(T.where(here, iota.reshape(-1, 1), -1), -2)
    if ax != x.ndim - 1:
        values, indices = values.transpose(ax, -1), indices.transpose(ax, -1)
    return values, indices


def bucketize(cx: Cx, x: Tensor, boundaries: Tensor, out_int32: bool = False, right: bool = False) -> Tensor:
    """The bucket of each element among sorted 1-D ``boundaries``: how many lie below it (``right``: at or below
    it), as torch.bucketize and searchsorted define it. Idefics3's vision tower buckets patch coordinates so."""
    if boundaries.ndim != 1:
        raise trace_error(f"bucketize needs 1-D boundaries, got rank {boundaries.ndim}")
    below = (x.unsqueeze(-1) >= boundaries) if right else (x.unsqueeze(-1) > boundaries)
    return below.to(DType.int32 if out_int32 else DType.int64).sum(-1)


def var(cx: Cx, x: Tensor, dim: Any = None, correction: Any = None, keepdim: bool = False) -> Tensor:
    return T.var(x, _dims(dim), correction=1 if correction is None else correction, keepdim=keepdim)


def std(cx: Cx, x: Tensor, dim: Any = None, correction: Any = None, keepdim: bool = False) -> Tensor:
    return T.std(x, _dims(dim), correction=1 if correction is None else correction, keepdim=keepdim)


def any_(cx: Cx, x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return T.any(x, _dims(dim), keepdim)


def all_(cx: Cx, x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return T.all(x, _dims(dim), keepdim)


def logsumexp(cx: Cx, x: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    return T.logsumexp(x, dim, keepdim)


def vector_norm(cx: Cx, x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    return red.vector_norm(x, ord, _dims(dim), keepdim, dtype)


def norm(cx: Cx, x: Tensor, p: Any = 2, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    """``aten.norm`` (``torch.norm`` with a number p): p None is the 2-norm."""
    return red.vector_norm(x, 2 if p is None else p, _dims(dim), keepdim, dtype)


def matrix_norm(cx: Cx, x: Tensor, ord: Any = "fro", dim: Any = (-2, -1), keepdim: bool = False,
                dtype: Any = None) -> Tensor:  # fmt: skip
    return red.matrix_norm(x, ord, dim, keepdim, dtype)


def softmax(cx: Cx, x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    return x.softmax(dim, dtype=dtype if isinstance(dtype, DType) else None)


def softmax_internal(cx: Cx, x: Tensor, dim: int, half_to_float: bool) -> Tensor:
    return x.softmax(dim)


def log_softmax(cx: Cx, x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    return x.log_softmax(dim, dtype=dtype if isinstance(dtype, DType) else None)


def log_softmax_internal(cx: Cx, x: Tensor, dim: int, half_to_float: bool) -> Tensor:
    return x.log_softmax(dim)


def cumsum(cx: Cx, x: Tensor, dim: int, dtype: DType | None = None) -> Tensor:
    """A running sum as a matmul with a triangular matrix of ones (as the ONNX importer does CumSum)."""
    from aotc.frontend.layout import axis as norm

    ax = norm(dim, x.ndim)
    out_dtype = dtype or (DType.int64 if not x.dtype.is_float else x.dtype)
    work = x.float() if not x.dtype.is_float else x
    n = x.shape[ax]
    i = T.arange(n).unsqueeze(1)
    j = T.arange(n).unsqueeze(0)
    tri = (i <= j).to(work.dtype)
    moved = work.transpose(ax, -1) if ax != x.ndim - 1 else work
    y = T.matmul(moved, tri)
    y = y.transpose(ax, -1) if ax != x.ndim - 1 else y
    return y if y.dtype is out_dtype else (y.round() if out_dtype.is_int else y).to(out_dtype)


# -- creation ----------------------------------------------------------------------------------------------


def _fill_dtype(value: Any, dtype: DType | None) -> DType:
    if dtype is not None:
        return dtype
    return DType.bool if isinstance(value, bool) else DType.float32 if isinstance(value, float) else DType.int64


def full(cx: Cx, size: Any, fill_value: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    return T.full(tuple(size), fill_value, dtype=_fill_dtype(fill_value, dtype))


def zeros(cx: Cx, size: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    return T.full(tuple(size), 0, dtype=dtype or DType.float32)


def ones(cx: Cx, size: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    return T.full(tuple(size), 1, dtype=dtype or DType.float32)


def new_full(cx: Cx, x: Tensor, size: Any, fill_value: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    return T.full(tuple(size), fill_value, dtype=dtype or x.dtype)


def new_value(value: int) -> Any:
    def fn(cx: Cx, x: Tensor, size: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
        return T.full(tuple(size), value, dtype=dtype or x.dtype)

    return fn


def full_like(cx: Cx, x: Tensor, fill_value: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    return T.full(tuple(x.shape), fill_value, dtype=dtype or x.dtype)


def like_value(value: int) -> Any:
    def fn(cx: Cx, x: Tensor, dtype: DType | None = None, *rest: Any) -> Tensor:
        return T.full(tuple(x.shape), value, dtype=dtype or x.dtype)

    return fn


def scalar_tensor(cx: Cx, value: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    return T.full((), value, dtype=_fill_dtype(value, dtype))


def arange(cx: Cx, end: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    return T.arange(0, end, 1, dtype=dtype or cx.out_dtype())


def arange_start(cx: Cx, start: Any, end: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    return T.arange(start, end, 1, dtype=dtype or cx.out_dtype())


def arange_step(cx: Cx, start: Any, end: Any, step: Any = 1, dtype: DType | None = None, *rest: Any) -> Tensor:
    return T.arange(start, end, step, dtype=dtype or cx.out_dtype())


def eye(cx: Cx, n: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    return eye_m(cx, n, n, dtype)


def eye_m(cx: Cx, n: Any, m: Any, dtype: DType | None = None, *rest: Any) -> Tensor:
    """``torch.eye``: ones where the row equals the column."""
    same = T.unsqueeze(T.arange(0, n, 1), 1) == T.unsqueeze(T.arange(0, m, 1), 0)
    return ew.cast(same, dtype or cx.out_dtype() or DType.float32)


def lift_constant(cx: Cx, x: Tensor) -> Tensor:
    return x
