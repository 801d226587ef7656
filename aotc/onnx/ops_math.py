"""ONNX elementwise math, comparisons, activations, casts and reductions -> aotc ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import norm_axis
from aotc.ir.types import Value
from aotc.onnx._common import dtype_from_np, dtype_from_onnx
from aotc.onnx.node import Known, OnnxNode, Operand

Importer = Any  # aotc.onnx.importer.Importer (kept loose: importer imports this module)
Converter = Callable[[Importer, OnnxNode], Sequence[Operand]]


# -- helpers shared by the converter modules ---------------------------------------------------------------


def dtype_of(imp: Importer, x: Operand, what: str) -> DType:
    return x.type.dtype if isinstance(x, Value) else dtype_from_np(x.dtype, what)


def values(imp: Importer, node: OnnxNode, *indices: int) -> list[Value]:
    """Inputs as graph Values; known ones take the dtype of the first runtime input (ONNX types them alike)."""
    xs = [node.inputs[i] for i in indices]
    like = next((x.type.dtype for x in xs if isinstance(x, Value)), None)
    return [imp.value(x, like, what=f"{node.label} input {i}") for i, x in zip(indices, xs)]


def scalar(imp: Importer, value: Any, like: Value) -> Value:
    """A scalar of ``like``'s dtype (ints and bools keep their kind)."""
    dt = like.type.dtype
    v = bool(value) if dt is DType.bool else (int(value) if dt.is_int else float(value))
    return imp.full(v, dt)


def float_input(node: OnnxNode, x: Value) -> None:
    if not x.type.dtype.is_float:
        raise node.fail(f"needs a floating-point input, got {x.type.dtype.value}")


# -- unary -------------------------------------------------------------------------------------------------


def unary(op: Op) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> list[Operand]:
        (x,) = values(imp, node, 0)
        return [imp.b.op(op, x)]

    return convert


