"""aotc op -> ONNX nodes, one emitter per op that ONNX (at EXPORT_OPSET) can express directly.

An emitter writes the node's results into the given output names. Ops without an emitter here are written as
their op-table decomposition (see build.py), e.g. GELU (ONNX Gelu arrives in opset 20), RMS_NORM, SDPA.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aotc.ir.dtypes import DType
from aotc.ir.onnx_form.context import HALF, INT64_MIN, ExportCtx
from aotc.ir.ops import Op
from aotc.ir.types import Node

Emitter = Callable[[ExportCtx, Node, list[str], list[str]], None]


def _simple(op_type: str, **fixed: object) -> Emitter:
    """A one-to-one op; half inputs the ONNX op doesn't take are computed in float32."""

    def emit(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
        dt = node.inputs[0].type.dtype
        if dt in HALF and not ctx.accepts(op_type, dt):
            n = len(node.inputs)
            up = [
                ctx.one("Cast", [v], to=ctx.elem_type(DType.float32))
                if j < n and node.inputs[j].type.dtype in HALF
                else v
                for j, v in enumerate(ins)
            ]
            y = ctx.one(op_type, up, **fixed)
            out_dt = node.outputs[0].type.dtype
            ctx.one("Cast", [y], outs[0], to=ctx.elem_type(out_dt)) if out_dt in HALF else ctx.one(
                "Identity", [y], outs[0]
            )
            return
        ctx.add(op_type, ins, outs, **fixed)

    return emit


def _bits(logical: str, bitwise: str) -> Emitter:
    """A bitwise op: ONNX's logical form on bool tensors, its Bitwise* form (opset 18) on integers."""

    def emit(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
        ctx.add(logical if node.inputs[0].type.dtype is DType.bool else bitwise, ins, outs)

    return emit


def _rsqrt(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    ctx.one("Reciprocal", [ctx.one("Sqrt", ins)], outs[0])


def _ne(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    ctx.one("Not", [ctx.one("Equal", ins)], outs[0])


def _mod(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    if node.inputs[0].type.dtype.is_int:
        ctx.one("Mod", ins, outs[0], fmod=0)
        return
    # floating-point Mod with the divisor's sign: a - b * floor(a / b)
    a, b = ins
    q = ctx.one("Floor", [ctx.one("Div", [a, b])])
    ctx.one("Sub", [a, ctx.one("Mul", [b, q])], outs[0])


def _cast(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    ctx.one("Cast", ins, outs[0], to=ctx.elem_type(node.attrs["dtype"]))


def _matmul(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    """ONNX MatMul returns its inputs' type: a half product kept in float32 (``out_dtype``) multiplies
    float32 copies of the inputs, which is exact for the products and accumulates in float32."""
    out_dt = node.outputs[0].type.dtype
    a, b = (v.type for v in node.inputs)
    k = a.shape[-1]
    if (
        not ctx.holds(node.inputs[1])
        and a.dtype is out_dt
        and a.rank >= 3
        and b.rank == 2
        and isinstance(k, int)
        and k > 0
    ):
        # One GEMM over every row: onnxruntime runs a batched MatMul by a 2-D operand it does not hold (a weight
        # unfolded as an input) as one GEMM per batch, each packing the weight again (_linear writes Linear so for
        # the same reason). A weight it holds is packed once, at load, and onnxruntime runs the plain MatMul as one
        # GEMM itself, without the two Reshapes and their shape Concats (GPT-2 ~3% faster at batch 1 and 8).
        rows = ctx.one("Reshape", [ins[0], ctx.i64([-1, k])])
        y = ctx.one("MatMul", [rows, ins[1]])
        ctx.one("Reshape", [y, ctx.shape(node.outputs[0].type.shape)], outs[0])
        return
    if a.dtype is out_dt:
        _simple("MatMul")(ctx, node, ins, outs)
        return
    up = [ctx.one("Cast", [v], to=ctx.elem_type(out_dt)) for v in ins]
    ctx.add("MatMul", up, outs)


def _reduce(op_type: str) -> Emitter:
    def emit(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
        axes = node.attrs["axes"]
        if not axes:  # aotc: no axes means no reduction; ONNX would reduce everything
            ctx.one("Identity", ins, outs[0])
            return
        keep = int(bool(node.attrs.get("keepdim", False)))
        _simple(op_type, keepdims=keep)(ctx, node, [ins[0], ctx.i64(axes)], outs)

    return emit


def _arg(op_type: str) -> Emitter:
    def emit(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
        keep = int(bool(node.attrs.get("keepdim", False)))
        ctx.one(op_type, ins, outs[0], axis=node.attrs.get("axis", 0), keepdims=keep)

    return emit


def _reshape(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    shape = node.attrs["shape"]
    # allowzero: a 0 in the target means zero elements, not "copy the input dim"
    may_be_zero = any(ctx.shape_ctx.bounds(d)[0] <= 0 for d in shape)
    ctx.one("Reshape", [ins[0], ctx.shape(shape)], outs[0], allowzero=1 if may_be_zero else None)


def _permute(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    ctx.one("Transpose", ins, outs[0], perm=list(node.attrs["perm"]))


def _broadcast(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    ctx.one("Expand", [ins[0], ctx.shape(node.attrs["shape"])], outs[0])


def _slice(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    shape = node.inputs[0].type.shape
    starts, stops, steps = node.attrs["starts"], node.attrs["stops"], node.attrs["steps"]
    axes = [i for i in range(len(shape)) if not (starts[i] == 0 and stops[i] == shape[i] and steps[i] == 1)]
    if not axes:
        ctx.one("Identity", ins, outs[0])
        return
    pick = lambda vals: ctx.shape([vals[i] for i in axes])  # noqa: E731
    ctx.one("Slice", [ins[0], pick(starts), pick(stops), ctx.i64(axes), ctx.i64([steps[i] for i in axes])], outs[0])


def _flip(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    axes = list(node.attrs.get("axes", ()))
    if not axes:
        ctx.one("Identity", ins, outs[0])
        return
    n = len(axes)
    ctx.one("Slice", [ins[0], ctx.i64([-1] * n), ctx.i64([INT64_MIN] * n), ctx.i64(axes), ctx.i64([-1] * n)], outs[0])


def _pad(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    p = node.attrs["pads"]
    rank = len(p) // 2
    dt = node.inputs[0].type.dtype
    value = node.attrs.get("value", 0.0)
    v = bool(value) if dt is DType.bool else (int(value) if dt.is_int else float(value))
    pads = ctx.shape([p[2 * i] for i in range(rank)] + [p[2 * i + 1] for i in range(rank)])
    ctx.one("Pad", [ins[0], pads, ctx.scalar(v, dt)], outs[0], mode="constant")


def _concat(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    ctx.one("Concat", ins, outs[0], axis=node.attrs.get("axis", 0))


def _gather(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    ctx.one("Gather", ins, outs[0], axis=node.attrs.get("axis", 0))


def _scatter(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    idx = ins[1]
    if node.inputs[1].type.dtype is not DType.int64:
        idx = ctx.one("Cast", [idx], to=ctx.elem_type(DType.int64))  # ScatterND takes int64 indices only
    reduction = node.attrs.get("reduction", "none")
    ctx.one("ScatterND", [ins[0], idx, ins[2]], outs[0], **({} if reduction == "none" else {"reduction": reduction}))


def _iota(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    shape, dt = node.attrs["shape"], node.attrs["dtype"]
    axis = node.attrs.get("axis", 0) % max(len(shape), 1)
    n = shape[axis]
    # Range over int64 dims, then Cast: importers (aotc's included) can follow an integer Range of a shape
    r = ctx.one("Range", [ctx.scalar(0, DType.int64), ctx.dim_scalar(n), ctx.scalar(1, DType.int64)])
    if dt is not DType.int64:
        r = ctx.one("Cast", [r], to=ctx.elem_type(dt))
    view = [1] * len(shape)
    view[axis] = n
    r = ctx.one("Reshape", [r, ctx.shape(view)])
    ctx.one("Expand", [r, ctx.shape(shape)], outs[0])


def _full(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    shape, value, dt = node.attrs["shape"], node.attrs["value"], node.attrs["dtype"]
    if isinstance(value, (int, float, bool, np.generic)):
        v = bool(value) if dt is DType.bool else (int(value) if dt.is_int else float(value))
        scalar = ctx.scalar(v, dt)
    else:  # a symbolic value, e.g. the element count a mean divides by
        scalar = ctx.one("Cast", [ctx.dim_scalar(value)], to=ctx.elem_type(dt))
    if shape == ():
        ctx.one("Identity", [scalar], outs[0])
    else:
        ctx.one("Expand", [scalar, ctx.shape(shape)], outs[0])


def _conv_attrs(node: Node, nsp: int) -> dict:
    a = node.attrs
    pads = a.get("pads", (0,) * 2 * nsp)
    return {
        "strides": list(a.get("strides", (1,) * nsp)),
        "dilations": list(a.get("dilations", (1,) * nsp)),
        "pads": [pads[2 * i] for i in range(nsp)] + [pads[2 * i + 1] for i in range(nsp)],
        "group": a.get("groups", 1),
    }


def _conv(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    nsp = node.inputs[0].type.rank - 2
    ctx.one("Conv", ins, outs[0], **_conv_attrs(node, nsp))


def _linear(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    if node.inputs[0].type.rank == 2:
        ctx.one("Gemm", ins, outs[0], transB=1)
        return
    if ctx.weights_as_inputs:
        # A weight onnxruntime cannot fold (an input) is best read transposed by one Gemm over every row: MatMul of
        # a 3-D input by a transposed input runs one GEMM per batch, each packing the weight again. A weight the
        # session holds is read so too: the Gemm adds the bias as it writes, where MatMul then Add reads the product
        # again (MiniLM-size BERT measured no faster written as MatMul, unlike _matmul's plain MatMul for GPT-2).
        k = node.inputs[1].type.shape[1]
        rows = ctx.one("Reshape", [ins[0], ctx.i64([-1, k])])
        y = ctx.one("Gemm", [rows, *ins[1:]], transB=1)
        ctx.one("Reshape", [y, ctx.shape(node.outputs[0].type.shape)], outs[0])
        return
    wt = ctx.one("Transpose", [ins[1]], perm=[1, 0])
    if len(ins) == 2:
        ctx.one("MatMul", [ins[0], wt], outs[0])
    else:
        ctx.one("Add", [ctx.one("MatMul", [ins[0], wt]), ins[2]], outs[0])


def _silu(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    ctx.one("Mul", [ins[0], ctx.one("Sigmoid", ins)], outs[0])


def _axis_op(op_type: str) -> Emitter:
    def emit(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
        ctx.one(op_type, ins, outs[0], axis=node.attrs.get("axis", -1))

    return emit


def _ones(ctx: ExportCtx, dims: tuple, dt: DType, value: float) -> str:
    if all(isinstance(d, int) for d in dims):
        return ctx.initializer(np.full(dims, value, dtype=dt.np), ctx.fresh("ones" if value else "zeros"))
    return ctx.one("Expand", [ctx.scalar(value, dt), ctx.shape(dims)])


def _layer_norm(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    x = node.inputs[0]
    ndim = node.attrs.get("ndim", 1)
    scale = ins[1] if len(ins) > 1 else _ones(ctx, x.type.shape[-ndim:], x.type.dtype, 1.0)
    args = [ins[0], scale] + ins[2:3]
    ctx.one("LayerNormalization", args, outs[0], axis=-ndim, epsilon=float(node.attrs.get("eps", 1e-5)))


def _batch_norm(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    x = node.inputs[0]
    c = x.type.shape[1]
    scale = ins[3] if len(ins) > 3 else _ones(ctx, (c,), x.type.dtype, 1.0)
    bias = ins[4] if len(ins) > 4 else _ones(ctx, (c,), x.type.dtype, 0.0)
    ctx.one(
        "BatchNormalization", [ins[0], scale, bias, ins[1], ins[2]], outs[0], epsilon=float(node.attrs.get("eps", 1e-5))
    )


def _pool(op_type: str) -> Emitter:
    def emit(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
        a = node.attrs
        kernel = a["kernel"]
        nsp = len(kernel)
        pads = a.get("pads", (0,) * 2 * nsp)
        attrs = {
            "kernel_shape": list(kernel),
            "strides": list(a.get("strides", kernel)),
            "pads": [pads[2 * i] for i in range(nsp)] + [pads[2 * i + 1] for i in range(nsp)],
        }
        if op_type == "AveragePool":
            attrs["count_include_pad"] = int(bool(a.get("count_include_pad", True)))
        ctx.one(op_type, ins, outs[0], **attrs)

    return emit


def _tri(upper: int) -> Emitter:
    def emit(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
        ctx.one("Trilu", [ins[0], ctx.scalar(int(node.attrs.get("k", 0)), DType.int64)], outs[0], upper=upper)

    return emit


def _embedding(ctx: ExportCtx, node: Node, ins: list[str], outs: list[str]) -> None:
    ctx.one("Gather", ins, outs[0], axis=0)


_UNARY = {
    Op.NEG: "Neg",
    Op.ABS: "Abs",
    Op.EXP: "Exp",
    Op.LOG: "Log",
    Op.SQRT: "Sqrt",
    Op.RECIPROCAL: "Reciprocal",
    Op.SIN: "Sin",
    Op.COS: "Cos",
    Op.TANH: "Tanh",
    Op.ERF: "Erf",
    Op.ACOS: "Acos",
    Op.ASIN: "Asin",
    Op.ATAN: "Atan",
    Op.FLOOR: "Floor",
    Op.CEIL: "Ceil",
    Op.ROUND: "Round",
    Op.SIGN: "Sign",
    Op.ISNAN: "IsNaN",
    Op.ISINF: "IsInf",
    Op.RELU: "Relu",
    Op.SIGMOID: "Sigmoid",
}
_BINARY = {
    Op.ADD: "Add",
    Op.SUB: "Sub",
    Op.MUL: "Mul",
    Op.DIV: "Div",
    Op.POW: "Pow",
    Op.MAXIMUM: "Max",
    Op.MINIMUM: "Min",
    Op.EQ: "Equal",
    Op.LT: "Less",
    Op.LE: "LessOrEqual",
    Op.GT: "Greater",
    Op.GE: "GreaterOrEqual",
    Op.WHERE: "Where",
}

EMITTERS: dict[Op, Emitter] = {
    **{op: _simple(name) for op, name in {**_UNARY, **_BINARY}.items()},
    Op.NOT: _bits("Not", "BitwiseNot"),
    Op.AND: _bits("And", "BitwiseAnd"),
    Op.OR: _bits("Or", "BitwiseOr"),
    Op.XOR: _bits("Xor", "BitwiseXor"),
    Op.RSQRT: _rsqrt,
    Op.NE: _ne,
    Op.MOD: _mod,
    Op.FMOD: _simple("Mod", fmod=1),
    Op.CAST: _cast,
    Op.MATMUL: _matmul,
    Op.REDUCE_SUM: _reduce("ReduceSum"),
    Op.REDUCE_MAX: _reduce("ReduceMax"),
    Op.REDUCE_MIN: _reduce("ReduceMin"),
    Op.REDUCE_PROD: _reduce("ReduceProd"),
    Op.REDUCE_MEAN: _reduce("ReduceMean"),
    Op.ARGMAX: _arg("ArgMax"),
    Op.ARGMIN: _arg("ArgMin"),
    Op.RESHAPE: _reshape,
    Op.PERMUTE: _permute,
    Op.BROADCAST: _broadcast,
    Op.SLICE: _slice,
    Op.FLIP: _flip,
    Op.PAD: _pad,
    Op.CONCAT: _concat,
    Op.GATHER: _gather,
    Op.SCATTER: _scatter,
    Op.IOTA: _iota,
    Op.FULL: _full,
    Op.CONV: _conv,
    Op.CONV2D: _conv,
    Op.LINEAR: _linear,
    Op.SILU: _silu,
    Op.SOFTMAX: _axis_op("Softmax"),
    Op.LOG_SOFTMAX: _axis_op("LogSoftmax"),
    Op.LAYER_NORM: _layer_norm,
    Op.BATCH_NORM: _batch_norm,
    Op.MAX_POOL2D: _pool("MaxPool"),
    Op.AVG_POOL2D: _pool("AveragePool"),
    Op.TRIL: _tri(0),
    Op.TRIU: _tri(1),
    Op.EMBEDDING: _embedding,
}

# Nodes written as their decomposition although their op has an emitter: a ceil-mode pool, whose last partial
# window's divisor ONNX runtimes have computed differently from torch across versions; the decomposition is exact.
DECOMPOSED_WHEN: dict[Op, Callable[[Node], bool]] = {
    Op.MAX_POOL2D: lambda node: bool(node.attrs.get("ceil_mode", False)),
    Op.AVG_POOL2D: lambda node: bool(node.attrs.get("ceil_mode", False)),
}
