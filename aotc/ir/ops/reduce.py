"""Reductions and contractions (batched matmul, N-d convolution)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aotc.errors import ExecError, ShapeError, UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.ops.base import Op, OpDef, OpKind, acc, one, same_dtype
from aotc.ir.shapes import ShapeCtx, broadcast_shapes, fmt_shape, norm_axes, norm_axis
from aotc.ir.symbolic import add, floordiv, mul
from aotc.ir.types import Attrs, TensorType


def _reduced_shape(t: TensorType, axes: tuple[int, ...], keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(t.shape))
    return tuple(d for i, d in enumerate(t.shape) if i not in axes)


def _reduce_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    t = ts[0]
    if t.dtype is DType.bool:
        raise ShapeError("reduction of a bool tensor: cast it first")
    axes = attrs.get("axes")
    if not isinstance(axes, tuple) or norm_axes(axes, t.rank) != axes:
        raise ShapeError(f"reduction axes must be sorted, unique and non-negative, got {axes!r}")
    return one(t.dtype, _reduced_shape(t, axes, bool(attrs.get("keepdim", False))))


def _reducer(fn):
    def ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        x = xs[0]
        axes, keep = attrs["axes"], bool(attrs.get("keepdim", False))
        if not axes or x.ndim == 0:  # a scalar's only axis (0, as torch allows) reduces nothing
            return (x.copy(),)
        out = fn(acc(x), axis=axes, keepdims=keep)
        return (np.asarray(out).astype(x.dtype),)

    return ref


def _extreme(ufunc: np.ufunc, fill_from_min: bool):
    def fn(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
        if x.size == 0:
            info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
            initial = info.min if fill_from_min else info.max
            if x.dtype.kind == "f":
                initial = -np.inf if fill_from_min else np.inf
            return ufunc.reduce(x, axis=axis, keepdims=keepdims, initial=initial)
        return ufunc.reduce(x, axis=axis, keepdims=keepdims)

    return fn


def _arg_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    t = ts[0]
    axis = norm_axis(attrs.get("axis", 0), t.rank)
    return one(DType.int64, _reduced_shape(t, (axis,), bool(attrs.get("keepdim", False))))


def _arg_ref(fn):
    def ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        x = acc(xs[0])
        axis = attrs.get("axis", 0) % max(x.ndim, 1)
        if x.ndim == 0:
            return (np.zeros((), np.int64),)
        if x.shape[axis] == 0:
            raise ExecError(f"arg-reduction over an empty axis {axis} of shape {x.shape}")
        out = fn(x, axis=axis, keepdims=bool(attrs.get("keepdim", False)))
        return (np.asarray(out, dtype=np.int64),)

    return ref


INPUT_PRECISIONS = ("ieee", "tf32", "tf32x3")


def dot_precision(attrs: Attrs) -> str:
    """A float32 matmul/conv's ``tl.dot`` input precision: its ``input_precision`` attr, else "tf32" when it has
    ``allow_tf32``, else "ieee" (full float32 products)."""
    given = attrs.get("input_precision")
    return str(given) if given is not None else ("tf32" if attrs.get("allow_tf32", False) else "ieee")


def check_input_precision(value: object) -> str:
    """``value`` if it names a ``tl.dot`` input precision, else UnsupportedError naming it and the choices."""
    if value not in INPUT_PRECISIONS:
        raise UnsupportedError(f"input precision {value!r}: expected one of {list(INPUT_PRECISIONS)}")
    return str(value)


def _check_tf32(attrs: Attrs, dt: DType, what: str) -> None:
    tf32 = attrs.get("allow_tf32", False)
    if not isinstance(tf32, bool):
        raise ShapeError(f"{what} attr 'allow_tf32' must be a bool, got {tf32!r}")
    given = attrs.get("input_precision")
    if given is not None and given not in INPUT_PRECISIONS:
        raise ShapeError(f"{what} attr 'input_precision' must be one of {list(INPUT_PRECISIONS)}, got {given!r}")
    if tf32 and given not in (None, "tf32"):
        raise ShapeError(f"{what} attrs allow_tf32=True and input_precision={given!r} disagree")
    if (tf32 or given not in (None, "ieee")) and dt is not DType.float32:
        raise ShapeError(f"{what} attr 'allow_tf32' / 'input_precision' applies to float32 inputs, got {dt.value}")


def matmul_out_dtype(attrs: Attrs, dt: DType) -> DType:
    """The product's dtype: the inputs' own, or float32 when ``out_dtype="float32"`` (a float product kept
    unrounded, e.g. split-K partial sums of bfloat16 inputs)."""
    out = attrs.get("out_dtype")
    if out is None:
        return dt
    if not isinstance(out, str) or out != "float32":
        raise ShapeError(f"matmul attr 'out_dtype' must be 'float32' (or absent), got {out!r}")
    if not dt.is_float:
        raise ShapeError(f"matmul attr 'out_dtype'='float32' applies to float inputs, got {dt.value}")
    return DType.float32


def _matmul_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    a, b = ts
    dt = same_dtype(ts, "matmul")
    _check_tf32(attrs, dt, "matmul")
    out_dt = matmul_out_dtype(attrs, dt)
    if dt is DType.bool or a.rank < 2 or b.rank < 2:
        raise ShapeError(f"matmul needs numeric inputs of rank >= 2, got {a} and {b}")
    ctx.require_equal(
        a.shape[-1], b.shape[-2], f"matmul {fmt_shape(a.shape)} @ {fmt_shape(b.shape)}: inner dims differ"
    )
    batch = broadcast_shapes(ctx, a.shape[:-2], b.shape[:-2])
    return one(out_dt, batch + (a.shape[-2], b.shape[-1]))


def _matmul_ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    a, b = xs
    out = np.float32 if attrs.get("out_dtype") == "float32" else a.dtype
    return (np.matmul(acc(a), acc(b)).astype(out),)


def _conv_params(attrs: Attrs, nsp: int) -> tuple[tuple, tuple, tuple, int]:
    strides = attrs.get("strides", (1,) * nsp)
    pads = attrs.get("pads", (0,) * (2 * nsp))
    dil = attrs.get("dilations", (1,) * nsp)
    groups = attrs.get("groups", 1)
    for name, v in (("strides", strides), ("pads", pads), ("dilations", dil)):
        if not isinstance(v, tuple):
            raise ShapeError(f"conv {name} must be a tuple of ints, got {v!r}")
    if len(strides) != nsp or len(pads) != 2 * nsp or len(dil) != nsp:
        raise ShapeError(f"conv attrs must have one entry per spatial dim ({nsp})")
    if any(not _is_int(s) or s < 1 for s in strides + dil) or any(not _is_int(p) or p < 0 for p in pads):
        raise ShapeError("conv strides and dilations must be >= 1 and pads >= 0")
    if not _is_int(groups) or groups < 1:
        raise ShapeError(f"conv groups must be >= 1, got {groups!r}")
    return strides, pads, dil, groups


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _conv_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    x, w = ts
    dt = same_dtype(ts, "conv")
    _check_tf32(attrs, dt, "conv")
    if not dt.is_float or x.rank < 3 or w.rank != x.rank:
        raise ShapeError(f"conv needs float input (N, C, ...) and weight of the same rank, got {x} and {w}")
    nsp = x.rank - 2
    strides, pads, dil, groups = _conv_params(attrs, nsp)
    cout, cin_g = w.shape[0], w.shape[1]
    if not isinstance(cout, int) or cout % groups:
        raise ShapeError(f"conv: out channels {cout} not divisible by groups {groups}")
    ctx.require_equal(x.shape[1], mul(cin_g, groups), "conv: input channels != weight channels * groups")
    spatial = []
    for i in range(nsp):
        k = w.shape[2 + i]
        span = dil[i] * (k - 1) + 1
        padded = add(add(x.shape[2 + i], pads[2 * i]), pads[2 * i + 1])
        ctx.check_true(padded, ">=", span, f"conv: input dim {2 + i} smaller than the kernel")
        spatial.append(add(floordiv(add(padded, -span), strides[i]), 1))
    return one(dt, (x.shape[0], cout, *spatial))


def _conv_ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x, w = acc(xs[0]), acc(xs[1])
    nsp = x.ndim - 2
    strides, pads, dil, groups = _conv_params(attrs, nsp)
    x = np.pad(x, [(0, 0), (0, 0)] + [(pads[2 * i], pads[2 * i + 1]) for i in range(nsp)])
    n = x.shape[0]
    cout, cin_g = w.shape[:2]
    ksz = w.shape[2:]
    out_sp = [(x.shape[2 + i] - dil[i] * (ksz[i] - 1) - 1) // strides[i] + 1 for i in range(nsp)]
    xg = x.reshape(n, groups, cin_g, *x.shape[2:])
    wg = w.reshape(groups, cout // groups, cin_g, *ksz)
    out = np.zeros((n, groups, cout // groups, *out_sp), dtype=np.float32 if x.dtype != np.float64 else x.dtype)
    for k in np.ndindex(*ksz):
        idx = tuple(
            slice(k[i] * dil[i], k[i] * dil[i] + strides[i] * (out_sp[i] - 1) + 1, strides[i]) for i in range(nsp)
        )
        patch = xg[(slice(None), slice(None), slice(None), *idx)]  # n, g, cin_g, *out
        wk = wg[(slice(None), slice(None), slice(None), *k)]  # g, cout_g, cin_g
        out += np.einsum("ngc...,goc->ngo...", patch, wk)
    return (out.reshape(n, cout, *out_sp).astype(xs[0].dtype),)


_max = _extreme(np.maximum, True)
_min = _extreme(np.minimum, False)

DEFS = [
    OpDef(
        Op.REDUCE_SUM,
        _reduce_infer,
        _reducer(np.sum),
        (1, 1),
        onnx="ReduceSum",
        attrs=("axes", "keepdim"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.REDUCE_MAX,
        _reduce_infer,
        _reducer(_max),
        (1, 1),
        onnx="ReduceMax",
        attrs=("axes", "keepdim"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.REDUCE_MIN,
        _reduce_infer,
        _reducer(_min),
        (1, 1),
        onnx="ReduceMin",
        attrs=("axes", "keepdim"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.REDUCE_PROD,
        _reduce_infer,
        _reducer(np.prod),
        (1, 1),
        onnx="ReduceProd",
        attrs=("axes", "keepdim"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.ARGMAX,
        _arg_infer,
        _arg_ref(np.argmax),
        (1, 1),
        onnx="ArgMax",
        attrs=("axis", "keepdim"),
        kind=OpKind.REDUCTION,
    ),
    OpDef(
        Op.ARGMIN,
        _arg_infer,
        _arg_ref(np.argmin),
        (1, 1),
        onnx="ArgMin",
        attrs=("axis", "keepdim"),
        kind=OpKind.REDUCTION,
    ),
    # allow_tf32: a float32 matmul/conv may multiply in tf32 on tensor cores (compile precision "tf32");
    # input_precision="tf32x3": in three tf32 products (each operand split in a tf32 head and its remainder), on
    # tensor cores with float32-class error (compile precision "tf32x3"). The numpy references ignore both, so
    # the cpu backend computes in full float32 either way.
    # out_dtype="float32": a half-precision product is returned as its float32 accumulator, not rounded.
    OpDef(
        Op.MATMUL,
        _matmul_infer,
        _matmul_ref,
        (2, 2),
        onnx="MatMul",
        attrs=("allow_tf32", "input_precision", "out_dtype"),
        kind=OpKind.CONTRACTION,
    ),
    OpDef(
        Op.CONV,
        _conv_infer,
        _conv_ref,
        (2, 2),
        onnx="Conv",
        attrs=("strides", "pads", "dilations", "groups", "allow_tf32", "input_precision"),
        kind=OpKind.CONTRACTION,
    ),
]