def _relu(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    if x.type.dtype.is_float:
        return [imp.b.op(Op.RELU, x)]
    return [imp.b.op(Op.MAXIMUM, x, scalar(imp, 0, x))]


def activation(fn: Callable[[Importer, OnnxNode, Value], Value], upcast: bool = True) -> Converter:
    """A float activation written with primitives; half inputs compute in float32."""

    def convert(imp: Importer, node: OnnxNode) -> list[Operand]:
        (x,) = values(imp, node, 0)
        float_input(node, x)
        xf = imp.b.cast(x, DType.float32) if upcast else x
        return [imp.b.cast(fn(imp, node, xf), x.type.dtype)]

    return convert


def _c(imp: Importer, x: Value, v: float) -> Value:
    return imp.full(float(v), x.type.dtype)


def _where_neg(imp: Importer, x: Value, neg: Value, pos: Value, strict: bool = True) -> Value:
    cond = imp.b.op(Op.LT if strict else Op.LE, x, _c(imp, x, 0.0))
    return imp.b.op(Op.WHERE, cond, neg, pos)


def _leaky_relu(imp: Importer, node: OnnxNode, x: Value) -> Value:
    return _where_neg(imp, x, imp.b.op(Op.MUL, x, _c(imp, x, node.attr("alpha", 0.01))), x)


def _expm1_scaled(imp: Importer, x: Value, alpha: float) -> Value:
    return imp.b.op(Op.MUL, _c(imp, x, alpha), imp.b.op(Op.SUB, imp.b.op(Op.EXP, x), _c(imp, x, 1.0)))


def _elu(imp: Importer, node: OnnxNode, x: Value) -> Value:
    return _where_neg(imp, x, _expm1_scaled(imp, x, node.attr("alpha", 1.0)), x)


def _selu(imp: Importer, node: OnnxNode, x: Value) -> Value:
    alpha, gamma = node.attr("alpha", 1.67326319217681884765625), node.attr("gamma", 1.05070102214813232421875)
    y = _where_neg(imp, x, _expm1_scaled(imp, x, alpha), x, strict=False)
    return imp.b.op(Op.MUL, y, _c(imp, x, gamma))


def _celu(imp: Importer, node: OnnxNode, x: Value) -> Value:
    alpha = node.attr("alpha", 1.0)
    neg = _expm1_scaled(imp, imp.b.op(Op.DIV, x, _c(imp, x, alpha)), alpha)
    zero = _c(imp, x, 0.0)
    return imp.b.op(Op.ADD, imp.b.op(Op.MAXIMUM, x, zero), imp.b.op(Op.MINIMUM, neg, zero))


def _clamp01(imp: Importer, x: Value) -> Value:
    return imp.b.op(Op.MINIMUM, imp.b.op(Op.MAXIMUM, x, _c(imp, x, 0.0)), _c(imp, x, 1.0))


def _hard_sigmoid(imp: Importer, node: OnnxNode, x: Value) -> Value:
    lin = imp.b.op(Op.ADD, imp.b.op(Op.MUL, x, _c(imp, x, node.attr("alpha", 0.2))), _c(imp, x, node.attr("beta", 0.5)))
    return _clamp01(imp, lin)


def _hard_swish(imp: Importer, node: OnnxNode, x: Value) -> Value:
    lin = imp.b.op(Op.ADD, imp.b.op(Op.MUL, x, _c(imp, x, 1.0 / 6.0)), _c(imp, x, 0.5))
    return imp.b.op(Op.MUL, x, _clamp01(imp, lin))


def softplus(imp: Importer, x: Value) -> Value:
    # max(x, 0) + log(1 + exp(-|x|)): never overflows, unlike log(exp(x) + 1).
    tail = imp.b.op(Op.LOG, imp.b.op(Op.ADD, _c(imp, x, 1.0), imp.b.op(Op.EXP, imp.b.op(Op.NEG, imp.b.op(Op.ABS, x)))))
    return imp.b.op(Op.ADD, imp.b.op(Op.MAXIMUM, x, _c(imp, x, 0.0)), tail)


def _softsign(imp: Importer, node: OnnxNode, x: Value) -> Value:
    return imp.b.op(Op.DIV, x, imp.b.op(Op.ADD, _c(imp, x, 1.0), imp.b.op(Op.ABS, x)))


def _thresholded_relu(imp: Importer, node: OnnxNode, x: Value) -> Value:
    keep = imp.b.op(Op.GT, x, _c(imp, x, node.attr("alpha", 1.0)))
    return imp.b.op(Op.WHERE, keep, x, _c(imp, x, 0.0))


def _mish(imp: Importer, node: OnnxNode, x: Value) -> Value:
    return imp.b.op(Op.MUL, x, imp.b.op(Op.TANH, softplus(imp, x)))


def _shrink(imp: Importer, node: OnnxNode, x: Value) -> Value:
    bias, lambd = node.attr("bias", 0.0), node.attr("lambd", 0.5)
    lo = imp.b.op(
        Op.WHERE, imp.b.op(Op.LT, x, _c(imp, x, -lambd)), imp.b.op(Op.ADD, x, _c(imp, x, bias)), _c(imp, x, 0.0)
    )
    return imp.b.op(Op.WHERE, imp.b.op(Op.GT, x, _c(imp, x, lambd)), imp.b.op(Op.SUB, x, _c(imp, x, bias)), lo)


def _tan(imp: Importer, node: OnnxNode, x: Value) -> Value:
    return imp.b.op(Op.DIV, imp.b.op(Op.SIN, x), imp.b.op(Op.COS, x))


def _sinh_cosh(sign: float) -> Callable[[Importer, OnnxNode, Value], Value]:
    def fn(imp: Importer, node: OnnxNode, x: Value) -> Value:
        e, en = imp.b.op(Op.EXP, x), imp.b.op(Op.EXP, imp.b.op(Op.NEG, x))
        s = imp.b.op(Op.SUB, e, en) if sign < 0 else imp.b.op(Op.ADD, e, en)
        return imp.b.op(Op.MUL, s, _c(imp, x, 0.5))

    return fn


def _asinh(imp: Importer, node: OnnxNode, x: Value) -> Value:
    r = imp.b.op(Op.SQRT, imp.b.op(Op.ADD, imp.b.op(Op.MUL, x, x), _c(imp, x, 1.0)))
    return imp.b.op(Op.LOG, imp.b.op(Op.ADD, x, r))


def _acosh(imp: Importer, node: OnnxNode, x: Value) -> Value:
    r = imp.b.op(Op.SQRT, imp.b.op(Op.SUB, imp.b.op(Op.MUL, x, x), _c(imp, x, 1.0)))
    return imp.b.op(Op.LOG, imp.b.op(Op.ADD, x, r))


def _atanh(imp: Importer, node: OnnxNode, x: Value) -> Value:
    one = _c(imp, x, 1.0)
    q = imp.b.op(Op.DIV, imp.b.op(Op.ADD, one, x), imp.b.op(Op.SUB, one, x))
    return imp.b.op(Op.MUL, imp.b.op(Op.LOG, q), _c(imp, x, 0.5))


def _swish(imp: Importer, node: OnnxNode, x: Value) -> Value:
    return imp.b.op(Op.MUL, x, imp.b.op(Op.SIGMOID, imp.b.op(Op.MUL, x, _c(imp, x, node.attr("alpha", 1.0)))))


def _gelu(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    approx = node.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise node.fail(f"approximate={approx!r} is not supported")
    return [imp.b.op(Op.GELU, x, approximate=approx)]


def _sigmoid(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    return [imp.b.op(Op.SIGMOID, x)]


def _swiglu(imp: Importer, node: OnnxNode) -> list[Operand]:
    a, b = values(imp, node, 0, 1)
    float_input(node, a)
    if a.type.shape != b.type.shape:
        raise ShapeError(f"{node.label}: SwiGLU needs A and B of one shape, got {a.type} and {b.type}")
    gate = imp.b.op(Op.MUL, a, imp.b.op(Op.SIGMOID, imp.b.op(Op.MUL, a, scalar(imp, node.attr("alpha", 1.0), a))))
    return [imp.b.op(Op.MUL, gate, b)]


def _prelu(imp: Importer, node: OnnxNode) -> list[Operand]:
    x, slope = values(imp, node, 0, 1)
    zero = scalar(imp, 0, x)
    return [imp.b.op(Op.WHERE, imp.b.op(Op.LT, x, zero), imp.b.op(Op.MUL, x, slope), x)]


def _isinf(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    y = imp.b.op(Op.ISINF, x)
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    if pos and neg:
        return [y]
    if not pos and not neg:
        return [imp.full(False, DType.bool, x.type.shape)]
    side = imp.b.op(Op.GT if pos else Op.LT, x, scalar(imp, 0.0, x))
    return [imp.b.op(Op.AND, y, side)]


# -- binary and variadic -----------------------------------------------------------------------------------


def binary(op: Op) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> list[Operand]:
        a, b = values(imp, node, 0, 1)
        return [imp.b.op(op, a, b)]

    return convert


def bits(op: Op, on_bool: bool) -> Converter:
    """ONNX's logical ops (Not, And, Or, Xor) take bool tensors and its Bitwise* ops integers; aotc's op is the
    same for both, so the type the ONNX op allows is checked here."""

    def convert(imp: Importer, node: OnnxNode) -> list[Operand]:
        xs = values(imp, node, *range(len(node.inputs)))
        dt = xs[0].type.dtype
        if (dt is DType.bool) != on_bool or dt.is_float:
            raise node.fail(f"needs {'bool' if on_bool else 'integer'} inputs, got {dt.value}")
        return [imp.b.op(op, *xs)]

    return convert


def _pow(imp: Importer, node: OnnxNode) -> list[Operand]:
    base = imp.value(node.inputs[0], what=f"{node.label} base")
    exp = imp.value(node.inputs[1], base.type.dtype, what=f"{node.label} exponent")
    return [imp.b.op(Op.POW, base, imp.b.cast(exp, base.type.dtype))]


def _mod(imp: Importer, node: OnnxNode) -> list[Operand]:
    a, b = values(imp, node, 0, 1)
    # fmod=0 takes the divisor's sign (Python %), fmod=1 the dividend's (C fmod)
    return [imp.b.op(Op.FMOD if node.attr("fmod", 0) else Op.MOD, a, b)]


def variadic(op: Op, mean: bool = False) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> list[Operand]:
        xs = values(imp, node, *range(len(node.inputs)))
        y = xs[0]
        for x in xs[1:]:
            y = imp.b.op(op, y, x)
        if mean and len(xs) > 1:
            y = imp.b.op(Op.DIV, y, scalar(imp, len(xs), y))
        return [y]

    return convert


def _where(imp: Importer, node: OnnxNode) -> list[Operand]:
    cond = imp.value(node.inputs[0], DType.bool, what=f"{node.label} condition")
    a, b = values(imp, node, 1, 2)
    return [imp.b.op(Op.WHERE, cond, a, b)]


def _clip(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    if node.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
        lo = None if lo is None else scalar(imp, lo, x)
        hi = None if hi is None else scalar(imp, hi, x)
    else:
        lo = None if node.input(1) is None else imp.value(node.inputs[1], x.type.dtype)
        hi = None if node.input(2) is None else imp.value(node.inputs[2], x.type.dtype)
    if lo is not None:
        x = imp.b.op(Op.MAXIMUM, x, lo)
    if hi is not None:
        x = imp.b.op(Op.MINIMUM, x, hi)
    return [x]


# -- casts -------------------------------------------------------------------------------------------------


def _cast(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    return [imp.b.cast(x, dtype_from_onnx(node.attr("to"), f"{node.label} target"))]


def _cast_like(imp: Importer, node: OnnxNode) -> list[Operand]:
    target = dtype_of(imp, node.inputs[1], f"{node.label} target")
    x = node.inputs[0]
    if isinstance(x, Known) and not x.symbolic:  # a constant cast like a runtime tensor stays a constant
        return [Known.of(x.array.astype(target.np))]
    return [imp.b.cast(imp.value(x, what=f"{node.label} input"), target)]


def _identity(imp: Importer, node: OnnxNode) -> list[Operand]:
    return [node.inputs[0]]


# -- reductions --------------------------------------------------------------------------------------------


def reduce_axes(node: OnnxNode, rank: int, since: int) -> tuple[int, ...] | None:
    """Sorted non-negative axes, or None for 'no reduction' (empty axes with noop_with_empty_axes)."""
    axes = node.axes(1, since=since)
    if not axes:
        return None if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({norm_axis(a, rank) for a in axes}))


def reduction(kind: str, since: int = 18) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> list[Operand]:
        (x,) = values(imp, node, 0)
        axes = reduce_axes(node, x.type.rank, since)
        if axes is None:
            return [x]
        keep = bool(node.attr("keepdims", 1))
        return [_reduce(imp, node, kind, x, axes, keep)]

    return convert


_PLAIN = {"sum": Op.REDUCE_SUM, "max": Op.REDUCE_MAX, "min": Op.REDUCE_MIN, "prod": Op.REDUCE_PROD}


def _reduce(imp: Importer, node: OnnxNode, kind: str, x: Value, axes: tuple[int, ...], keep: bool) -> Value:
    b = imp.b
    if x.type.dtype is DType.bool:
        if kind not in ("max", "min"):
            raise node.fail(f"Reduce {kind} of a bool tensor is not supported")
        # via int32; an empty max gives INT_MIN and an empty min INT_MAX, so "> 0" yields False / True as ONNX does
        y = _reduce(imp, node, kind, b.cast(x, DType.int32), axes, keep)
        return b.op(Op.GT, y, imp.full(0, DType.int32))
    if kind in _PLAIN:
        return b.op(_PLAIN[kind], x, axes=axes, keepdim=keep)
    if kind == "mean":
        if x.type.dtype.is_float:
            return b.op(Op.REDUCE_MEAN, x, axes=axes, keepdim=keep)
        count = 1
        for a in axes:
            count = count * x.type.shape[a]
        return b.op(Op.DIV, b.op(Op.REDUCE_SUM, x, axes=axes, keepdim=keep), imp.full(count, x.type.dtype))
    if kind == "l1":
        return b.op(Op.REDUCE_SUM, b.op(Op.ABS, x), axes=axes, keepdim=keep)
    if kind == "sum_square":
        return b.op(Op.REDUCE_SUM, b.op(Op.MUL, x, x), axes=axes, keepdim=keep)
    if kind == "l2":
        s = _reduce(imp, node, "sum_square", x, axes, keep)
        return (
            b.op(Op.SQRT, s) if s.type.dtype.is_float else b.cast(b.op(Op.SQRT, b.cast(s, DType.float32)), s.type.dtype)
        )
    float_input(node, x)
    if kind == "log_sum":
        return b.op(Op.LOG, b.op(Op.REDUCE_SUM, x, axes=axes, keepdim=keep))
    # log_sum_exp, shifted by the max so large inputs don't overflow; an all -inf row keeps shift 0.
    m = b.op(Op.REDUCE_MAX, x, axes=axes, keepdim=True)
    m = b.op(Op.WHERE, b.op(Op.ISINF, m), scalar(imp, 0.0, m), m)
    s = b.op(Op.REDUCE_SUM, b.op(Op.EXP, b.op(Op.SUB, x, m)), axes=axes, keepdim=True)
    y = b.op(Op.ADD, b.op(Op.LOG, s), m)
    return y if keep else b.reshape(y, tuple(d for i, d in enumerate(x.type.shape) if i not in axes))


def arg_reduce(op: Op) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> list[Operand]:
        (x,) = values(imp, node, 0)
        axis = norm_axis(node.attr("axis", 0), x.type.rank)
        keep = bool(node.attr("keepdims", 1))
        if not node.attr("select_last_index", 0):
            return [imp.b.op(op, x, axis=axis, keepdim=keep)]
        idx = imp.b.op(op, imp.b.op(Op.FLIP, x, axes=(axis,)), axis=axis, keepdim=keep)
        last = imp.full(x.type.shape[axis] - 1, DType.int64)
        return [imp.b.op(Op.SUB, last, idx)]

    return convert


_ISNAN = unary(Op.ISNAN)

CONVERTERS: dict[str, Converter] = {
    "Abs": unary(Op.ABS),
    "Neg": unary(Op.NEG),
    "Exp": unary(Op.EXP),
    "Log": unary(Op.LOG),
    "Sqrt": unary(Op.SQRT),
    "Reciprocal": unary(Op.RECIPROCAL),
    "Sin": unary(Op.SIN),
    "Cos": unary(Op.COS),
    "Tanh": unary(Op.TANH),
    "Erf": unary(Op.ERF),
    "Acos": unary(Op.ACOS),
    "Asin": unary(Op.ASIN),
    "Atan": unary(Op.ATAN),
    "Floor": unary(Op.FLOOR),
    "Ceil": unary(Op.CEIL),
    "Round": unary(Op.ROUND),
    "Sign": unary(Op.SIGN),
    "Not": bits(Op.NOT, on_bool=True),
    "BitwiseNot": bits(Op.NOT, on_bool=False),
    "IsNaN": _ISNAN,
    "IsInf": _isinf,
    "Relu": _relu,
    "Sigmoid": _sigmoid,
    "Gelu": _gelu,
    "LeakyRelu": activation(_leaky_relu),
    "Elu": activation(_elu),
    "Selu": activation(_selu),
    "Celu": activation(_celu),
    "HardSigmoid": activation(_hard_sigmoid),
    "HardSwish": activation(_hard_swish),
    "Softplus": activation(lambda imp, node, x: softplus(imp, x)),
    "Softsign": activation(_softsign),
    "ThresholdedRelu": activation(_thresholded_relu),
    "Mish": activation(_mish),
    "Shrink": activation(_shrink, upcast=False),
    "Tan": activation(_tan),
    "Sinh": activation(_sinh_cosh(-1.0)),
    "Cosh": activation(_sinh_cosh(1.0)),
    "Asinh": activation(_asinh),
    "Acosh": activation(_acosh),
    "Atanh": activation(_atanh),
    "Swish": activation(_swish),
    "PRelu": _prelu,
    "SwiGLU": _swiglu,
    "Add": binary(Op.ADD),
    "Sub": binary(Op.SUB),
    "Mul": binary(Op.MUL),
    "Div": binary(Op.DIV),
    "Pow": _pow,
    "Mod": _mod,
    "Equal": binary(Op.EQ),
    "Less": binary(Op.LT),
    "LessOrEqual": binary(Op.LE),
    "Greater": binary(Op.GT),
    "GreaterOrEqual": binary(Op.GE),
    "And": bits(Op.AND, on_bool=True),
    "Or": bits(Op.OR, on_bool=True),
    "Xor": bits(Op.XOR, on_bool=True),
    "BitwiseAnd": bits(Op.AND, on_bool=False),
    "BitwiseOr": bits(Op.OR, on_bool=False),
    "BitwiseXor": bits(Op.XOR, on_bool=False),
    "Sum": variadic(Op.ADD),
    "Mean": variadic(Op.ADD, mean=True),
    "Max": variadic(Op.MAXIMUM),
    "Min": variadic(Op.MINIMUM),
    "Where": _where,
    "Clip": _clip,
    "Cast": _cast,
    "CastLike": _cast_like,
    "Identity": _identity,
    "ReduceSum": reduction("sum", since=13),
    "ReduceMean": reduction("mean"),
    "ReduceMax": reduction("max"),
    "ReduceMin": reduction("min"),
    "ReduceProd": reduction("prod"),
    "ReduceL1": reduction("l1"),
    "ReduceL2": reduction("l2"),
    "ReduceLogSum": reduction("log_sum"),
    "ReduceLogSumExp": reduction("log_sum_exp"),
    "ReduceSumSquare": reduction("sum_square"),
    "ArgMax": arg_reduce(Op.ARGMAX),
    "ArgMin": arg_reduce(Op.ARGMIN),
}
