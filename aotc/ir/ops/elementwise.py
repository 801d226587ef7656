"""Elementwise primitives: unary, binary (NumPy broadcasting), where, cast."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops.base import Op, OpDef, OpKind, is_half, one, same_dtype
from aotc.ir.shapes import ShapeCtx, broadcast_shapes
from aotc.ir.types import Attrs, TensorType

_SQRT_PI_INV2 = 2.0 / np.sqrt(np.pi)


def erf(x: np.ndarray) -> np.ndarray:
    """Error function to float32 accuracy without SciPy: Taylor series near 0, Chebyshev erfc beyond."""
    x64 = np.asarray(x, dtype=np.float64)
    z = np.abs(x64)
    small = z < 1.0
    zs = np.where(small, z, 0.0)
    term = zs.copy()
    total = zs.copy()
    for n in range(1, 24):
        term = term * (-zs * zs) / n
        total = total + term / (2 * n + 1)
    series = _SQRT_PI_INV2 * total
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))
                )
            )
        )
    )
    erfc = t * np.exp(-z * z + poly)
    out = np.where(small, series, 1.0 - erfc)
    return np.sign(x64) * out


def _unary(fn: Callable[[np.ndarray], np.ndarray], compute_f32: bool = True) -> Callable:
    def ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        x = xs[0]
        if compute_f32 and is_half(x.dtype):
            return (fn(x.astype(np.float32)).astype(x.dtype),)
        return (np.asarray(fn(x)).astype(x.dtype, copy=False),)

    return ref


def _bool_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable:
    return lambda xs, attrs: (np.asarray(fn(xs[0].astype(np.float32) if is_half(xs[0].dtype) else xs[0])),)


def _infer_unary(kind: str) -> Callable:
    def infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
        t = ts[0]
        if kind == "float" and not t.dtype.is_float:
            raise ShapeError(f"needs a floating-point input, got {t.dtype.value}")
        if kind == "numeric" and t.dtype is DType.bool:
            raise ShapeError("needs a numeric input, got bool")
        if kind == "bits" and t.dtype.is_float:
            raise ShapeError(f"needs a bool or integer input, got {t.dtype.value}")
        out = DType.bool if kind == "float->bool" else t.dtype
        if kind == "float->bool" and not t.dtype.is_float:
            raise ShapeError(f"needs a floating-point input, got {t.dtype.value}")
        return one(out, t.shape)

    return infer


def _infer_binary(kind: str) -> Callable:
    def infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
        dt = same_dtype(ts, "binary op")
        if kind == "numeric" and dt is DType.bool:
            raise ShapeError("arithmetic on bool tensors is not supported; cast first")
        if kind == "bits" and dt.is_float:
            raise ShapeError(f"bitwise op needs bool or integer inputs, got {dt.value}")
        shape = broadcast_shapes(ctx, ts[0].shape, ts[1].shape)
        return one(DType.bool if kind == "compare" else dt, shape)

    return infer


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], keep_dtype: bool = True) -> Callable:
    def ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        a, b = xs
        dt = a.dtype
        if is_half(dt):
            a, b = a.astype(np.float32), b.astype(np.float32)
        out = np.asarray(fn(a, b))
        return (out.astype(dt, copy=False) if keep_dtype else out,)

    return ref


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        # C / ONNX integer division truncates toward zero; division by zero gives 0. Built on floor
        # division plus a correction, because abs() of the most negative int overflows.
        safe = np.where(b == 0, 1, b)
        q = a // safe
        q = q + ((q * safe != a) & ((a < 0) != (safe < 0)))
        return np.where(b == 0, 0, q)
    return a / b


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return np.mod(a, np.where(b == 0, 1, b)) * (b != 0)
    return np.mod(a, b)


def _fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return np.fmod(a, np.where(b == 0, 1, b)) * (b != 0)
    return np.fmod(a, b)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        # Exact (wrapping) integer powers, as torch computes them; numpy refuses negative integer
        # exponents, where torch gives 0 except for a base of 1 or -1.
        a, b = np.broadcast_arrays(a, b)
        out = np.power(a, np.maximum(b, 0))
        neg = b < 0
        odd = (b % 2) != 0
        at_neg = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(a.dtype)
        return np.where(neg, at_neg, out)
    return np.power(a, b)


def _where_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    c, a, b = ts
    if c.dtype is not DType.bool:
        raise ShapeError(f"where condition must be bool, got {c.dtype.value}")
    dt = same_dtype((a, b), "where")
    return one(dt, broadcast_shapes(ctx, c.shape, a.shape, b.shape))


def _cast_infer(ts: Sequence[TensorType], attrs: Attrs, ctx: ShapeCtx) -> tuple[TensorType, ...]:
    if not isinstance(attrs.get("dtype"), DType):
        raise ShapeError("cast needs a dtype attr")
    return one(attrs["dtype"], ts[0].shape)


def _cast_ref(xs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x, dt = xs[0], attrs["dtype"]
    if (dt.is_int and x.dtype.kind == "f") or (dt.is_int and is_half(x.dtype)):
        # float -> int truncates toward zero like torch; NaN/inf become 0 and finite values out of
        # range saturate, instead of UB. The bounds are compared as floats: int64's max is not one.
        xf = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0))
        info = np.iinfo(dt.np)
        hi, lo = xf >= -float(info.min), xf < float(info.min)
        inside = np.where(hi | lo, 0.0, xf).astype(dt.np)
        return (np.where(hi, info.max, np.where(lo, info.min, inside)).astype(dt.np),)
    return (x.astype(dt.np),)


def _u(op: Op, fn: Callable, kind: str = "float", onnx: str | None = None) -> OpDef:
    ref = _bool_unary(fn) if kind == "float->bool" else _unary(fn)
    return OpDef(op, _infer_unary(kind), ref, (1, 1), onnx=onnx, kind=OpKind.POINTWISE)


def _b(op: Op, fn: Callable, kind: str = "numeric", onnx: str | None = None) -> OpDef:
    infer, ref = _infer_binary(kind), _binary(fn, keep_dtype=kind != "compare")
    return OpDef(op, infer, ref, (2, 2), onnx=onnx, kind=OpKind.POINTWISE)


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.round(x)


DEFS = [
    _u(Op.NEG, np.negative, "numeric", "Neg"),
    _u(Op.ABS, np.abs, "numeric", "Abs"),
    _u(Op.EXP, np.exp, onnx="Exp"),
    _u(Op.LOG, np.log, onnx="Log"),
    _u(Op.SQRT, np.sqrt, onnx="Sqrt"),
    _u(Op.RSQRT, lambda x: 1.0 / np.sqrt(x)),
    _u(Op.RECIPROCAL, lambda x: 1.0 / x, onnx="Reciprocal"),
    _u(Op.SIN, np.sin, onnx="Sin"),
    _u(Op.COS, np.cos, onnx="Cos"),
    _u(Op.TANH, np.tanh, onnx="Tanh"),
    _u(Op.ERF, erf, onnx="Erf"),
    _u(Op.ACOS, np.arccos, onnx="Acos"),
    _u(Op.ASIN, np.arcsin, onnx="Asin"),
    _u(Op.ATAN, np.arctan, onnx="Atan"),
    _u(Op.FLOOR, np.floor, onnx="Floor"),
    _u(Op.CEIL, np.ceil, onnx="Ceil"),
    _u(Op.ROUND, _round_half_even, onnx="Round"),
    _u(Op.SIGN, np.sign, "numeric", "Sign"),
    # On bool tensors the bitwise ops are the logical ones (numpy's and torch's alike), so one reference serves
    # both; ONNX splits them (Not/And/Or/Xor for bool, Bitwise* for ints: see onnx_form/emitters.py).
    _u(Op.NOT, np.invert, "bits", "Not"),
    _u(Op.ISNAN, np.isnan, "float->bool", "IsNaN"),
    _u(Op.ISINF, np.isinf, "float->bool", "IsInf"),
    _b(Op.ADD, np.add, onnx="Add"),
    _b(Op.SUB, np.subtract, onnx="Sub"),
    _b(Op.MUL, np.multiply, onnx="Mul"),
    _b(Op.DIV, _div, onnx="Div"),
    _b(Op.POW, _pow, onnx="Pow"),
    _b(Op.MAXIMUM, np.maximum, onnx="Max"),
    _b(Op.MINIMUM, np.minimum, onnx="Min"),
    _b(Op.MOD, _mod, onnx="Mod"),
    _b(Op.FMOD, _fmod),
    _b(Op.EQ, np.equal, "compare", "Equal"),
    _b(Op.NE, np.not_equal, "compare"),
    _b(Op.LT, np.less, "compare", "Less"),
    _b(Op.LE, np.less_equal, "compare", "LessOrEqual"),
    _b(Op.GT, np.greater, "compare", "Greater"),
    _b(Op.GE, np.greater_equal, "compare", "GreaterOrEqual"),
    _b(Op.AND, np.bitwise_and, "bits", "And"),
    _b(Op.OR, np.bitwise_or, "bits", "Or"),
    _b(Op.XOR, np.bitwise_xor, "bits", "Xor"),
    OpDef(Op.WHERE, _where_infer, lambda xs, a: (np.where(*xs),), (3, 3), onnx="Where", kind=OpKind.POINTWISE),
    OpDef(Op.CAST, _cast_infer, _cast_ref, (1, 1), onnx="Cast", attrs=("dtype",), kind=OpKind.POINTWISE),
]
