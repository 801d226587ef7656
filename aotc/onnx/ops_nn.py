"""ONNX neural-network ops -> aotc high-level ops: matmul, conv, pooling, normalization, softmax, LRN."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aotc.errors import ShapeError
from aotc.frontend.conv_transpose import conv_transpose_value
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.ops.vision import ceil_extra, pool_length
from aotc.ir.shapes import norm_axis, numel
from aotc.ir.symbolic import floordiv, smax
from aotc.ir.types import ShapeDim, Value
from aotc.onnx.node import OnnxNode, Operand
from aotc.onnx.ops_math import Converter, float_input, scalar, values
from aotc.onnx.ops_shape import slice_axis

Importer = Any
F32 = DType.float32


# -- matmul --------------------------------------------------------------------------------------------------


def _matmul(imp: Importer, node: OnnxNode) -> list[Operand]:
    a, b = values(imp, node, 0, 1)
    if a.type.rank == 0 or b.type.rank == 0:
        raise ShapeError(f"{node.label}: MatMul inputs must have rank >= 1")
    a2 = imp.b.reshape(a, (1, a.type.shape[0])) if a.type.rank == 1 else a
    b2 = imp.b.reshape(b, (b.type.shape[0], 1)) if b.type.rank == 1 else b
    y = imp.b.op(Op.MATMUL, a2, b2)
    shape = y.type.shape
    if a.type.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.type.rank == 1:
        shape = shape[:-1]
    return [imp.b.reshape(y, shape)]


def _gemm(imp: Importer, node: OnnxNode) -> list[Operand]:
    a, w = values(imp, node, 0, 1)
    c = None if node.input(2) is None else imp.value(node.inputs[2], a.type.dtype, what=f"{node.label} C")
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    ta, tb = node.attr("transA", 0), node.attr("transB", 0)
    if a.type.rank != 2 or w.type.rank != 2:
        raise ShapeError(f"{node.label}: Gemm needs 2-D A and B, got {a.type} and {w.type}")
    bias_fits = c is None or (
        beta == 1.0 and c.type.rank == 1 and imp.ctx.known_equal(c.type.shape[0], w.type.shape[0])
    )
    if not ta and tb and alpha == 1.0 and bias_fits:
        return [imp.b.op(Op.LINEAR, a, w, *([c] if c is not None else []))]
    y = imp.b.op(Op.MATMUL, imp.b.permute(a, (1, 0)) if ta else a, imp.b.permute(w, (1, 0)) if tb else w)
    if alpha != 1.0:
        y = imp.b.op(Op.MUL, y, scalar(imp, alpha, y))
    if c is not None:
        if beta != 1.0:
            c = imp.b.op(Op.MUL, c, scalar(imp, beta, c))
        y = imp.b.op(Op.ADD, y, c)
    return [y]


# -- convolution ---------------------------------------------------------------------------------------------


def _spatial_attrs(node: OnnxNode, nsp: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    strides = tuple(node.attr("strides") or (1,) * nsp)
    dil = tuple(node.attr("dilations") or (1,) * nsp)
    if len(strides) != nsp or len(dil) != nsp:
        raise ShapeError(f"{node.label}: strides/dilations need {nsp} entries")
    return strides, dil


def _pads(
    imp: Importer, node: OnnxNode, x: Value, kernel: tuple[int, ...], strides: tuple, dil: tuple
) -> list[ShapeDim]:
    """(lo, hi) per spatial axis from pads / auto_pad; entries may be symbolic for SAME over dynamic dims."""
    nsp = len(kernel)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        p = tuple(node.attr("pads") or (0,) * 2 * nsp)
        if len(p) != 2 * nsp:
            raise ShapeError(f"{node.label}: pads need {2 * nsp} entries")
        return [v for i in range(nsp) for v in (p[i], p[nsp + i])]
    if auto == "VALID":
        return [0] * 2 * nsp
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.fail(f"auto_pad {auto!r} is not supported")
    out: list[ShapeDim] = []
    for i in range(nsp):
        d = x.type.shape[2 + i]
        n_out = floordiv(d + strides[i] - 1, strides[i])
        total = (n_out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - d
        total = total if imp.ctx.bounds(total)[0] >= 0 else smax(total, 0)
        small = floordiv(total, 2)
        out += [small, total - small] if auto == "SAME_UPPER" else [total - small, small]
    return out


def _explicit_pad(imp: Importer, x: Value, pads: list[ShapeDim], value: float) -> Value:
    if all(isinstance(p, int) and p == 0 for p in pads):
        return x
    return imp.b.op(Op.PAD, x, pads=(0, 0, 0, 0, *pads), value=value)


def _conv(imp: Importer, node: OnnxNode) -> list[Operand]:
    x, w = values(imp, node, 0, 1)
    bias = None if node.input(2) is None else imp.value(node.inputs[2], x.type.dtype, what=f"{node.label} bias")
    nsp = x.type.rank - 2
    if nsp < 1 or w.type.rank != x.type.rank:
        raise ShapeError(
            f"{node.label}: Conv needs input (N, C, ...) and a weight of the same rank, got {x.type}, {w.type}"
        )
    kernel = w.type.shape[2:]
    if not all(isinstance(k, int) for k in kernel):
        raise node.fail("the kernel size must be static")
    strides, dil = _spatial_attrs(node, nsp)
    pads = _pads(imp, node, x, kernel, strides, dil)
    if not all(isinstance(p, int) for p in pads):
        x, pads = _explicit_pad(imp, x, pads, 0.0), [0] * 2 * nsp
    attrs = {"strides": strides, "pads": tuple(pads), "dilations": dil, "groups": node.attr("group", 1)}
    if nsp == 2:
        return [imp.b.op(Op.CONV2D, x, w, *([bias] if bias is not None else []), **attrs)]
    y = imp.b.op(Op.CONV, x, w, **attrs)
    if bias is not None:
        y = imp.b.op(Op.ADD, y, imp.b.reshape(bias, (bias.type.shape[0],) + (1,) * nsp))
    return [y]


def _conv_transpose(imp: Importer, node: OnnxNode) -> list[Operand]:
    """Transposed conv = zeros inserted between input elements, padded, then a conv with the flipped kernel."""
    x, w = values(imp, node, 0, 1)
    bias = None if node.input(2) is None else imp.value(node.inputs[2], x.type.dtype, what=f"{node.label} bias")
    nsp = x.type.rank - 2
    kernel = w.type.shape[2:]
    if nsp < 1 or w.type.rank != x.type.rank or not all(isinstance(k, int) for k in w.type.shape):
        raise node.fail("ConvTranspose needs input (N, C, ...) and a static weight of the same rank")
    strides, dil = _spatial_attrs(node, nsp)
    groups = node.attr("group", 1)
    out_pad = tuple(node.attr("output_padding") or (0,) * nsp)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    auto = node.attr("auto_pad", "NOTSET")
    out_shape = node.attr("output_shape")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for i in range(nsp):
            d = x.type.shape[2 + i]
            target = out_shape[-nsp + i] if out_shape is not None else d * strides[i]
            total = strides[i] * (d - 1) + out_pad[i] + spans[i] - target
            small = floordiv(total, 2)
            big = total - small
            lo.append(small if auto == "SAME_UPPER" else big)
            hi.append(big if auto == "SAME_UPPER" else small)
    elif auto == "VALID":
        lo, hi = [0] * nsp, [0] * nsp
    else:
        p = tuple(node.attr("pads") or (0,) * 2 * nsp)
        lo, hi = list(p[:nsp]), list(p[nsp:])
    if not all(isinstance(e, int) for e in lo + hi):
        raise node.fail("ConvTranspose padding must be static")
    return [conv_transpose_value(imp.b, x, w, bias, strides, lo, hi, dil, out_pad, groups)]


# -- pooling -------------------------------------------------------------------------------------------------


def _pool_geometry(imp: Importer, node: OnnxNode, x: Value) -> tuple[tuple, tuple, tuple, list, list, list]:
    """kernel, strides, dilations, pads (lo, hi per axis), ceil-mode extra padding per axis, output dims."""
    nsp = x.type.rank - 2
    kernel = tuple(node.attr("kernel_shape") or ())
    if len(kernel) != nsp:
        raise ShapeError(f"{node.label}: kernel_shape needs {nsp} entries")
    strides, dil = _spatial_attrs(node, nsp)
    pads = _pads(imp, node, x, kernel, strides, dil)
    ceil = bool(node.attr("ceil_mode", 0))
    if ceil and not all(isinstance(p, int) for p in pads):
        raise node.fail("ceil_mode with auto_pad SAME over a dynamic dim is not supported")
    extra, out = [], []
    for i in range(nsp):
        d, lo, hi = x.type.shape[2 + i], pads[2 * i], pads[2 * i + 1]
        span = (kernel[i] - 1) * dil[i] + 1
        n = pool_length(d, span, strides[i], lo, hi, ceil)
        out.append(n)
        extra.append(ceil_extra(n, d, span, strides[i], lo, hi) if ceil else 0)
    return kernel, strides, dil, pads, extra, out


def _windows(imp: Importer, x: Value, kernel: tuple, strides: tuple, dil: tuple, out: list) -> list[Value]:
    """One strided slice of the (already padded) input per kernel offset."""
    nsp = len(kernel)
    wins = []
    for k in np.ndindex(*kernel):
        starts = (0, 0) + tuple(int(k[i]) * dil[i] for i in range(nsp))
        stops = tuple(x.type.shape[:2]) + tuple(starts[2 + i] + (out[i] - 1) * strides[i] + 1 for i in range(nsp))
        wins.append(imp.b.op(Op.SLICE, x, starts=starts, stops=stops, steps=(1, 1, *strides)))
    return wins


def _sum_all(imp: Importer, xs: list[Value], op: Op = Op.ADD) -> Value:
    y = xs[0]
    for v in xs[1:]:
        y = imp.b.op(op, y, v)
    return y


def _full_pads(pads: list, extra: list) -> list:
    return [p + (e if j % 2 else 0) for j, (p, e) in enumerate(zip(pads, [v for e in extra for v in (0, e)]))]


def _whole(x: Value, kernel: tuple, dil: tuple, pads: list) -> bool:
    """Whether aotc's 2-D pool op (static pads of at most half the kernel, no dilation) computes this node."""
    fits = all(isinstance(p, int) and p <= kernel[j // 2] // 2 for j, p in enumerate(pads))
    return x.type.rank == 4 and all(d == 1 for d in dil) and fits


def _ceil(node: OnnxNode) -> dict[str, bool]:
    return {"ceil_mode": True} if node.attr("ceil_mode", 0) else {}


def _max_pool(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    float_input(node, x)
    if node.wants(1):
        raise node.fail("the Indices output of MaxPool is not supported")
    kernel, strides, dil, pads, extra, out = _pool_geometry(imp, node, x)
    if _whole(x, kernel, dil, pads):
        return [imp.b.op(Op.MAX_POOL2D, x, kernel=kernel, strides=strides, pads=tuple(pads), **_ceil(node))]
    xp = _explicit_pad(imp, x, _full_pads(pads, extra), -math.inf)
    return [_sum_all(imp, _windows(imp, xp, kernel, strides, dil, out), Op.MAXIMUM)]


def _avg_pool(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x0,) = values(imp, node, 0)
    float_input(node, x0)
    kernel, strides, dil, pads, extra, out = _pool_geometry(imp, node, x0)
    include = bool(node.attr("count_include_pad", 0))
    if _whole(x0, kernel, dil, pads):
        attrs = {"kernel": kernel, "strides": strides, "pads": tuple(pads), "count_include_pad": include}
        return [imp.b.op(Op.AVG_POOL2D, x0, **attrs, **_ceil(node))]
    x = imp.b.cast(x0, F32)
    total = _sum_all(imp, _windows(imp, _explicit_pad(imp, x, _full_pads(pads, extra), 0.0), kernel, strides, dil, out))
    # the divisor counts real elements, plus explicit padding when count_include_pad (never the ceil-mode extra)
    ones = imp.full(1.0, F32, x.type.shape)
    ones = _explicit_pad(imp, ones, pads, 1.0 if include else 0.0)
    ones = _explicit_pad(imp, ones, _full_pads([0] * len(pads), extra), 0.0)
    count = _sum_all(imp, _windows(imp, ones, kernel, strides, dil, out))
    return [imp.b.cast(imp.b.op(Op.DIV, total, count), x0.type.dtype)]


def _lp_pool(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x0,) = values(imp, node, 0)
    float_input(node, x0)
    p = float(node.attr("p", 2))
    kernel, strides, dil, pads, extra, out = _pool_geometry(imp, node, x0)
    x = imp.b.op(Op.POW, imp.b.op(Op.ABS, imp.b.cast(x0, F32)), imp.full(p, F32))
    s = _sum_all(imp, _windows(imp, _explicit_pad(imp, x, _full_pads(pads, extra), 0.0), kernel, strides, dil, out))
    return [imp.b.cast(imp.b.op(Op.POW, s, imp.full(1.0 / p, F32)), x0.type.dtype)]


def _global_pool(kind: str) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> list[Operand]:
        (x,) = values(imp, node, 0)
        axes = tuple(range(2, x.type.rank))
        if kind == "avg":
            float_input(node, x)
            return [imp.b.op(Op.REDUCE_MEAN, x, axes=axes, keepdim=True)]
        if kind == "max":
            return [imp.b.op(Op.REDUCE_MAX, x, axes=axes, keepdim=True)]
        p = float(node.attr("p", 2))
        xf = imp.b.cast(x, F32)
        s = imp.b.op(Op.REDUCE_SUM, imp.b.op(Op.POW, imp.b.op(Op.ABS, xf), imp.full(p, F32)), axes=axes, keepdim=True)
        return [imp.b.cast(imp.b.op(Op.POW, s, imp.full(1.0 / p, F32)), x.type.dtype)]

    return convert


# -- normalization -------------------------------------------------------------------------------------------


def _batch_norm(imp: Importer, node: OnnxNode) -> list[Operand]:
    x, scale, bias, mean, var = values(imp, node, 0, 1, 2, 3, 4)
    if node.attr("training_mode", 0) or any(node.wants(i) for i in range(1, 5)):
        raise node.fail("BatchNormalization in training mode is not supported")
    if node.opset < 9 and not node.attr("spatial", 1):
        raise node.fail("BatchNormalization with spatial=0 is not supported")
    return [imp.b.op(Op.BATCH_NORM, x, mean, var, scale, bias, eps=float(node.attr("epsilon", 1e-5)))]


def _channel(imp: Importer, p: Value, rank: int) -> Value:
    return imp.b.reshape(p, (p.type.shape[0],) + (1,) * (rank - 2))


def _instance_norm(imp: Importer, node: OnnxNode) -> list[Operand]:
    x, scale, bias = values(imp, node, 0, 1, 2)
    y = imp.b.op(Op.LAYER_NORM, x, ndim=x.type.rank - 2, eps=float(node.attr("epsilon", 1e-5)))
    y = imp.b.op(Op.MUL, y, _channel(imp, scale, x.type.rank))
    return [imp.b.op(Op.ADD, y, _channel(imp, bias, x.type.rank))]


def _norm_param(imp: Importer, node: OnnxNode, p: Value, normalized: tuple) -> Value:
    """A Scale/B input shaped exactly like the normalized dims (ONNX lets it broadcast)."""
    if p.type.shape == normalized:
        return p
    lead = p.type.rank - len(normalized)
    if lead > 0:
        if any(d != 1 for d in p.type.shape[:lead]):
            raise ShapeError(f"{node.label}: scale/bias {p.type} does not broadcast to {normalized}")
        p = imp.b.reshape(p, p.type.shape[lead:])
    return imp.b.op(Op.BROADCAST, p, shape=normalized)


def _layer_norm(imp: Importer, node: OnnxNode) -> list[Operand]:
    present = [i for i in range(3) if node.input(i) is not None]
    xs = values(imp, node, *present)
    x = xs[0]
    float_input(node, x)
    axis = norm_axis(node.attr("axis", -1), x.type.rank)
    eps = float(node.attr("epsilon", 1e-5))
    normalized = x.type.shape[axis:]
    params = [_norm_param(imp, node, p, normalized) for p in xs[1:]]
    if 2 in present and 1 not in present:
        raise node.fail("a bias without a scale is not supported")
    outs: list[Operand] = [imp.b.op(Op.LAYER_NORM, x, *params, ndim=x.type.rank - axis, eps=eps)]
    if node.wants(1) or node.wants(2):
        axes = tuple(range(axis, x.type.rank))
        xf = imp.b.cast(x, F32)
        mean = imp.b.op(Op.REDUCE_MEAN, xf, axes=axes, keepdim=True)
        c = imp.b.op(Op.SUB, xf, mean)
        var = imp.b.op(Op.REDUCE_MEAN, imp.b.op(Op.MUL, c, c), axes=axes, keepdim=True)
        outs += [mean, imp.b.op(Op.RSQRT, imp.b.op(Op.ADD, var, imp.full(eps, F32)))]
    return outs


def _rms_norm(imp: Importer, node: OnnxNode) -> list[Operand]:
    x, scale = values(imp, node, 0, 1)
    float_input(node, x)
    axis = norm_axis(node.attr("axis", -1), x.type.rank)
    w = _norm_param(imp, node, scale, x.type.shape[axis:])
    return [imp.b.op(Op.RMS_NORM, x, w, ndim=x.type.rank - axis, eps=float(node.attr("epsilon", 1e-5)))]


def _group_norm(imp: Importer, node: OnnxNode) -> list[Operand]:
    x, scale, bias = values(imp, node, 0, 1, 2)
    float_input(node, x)
    g = node.attr("num_groups")
    n, c = x.type.shape[:2]
    if not isinstance(c, int) or c % g:
        raise ShapeError(f"{node.label}: channels {c} must be static and divisible by num_groups {g}")
    y = imp.b.reshape(x, (n, g, floordiv(numel(x.type.shape[1:]), g)))
    y = imp.b.reshape(imp.b.op(Op.LAYER_NORM, y, ndim=1, eps=float(node.attr("epsilon", 1e-5))), x.type.shape)
    if scale.type.shape[0] != c:  # opset 18: one scale/bias per group
        scale = imp.b.reshape(imp.b.op(Op.BROADCAST, imp.b.reshape(scale, (g, 1)), shape=(g, c // g)), (c,))
        bias = imp.b.reshape(imp.b.op(Op.BROADCAST, imp.b.reshape(bias, (g, 1)), shape=(g, c // g)), (c,))
    y = imp.b.op(Op.MUL, y, _channel(imp, scale, x.type.rank))
    return [imp.b.op(Op.ADD, y, _channel(imp, bias, x.type.rank))]


def _lp_norm(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    axis = norm_axis(node.attr("axis", -1), x.type.rank)
    p = node.attr("p", 2)
    if p == 1:
        n = imp.b.op(Op.REDUCE_SUM, imp.b.op(Op.ABS, x), axes=(axis,), keepdim=True)
    elif p == 2:
        n = imp.b.op(Op.SQRT, imp.b.op(Op.REDUCE_SUM, imp.b.op(Op.MUL, x, x), axes=(axis,), keepdim=True))
    else:
        raise node.fail(f"p={p} is not supported (1 or 2)")
    zero = imp.b.op(Op.EQ, n, scalar(imp, 0, n))
    return [imp.b.op(Op.WHERE, zero, scalar(imp, 0, x), imp.b.op(Op.DIV, x, n))]


def _mvn(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    float_input(node, x)
    axes = tuple(sorted(norm_axis(a, x.type.rank) for a in (node.attr("axes") or (0, 2, 3))))
    mean = imp.b.op(Op.REDUCE_MEAN, x, axes=axes, keepdim=True)
    c = imp.b.op(Op.SUB, x, mean)
    var = imp.b.op(Op.REDUCE_MEAN, imp.b.op(Op.MUL, c, c), axes=axes, keepdim=True)
    std = imp.b.op(Op.ADD, imp.b.op(Op.SQRT, var), scalar(imp, 1e-9, x))
    return [imp.b.op(Op.DIV, c, std)]


def _lrn(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    float_input(node, x)
    size = node.attr("size")
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    lo = (size - 1) // 2
    hi = size - 1 - lo
    xf = imp.b.cast(x, F32)
    sq = imp.b.op(Op.MUL, xf, xf)
    pads = [0] * 2 * x.type.rank
    pads[2], pads[3] = lo, hi
    sqp = imp.b.op(Op.PAD, sq, pads=tuple(pads), value=0.0)
    c = x.type.shape[1]
    total = _sum_all(imp, [slice_axis(imp, sqp, 1, k, k + c) for k in range(size)])
    den = imp.b.op(Op.ADD, imp.full(float(bias), F32), imp.b.op(Op.MUL, total, imp.full(alpha / size, F32)))
    y = imp.b.op(Op.DIV, xf, imp.b.op(Op.POW, den, imp.full(float(beta), F32)))
    return [imp.b.cast(y, x.type.dtype)]


# -- softmax family --------------------------------------------------------------------------------------------


def _softmax_like(kind: str) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> list[Operand]:
        (x,) = values(imp, node, 0)
        rank = x.type.rank
        axis = norm_axis(node.attr("axis", -1 if node.opset >= 13 else 1), max(rank, 1))
        if node.opset >= 13 or axis == rank - 1:
            return [_apply_softmax(imp, kind, x, axis)]
        # before opset 13 the input is viewed as 2-D [prod(dims before axis), prod(the rest)]
        shape = x.type.shape
        flat = imp.b.reshape(x, (numel(shape[:axis]), numel(shape[axis:])))
        return [imp.b.reshape(_apply_softmax(imp, kind, flat, 1), shape)]

    return convert


def _apply_softmax(imp: Importer, kind: str, x: Value, axis: int) -> Value:
    if kind == "softmax":
        return imp.b.op(Op.SOFTMAX, x, axis=axis)
    if kind == "log_softmax":
        return imp.b.op(Op.LOG_SOFTMAX, x, axis=axis)
    idx = imp.b.op(Op.ARGMAX, x, axis=axis, keepdim=True)
    pos = imp.b.op(Op.IOTA, shape=x.type.shape, axis=axis, dtype=DType.int64)
    return imp.b.cast(imp.b.op(Op.EQ, pos, idx), x.type.dtype)


CONVERTERS: dict[str, Converter] = {
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _max_pool,
    "AveragePool": _avg_pool,
    "LpPool": _lp_pool,
    "GlobalAveragePool": _global_pool("avg"),
    "GlobalMaxPool": _global_pool("max"),
    "GlobalLpPool": _global_pool("lp"),
    "BatchNormalization": _batch_norm,
    "InstanceNormalization": _instance_norm,
    "LayerNormalization": _layer_norm,
    "RMSNormalization": _rms_norm,
    "GroupNormalization": _group_norm,
    "LpNormalization": _lp_norm,
    "MeanVarianceNormalization": _mvn,
    "LRN": _lrn,
    "Softmax": _softmax_like("softmax"),
    "LogSoftmax": _softmax_like("log_softmax"),
    "Hardmax": _softmax_like("hardmax"),
}
