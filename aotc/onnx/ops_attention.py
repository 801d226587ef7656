"""ONNX Attention (opsets 23+) -> aotc SDPA, or the op's full semantics written with primitives.

A plain call (optional mask, causal without a cache) becomes SDPA, so kernels see one attention op. Features
SDPA lacks — softcap, sliding windows, a KV cache with an offset-aligned (bottom-right) causal mask, per-batch
``nonpad_kv_seqlen``, the ``qk_matmul_output`` output, ``softmax_precision`` — take the explicit path. Both
follow ONNX in giving a query row that may attend no key an all-zero output.
"""

from __future__ import annotations

import math
from typing import Any

from aotc.errors import ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.types import ShapeDim, Value
from aotc.onnx._common import dtype_from_onnx
from aotc.onnx.node import OnnxNode, Operand
from aotc.onnx.ops_math import float_input, scalar, values
from aotc.onnx.ops_shape import slice_axis

Importer = Any
I64, BOOL = DType.int64, DType.bool


def _heads(imp: Importer, node: OnnxNode, x: Value, heads: int | None, what: str) -> Value:
    """(B, L, H*D) -> (B, H, L, D); 4-D inputs pass through."""
    if x.type.rank == 4:
        return x
    if x.type.rank != 3 or not heads:
        raise ShapeError(f"{node.label}: 3-D {what} needs the num_heads attribute, got {x.type}")
    bsz, length, hidden = x.type.shape
    if not isinstance(hidden, int) or hidden % heads:
        raise ShapeError(f"{node.label}: {what} hidden size {hidden} is not divisible by {heads} heads")
    return imp.b.permute(imp.b.reshape(x, (bsz, length, heads, hidden // heads)), (0, 2, 1, 3))


def _repeat_heads(imp: Importer, node: OnnxNode, k: Value, hq: ShapeDim) -> Value:
    """Grouped-query attention: each KV head serves hq/hk query heads, interleaved [h0, h0, h1, h1, ...]."""
    bsz, hk, length, d = k.type.shape
    if imp.ctx.known_equal(hk, hq):
        return k
    if not isinstance(hk, int) or not isinstance(hq, int) or hq % hk:
        raise ShapeError(f"{node.label}: {hq} query heads can't share {hk} key/value heads")
    y = imp.b.op(Op.BROADCAST, imp.b.reshape(k, (bsz, hk, 1, length, d)), shape=(bsz, hk, hq // hk, length, d))
    return imp.b.reshape(y, (bsz, hq, length, d))


def _merge_heads(imp: Importer, y: Value) -> Value:
    bsz, h, length, dv = y.type.shape
    return imp.b.reshape(imp.b.permute(y, (0, 2, 1, 3)), (bsz, length, h * dv))


def convert_attention(imp: Importer, node: OnnxNode) -> list[Operand]:
    q0, k0, v0 = values(imp, node, 0, 1, 2)
    float_input(node, q0)
    q = _heads(imp, node, q0, node.attr("q_num_heads"), "Q")
    k = _heads(imp, node, k0, node.attr("kv_num_heads"), "K")
    v = _heads(imp, node, v0, node.attr("kv_num_heads"), "V")
    past_k, past_v, nonpad = node.input(4), node.input(5), node.input(6)
    if (past_k is None) != (past_v is None):
        raise ShapeError(f"{node.label}: past_key and past_value come together")
    if past_k is not None and nonpad is not None:
        raise ShapeError(f"{node.label}: nonpad_kv_seqlen can't be combined with a past key/value cache")
    past_len: ShapeDim = 0
    if past_k is not None:
        pk = imp.value(past_k, k.type.dtype)
        past_len = pk.type.shape[2]
        k = imp.b.op(Op.CONCAT, pk, k, axis=2)
        v = imp.b.op(Op.CONCAT, imp.value(past_v, v.type.dtype), v, axis=2)
    present = [k, v]
    scale = node.attr("scale")
    if scale is None:
        d = q.type.shape[-1]
        if not isinstance(d, int):
            raise node.fail("a dynamic head size needs the scale attribute")
        scale = 1.0 / math.sqrt(d)
    mask = None
    if node.input(3) is not None:
        m = node.inputs[3]
        is_bool = (isinstance(m, Value) and m.type.dtype is BOOL) or (not isinstance(m, Value) and m.dtype == bool)
        mask = imp.value(m, BOOL if is_bool else q.type.dtype, what=f"{node.label} attn_mask")
    causal = bool(node.attr("is_causal", 0))
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    precision = node.attr("softmax_precision")
    plain = (
        not node.attr("softcap", 0.0)
        and not node.wants(3)
        and left < 0
        and right < 0
        and nonpad is None
        and (not causal or past_k is None)
        and precision in (None, 1, 11)
        and (mask is None or imp.ctx.known_equal(mask.type.shape[-1], k.type.shape[2]))
    )
    hq = q.type.shape[1]
    kr, vr = _repeat_heads(imp, node, k, hq), _repeat_heads(imp, node, v, hq)
    if plain:
        y = imp.b.op(Op.SDPA, q, kr, vr, *([mask] if mask is not None else []), is_causal=causal, scale=float(scale))
        if mask is not None:
            y = imp.b.op(Op.WHERE, _rows_masked(imp, _bias(imp, mask, q.type.dtype)), scalar(imp, 0.0, y), y)
        qk = None
    else:
        offset = _offset(imp, node, nonpad, past_len, q.type.shape[2])
        y, qk = _explicit(imp, node, q, kr, vr, mask, causal, left, right, offset, nonpad, float(scale), precision)
    if q0.type.rank == 3:
        y = _merge_heads(imp, y)
    outs: list[Operand] = [y]
    for i, extra in ((1, present[0]), (2, present[1]), (3, qk)):
        if node.wants(i):
            outs += [None] * (i - len(outs)) + [extra]
    return outs


def _offset(imp: Importer, node: OnnxNode, nonpad: Operand | None, past_len: ShapeDim, lq: ShapeDim) -> Value:
    """How many valid keys precede the query block: per batch (B, 1, 1, 1) with nonpad_kv_seqlen, else a scalar."""
    if nonpad is None:
        return imp.full(past_len, I64)
    n = imp.b.cast(imp.value(nonpad, I64, what=f"{node.label} nonpad_kv_seqlen"), I64)
    n = imp.b.reshape(n, (n.type.shape[0], 1, 1, 1))
    return imp.b.op(Op.SUB, n, imp.full(lq, I64))


def _bias(imp: Importer, mask: Value, dt: DType) -> Value:
    """An additive mask: a bool mask's False becomes -inf."""
    if mask.type.dtype is not BOOL:
        return mask
    return imp.b.op(Op.WHERE, mask, imp.full(0.0, dt), imp.full(-math.inf, dt))


def _rows_masked(imp: Importer, bias: Value) -> Value:
    """True where a query row's bias is -inf everywhere (it may attend no key)."""
    m = imp.b.op(Op.REDUCE_MAX, bias, axes=(bias.type.rank - 1,), keepdim=True)
    return imp.b.op(Op.EQ, m, imp.full(-math.inf, bias.type.dtype))


def _explicit(
    imp: Importer,
    node: OnnxNode,
    q: Value,
    k: Value,
    v: Value,
    mask: Value | None,
    causal: bool,
    left: int,
    right: int,
    offset: Value,
    nonpad: Operand | None,
    scale: float,
    precision: int | None,
) -> tuple[Value, Value]:
    b, dt = imp.b, q.type.dtype
    lq, lk = q.type.shape[2], k.type.shape[2]
    # ONNX scales Q and K by sqrt(scale) each before the matmul (it keeps half-precision scores in range)
    root = imp.full(math.sqrt(scale), dt)
    s = b.op(Op.MATMUL, b.op(Op.MUL, q, root), b.permute(b.op(Op.MUL, k, root), (0, 1, 3, 2)))
    cap = float(node.attr("softcap", 0.0))
    if cap > 0:
        s = b.op(Op.MUL, b.op(Op.TANH, b.op(Op.DIV, s, imp.full(cap, dt))), imp.full(cap, dt))
    qk = s
    bias = None
    if mask is not None:
        short = lk - mask.type.shape[-1]
        if not imp.ctx.known_equal(short, 0):
            pads = (0, 0) * (mask.type.rank - 1) + (0, short)
            mask = b.op(Op.PAD, mask, pads=pads, value=False if mask.type.dtype is BOOL else -math.inf)
        bias = _bias(imp, mask, dt)
    allowed = _allowed(imp, causal, left, right, offset, nonpad, lq, lk)
    if allowed is not None:
        extra = b.op(Op.WHERE, allowed, imp.full(0.0, dt), imp.full(-math.inf, dt))
        bias = extra if bias is None else b.op(Op.ADD, bias, extra)
    scores = s if bias is None else b.op(Op.ADD, s, bias)
    mode = node.attr("qk_matmul_output_mode", 0)
    if mode == 2:
        qk = scores
    if precision is not None:
        # a precision request: double (11) computes in float32, aotc's widest float
        want = DType.float32 if precision == 11 else dtype_from_onnx(precision, f"{node.label} softmax_precision")
        scores = b.cast(scores, want)
    p = b.op(Op.SOFTMAX, scores, axis=-1)
    if bias is not None:
        p = b.op(Op.WHERE, _rows_masked(imp, bias), scalar(imp, 0.0, p), p)
    if mode == 3:
        qk = p
    return b.op(Op.MATMUL, b.cast(p, dt), v), b.cast(qk, dt)


def _allowed(
    imp: Importer,
    causal: bool,
    left: int,
    right: int,
    offset: Value,
    nonpad: Operand | None,
    lq: ShapeDim,
    lk: ShapeDim,
) -> Value | None:
    """Which (query, key) pairs the causal mask, the sliding window and the padding allow (None: all)."""
    b = imp.b
    if not causal and left < 0 and right < 0 and nonpad is None:
        return None
    i = b.op(Op.IOTA, shape=(lq, 1), axis=0, dtype=I64)
    j = b.op(Op.IOTA, shape=(1, lk), axis=1, dtype=I64)
    pos = b.op(Op.ADD, i, offset)  # the query's absolute position
    diff = b.op(Op.SUB, pos, j)
    conds = []
    if causal:
        conds.append(b.op(Op.GE, diff, imp.full(0, I64)))
    if left >= 0:
        conds.append(b.op(Op.LE, diff, imp.full(left, I64)))
    if right >= 0:
        conds.append(b.op(Op.GE, diff, imp.full(-right, I64)))
    if nonpad is not None:
        n = imp.b.reshape(imp.b.cast(imp.value(nonpad, I64), I64), (offset.type.shape[0], 1, 1, 1))
        conds.append(b.op(Op.LT, j, n))
    out = conds[0]
    for c in conds[1:]:
        out = b.op(Op.AND, out, c)
    return out


def convert_rotary_embedding(imp: Importer, node: OnnxNode) -> list[Operand]:
    """RotaryEmbedding (opset 23): rotate (x1, x2) pairs of each head by the cached cos/sin of its position."""
    (x,) = values(imp, node, 0)
    float_input(node, x)
    b = imp.b
    cos = imp.value(node.inputs[1], x.type.dtype, what=f"{node.label} cos_cache")
    sin = imp.value(node.inputs[2], x.type.dtype, what=f"{node.label} sin_cache")
    if x.type.rank == 4:  # (B, H, S, D) -> (B, S, H, D)
        h = b.permute(x, (0, 2, 1, 3))
    else:
        heads = node.attr("num_heads")
        bsz, length, hidden = x.type.shape
        if not heads or not isinstance(hidden, int) or hidden % heads:
            raise ShapeError(f"{node.label}: 3-D input {x.type} needs num_heads dividing its hidden size")
        h = b.reshape(x, (bsz, length, heads, hidden // heads))
    d = h.type.shape[3]
    rd = node.attr("rotary_embedding_dim", 0) or d
    half = rd // 2
    if node.input(3) is not None:
        pos = b.cast(imp.value(node.inputs[3], I64, what=f"{node.label} position_ids"), I64)
        cos, sin = b.op(Op.GATHER, cos, pos, axis=0), b.op(Op.GATHER, sin, pos, axis=0)
    cos = b.reshape(cos, (*cos.type.shape[:2], 1, half))
    sin = b.reshape(sin, (*sin.type.shape[:2], 1, half))
    last = 3
    if node.attr("interleaved", 0):
        x1, x2 = slice_axis(imp, h, last, 0, rd, 2), slice_axis(imp, h, last, 1, rd, 2)
    else:
        x1, x2 = slice_axis(imp, h, last, 0, half), slice_axis(imp, h, last, half, rd)
    real = b.op(Op.SUB, b.op(Op.MUL, cos, x1), b.op(Op.MUL, sin, x2))
    imag = b.op(Op.ADD, b.op(Op.MUL, sin, x1), b.op(Op.MUL, cos, x2))
    if node.attr("interleaved", 0):
        pair = (*real.type.shape, 1)
        rot = b.op(Op.CONCAT, b.reshape(real, pair), b.reshape(imag, pair), axis=4)
        rot = b.reshape(rot, (*real.type.shape[:3], rd))
    else:
        rot = b.op(Op.CONCAT, real, imag, axis=last)
    if not imp.ctx.known_equal(rd, d):
        rot = b.op(Op.CONCAT, rot, slice_axis(imp, h, last, rd, d), axis=last)
    return [b.permute(rot, (0, 2, 1, 3)) if x.type.rank == 4 else b.reshape(rot, x.type.shape)]
