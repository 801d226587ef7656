"""High-level graphs over dynamic dims, built with the IR Builder, for the ONNX export tests.

Each case names its graph, two bindings of its symbols (the exported file runs once per binding) and how to
make inputs for a binding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from aotc.ir import Builder, DType, Graph, Op, Symbol, TensorType, Value, sym, verify
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic_values import evaluate

F32, F16, I32, I64, BOOL = DType.float32, DType.float16, DType.int32, DType.int64, DType.bool


@dataclass
class Case:
    name: str
    graph: Graph
    envs: tuple[dict[str, int], dict[str, int]]
    # per input name: (low, high) for ints (gather indices must stay in range), ignored for floats
    int_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)

    def feeds(self, env: Mapping[str, int], seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        out = []
        for name, v in zip(self.graph.input_names, self.graph.inputs):
            shape = tuple(evaluate(d, env) for d in v.type.shape)
            dt = v.type.dtype
            if dt is BOOL:
                out.append(rng.random(shape) < 0.5)
            elif dt.is_int:
                lo, hi = self.int_ranges.get(name, (-20, 20))
                out.append(rng.integers(lo, hi, size=shape).astype(dt.np))
            else:
                out.append(rng.standard_normal(shape).astype(dt.np))
        return out


class Kit:
    def __init__(self, **ranges: tuple[int, int]) -> None:
        self.symbols = tuple(Symbol(n, lo, hi) for n, (lo, hi) in ranges.items())
        self.b = Builder(ShapeCtx(dict(ranges)))
        self.inputs: list[Value] = []
        self.names: list[str] = []
        self.constants: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(1)

    def input(self, name: str, shape: tuple, dtype: DType = F32) -> Value:
        v = self.b.new_value(TensorType(dtype, shape))
        self.inputs.append(v)
        self.names.append(name)
        return v

    def weight(self, name: str, shape: tuple, scale: float = 0.3, dtype: DType = F32) -> Value:
        self.constants[name] = (self.rng.standard_normal(shape) * scale).astype(dtype.np)
        return self.b.op(Op.CONSTANT, name=name, shape=shape, dtype=dtype)

    def op(self, op: Op, *xs: Value, **attrs: object) -> Value:
        return self.b.op(op, *xs, **attrs)

    def graph(self, name: str, outputs: Mapping[str, Value]) -> Graph:
        tree = {"dict": [[k, i] for i, k in enumerate(outputs)]}
        g = Graph(
            tuple(self.inputs),
            tuple(self.names),
            tuple(self.b.nodes),
            tuple(outputs.values()),
            tree,
            self.symbols,
            (),
            self.constants,
            name,
        )
        verify(g)
        return g


def mlp_block() -> Case:
    k = Kit(batch=(1, 8), seq=(1, 64))
    x = k.input("x", (sym("batch"), sym("seq"), 16))
    h = k.op(Op.LAYER_NORM, x, k.weight("ln.weight", (16,)), k.weight("ln.bias", (16,)), ndim=1, eps=1e-5)
    h = k.op(
        Op.GELU, k.op(Op.LINEAR, h, k.weight("fc.weight", (64, 16)), k.weight("fc.bias", (64,))), approximate="none"
    )
    y = k.op(Op.ADD, x, k.op(Op.LINEAR, h, k.weight("proj.weight", (16, 64))))
    return Case("mlp_block", k.graph("mlp", {"y": y}), ({"batch": 2, "seq": 7}, {"batch": 3, "seq": 12}))


def unary_math() -> Case:
    k = Kit(n=(1, 100))
    x = k.input("x", (3, sym("n")))
    pos = k.op(Op.ADD, k.op(Op.ABS, x), k.b.full(1.0, F32))
    outs = {
        op.value: k.op(op, x)
        for op in (Op.EXP, Op.SIN, Op.COS, Op.TANH, Op.ERF, Op.FLOOR, Op.CEIL, Op.ROUND, Op.SIGN, Op.NEG, Op.ABS)
    }
    outs |= {op.value: k.op(op, x) for op in (Op.ACOS, Op.ASIN, Op.ATAN)}
    outs |= {op.value: k.op(op, pos) for op in (Op.LOG, Op.SQRT, Op.RSQRT, Op.RECIPROCAL)}
    outs |= {op.value: k.op(op, x) for op in (Op.RELU, Op.SIGMOID, Op.SILU)}
    outs["gelu_tanh"] = k.op(Op.GELU, x, approximate="tanh")
    outs["isnan"] = k.op(Op.ISNAN, k.op(Op.LOG, x))
    outs["isinf"] = k.op(Op.ISINF, k.op(Op.DIV, x, k.op(Op.FLOOR, x)))
    return Case("unary_math", k.graph("unary", outs), ({"n": 5}, {"n": 33}))


def binary_logic() -> Case:
    k = Kit(n=(1, 50))
    a = k.input("a", (4, sym("n")))
    b = k.input("b", (1, sym("n")))
    c = k.input("c", (4, 1), BOOL)
    pos_b = k.op(Op.ADD, k.op(Op.ABS, b), k.b.full(0.5, F32))
    outs = {op.value: k.op(op, a, b) for op in (Op.ADD, Op.SUB, Op.MUL, Op.MAXIMUM, Op.MINIMUM)}
    outs |= {op.value: k.op(op, a, pos_b) for op in (Op.DIV, Op.MOD, Op.FMOD)}
    outs["pow"] = k.op(Op.POW, k.op(Op.ABS, a), b)
    cmp = {op.value: k.op(op, a, b) for op in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)}
    outs |= cmp
    outs["and"] = k.op(Op.AND, cmp["lt"], c)
    outs["or"] = k.op(Op.OR, cmp["gt"], c)
    outs["xor"] = k.op(Op.XOR, cmp["ge"], c)
    outs["not"] = k.op(Op.NOT, c)
    outs["where"] = k.op(Op.WHERE, c, a, b)
    outs["cast_i32"] = k.op(Op.CAST, k.op(Op.MUL, a, k.b.full(10.0, F32)), dtype=I32)
    outs["cast_f16"] = k.op(Op.CAST, a, dtype=F16)
    outs["cast_bool"] = k.op(Op.CAST, k.op(Op.FLOOR, a), dtype=BOOL)
    return Case("binary_logic", k.graph("binary", outs), ({"n": 3}, {"n": 17}))


def int_ops() -> Case:
    k = Kit(n=(1, 50))
    a = k.input("a", (sym("n"), 3), I64)
    b = k.input("b", (sym("n"), 3), I64)
    nz = k.op(Op.ADD, k.op(Op.MUL, k.op(Op.ABS, b), k.b.full(2, I64)), k.b.full(1, I64))  # odd, never 0
    outs = {
        "add": k.op(Op.ADD, a, b),
        "mul": k.op(Op.MUL, a, b),
        "div": k.op(Op.DIV, a, nz),
        "mod": k.op(Op.MOD, a, nz),
    }
    outs |= {
        "fmod": k.op(Op.FMOD, a, nz),
        "neg": k.op(Op.NEG, a),
        "sign": k.op(Op.SIGN, a),
        "max": k.op(Op.MAXIMUM, a, b),
    }
    outs["i32"] = k.op(Op.CAST, a, dtype=I32)
    # integer bitwise ops: ONNX's Bitwise* (opset 18), where bool tensors take And / Or / Xor / Not
    outs |= {op.value: k.op(op, a, b) for op in (Op.AND, Op.OR, Op.XOR)}
    outs["not"] = k.op(Op.NOT, a)
    outs["xor_i32"] = k.op(Op.XOR, outs["i32"], k.op(Op.CAST, b, dtype=I32))
    outs["not_i32"] = k.op(Op.NOT, outs["i32"])
    outs["f32"] = k.op(Op.CAST, a, dtype=F32)
    outs["sum"] = k.op(Op.REDUCE_SUM, a, axes=(0,), keepdim=False)
    return Case("int_ops", k.graph("ints", outs), ({"n": 4}, {"n": 11}))


def reductions() -> Case:
    k = Kit(n=(1, 40))
    x = k.input("x", (2, sym("n"), 5))
    outs = {}
    for op in (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD, Op.REDUCE_MEAN):
        outs[op.value] = k.op(op, x, axes=(1,), keepdim=False)
        outs[op.value + "_keep"] = k.op(op, x, axes=(0, 2), keepdim=True)
    outs["none"] = k.op(Op.REDUCE_SUM, x, axes=(), keepdim=False)
    outs["argmax"] = k.op(Op.ARGMAX, x, axis=1, keepdim=False)
    outs["argmin"] = k.op(Op.ARGMIN, x, axis=2, keepdim=True)
    return Case("reductions", k.graph("reduce", outs), ({"n": 3}, {"n": 20}))


def layout() -> Case:
    k = Kit(batch=(1, 8), seq=(2, 64))
    bs, s = sym("batch"), sym("seq")
    x = k.input("x", (bs, s, 6))
    idx = k.input("idx", (3,), I64)
    b = k.b
    outs = {"reshape": b.reshape(x, (bs * s, 6)), "split_heads": b.reshape(x, (bs, s, 2, 3))}
    outs["permute"] = b.permute(x, (2, 0, 1))
    outs["broadcast"] = k.op(Op.BROADCAST, b.reshape(x, (bs, 1, s, 6)), shape=(bs, 4, s, 6))
    outs["slice"] = k.op(Op.SLICE, x, starts=(0, 1, 0), stops=(bs, s, 6), steps=(1, 1, 2))
    outs["slice_tail"] = k.op(Op.SLICE, x, starts=(0, s - 2, 1), stops=(bs, s, 5), steps=(1, 1, 3))
    outs["pad"] = k.op(Op.PAD, x, pads=(0, 0, 1, 2, 3, 0), value=-1.5)
    outs["concat"] = k.op(Op.CONCAT, x, k.op(Op.NEG, x), axis=1)
    outs["flip"] = k.op(Op.FLIP, x, axes=(1, 2))
    outs["gather"] = k.op(Op.GATHER, x, idx, axis=2, negative_indices=True)  # exported as ONNX Gather, which wraps
    rows = b.permute(x, (2, 0, 1))  # (6, batch, seq): idx's values are valid row numbers
    first3 = k.op(Op.SLICE, rows, starts=(0, 0, 0), stops=(3, bs, s), steps=(1, 1, 1))
    outs["scatter_add"] = k.op(Op.SCATTER, rows, b.reshape(idx, (3, 1)), first3, reduction="add")
    outs["iota"] = k.op(Op.IOTA, shape=(bs, s), axis=1, dtype=I64)
    outs["iota_f"] = k.op(Op.IOTA, shape=(s, 2), axis=0, dtype=F32)
    outs["full_sym"] = b.full(s * 2 + 1, F32, (bs, 2))
    outs["tril"] = k.op(Op.TRIL, x, k=1)
    outs["triu"] = k.op(Op.TRIU, x, k=-1)
    return Case("layout", k.graph("layout", outs), ({"batch": 2, "seq": 5}, {"batch": 1, "seq": 19}), {"idx": (-6, 6)})


def conv_net() -> Case:
    k = Kit(n=(1, 4), h=(8, 40), w=(8, 40))
    x = k.input("img", (sym("n"), 3, sym("h"), sym("w")))
    y = k.op(
        Op.CONV2D,
        x,
        k.weight("c1.weight", (8, 3, 3, 3)),
        k.weight("c1.bias", (8,)),
        strides=(1, 1),
        pads=(1, 1, 1, 1),
        dilations=(1, 1),
        groups=1,
    )
    y = k.op(
        Op.BATCH_NORM,
        y,
        k.weight("bn.mean", (8,)),
        k.b.op(Op.ABS, k.weight("bn.var", (8,))),
        k.weight("bn.w", (8,)),
        k.weight("bn.b", (8,)),
        eps=1e-3,
    )
    y = k.op(Op.RELU, y)
    p = k.op(Op.MAX_POOL2D, y, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    a = k.op(Op.AVG_POOL2D, y, kernel=(2, 3), strides=(2, 1), pads=(1, 0, 1, 1), count_include_pad=False)
    g = k.op(
        Op.CONV, p, k.weight("c2.weight", (4, 4, 3, 3)), strides=(1, 2), pads=(2, 2, 0, 1), dilations=(2, 1), groups=2
    )
    bn = k.op(Op.BATCH_NORM, g, k.weight("bn2.mean", (4,)), k.b.op(Op.ABS, k.weight("bn2.var", (4,))), eps=1e-5)
    gap = k.op(Op.REDUCE_MEAN, bn, axes=(2, 3), keepdim=False)
    return Case(
        "conv_net",
        k.graph("cnn", {"pool": p, "avg": a, "conv": bn, "gap": gap}),
        ({"n": 1, "h": 9, "w": 12}, {"n": 2, "h": 16, "w": 11}),
    )


def attention() -> Case:
    k = Kit(batch=(1, 4), seq=(1, 32))
    bs, s = sym("batch"), sym("seq")
    x = k.input("x", (bs, s, 8))
    ids = k.input("ids", (bs, s), I64)
    keep = k.input("keep", (bs, 1, 1, s), BOOL)
    e = k.op(Op.EMBEDDING, k.weight("emb", (10, 8)), ids)
    h = k.op(Op.ADD, x, e)
    q = k.b.permute(k.b.reshape(h, (bs, s, 2, 4)), (0, 2, 1, 3))
    causal = k.op(Op.SDPA, q, q, q, is_causal=True, scale=None)
    first = k.op(Op.EQ, k.op(Op.IOTA, shape=(1, 1, 1, s), axis=3, dtype=I64), k.b.full(0, I64))
    keep = k.op(Op.OR, keep, first)  # every query sees at least one key
    masked = k.op(Op.SDPA, q, q, q, keep, is_causal=False, scale=0.3)
    bias = k.op(Op.MUL, k.op(Op.CAST, k.op(Op.NOT, keep), dtype=F32), k.b.full(-1e4, F32))
    additive = k.op(Op.SDPA, q, q, q, bias, is_causal=False, scale=None)
    outs = {"causal": causal, "masked": masked, "additive": additive}
    outs["softmax"] = k.op(Op.SOFTMAX, h, axis=1)
    outs["log_softmax"] = k.op(Op.LOG_SOFTMAX, h, axis=-1)
    outs["rms"] = k.op(Op.RMS_NORM, h, k.weight("rms.w", (8,)), ndim=1, eps=1e-6)
    outs["ln2"] = k.op(Op.LAYER_NORM, h, ndim=2, eps=1e-5)
    return Case("attention", k.graph("attn", outs), ({"batch": 2, "seq": 5}, {"batch": 1, "seq": 13}), {"ids": (0, 10)})


def matmuls() -> Case:
    k = Kit(m=(1, 16))
    m = sym("m")
    a = k.input("a", (2, 1, m, 6))
    b = k.input("b", (3, 6, 5))
    c = k.input("c", (m, 6))
    outs = {"batched": k.op(Op.MATMUL, a, b)}
    outs["gemm"] = k.op(Op.LINEAR, c, k.weight("l.weight", (4, 6)), k.weight("l.bias", (4,)))
    outs["gemm_nobias"] = k.op(Op.LINEAR, c, k.weight("l2.weight", (3, 6)))
    outs["mean_dyn"] = k.op(Op.REDUCE_MEAN, c, axes=(0,), keepdim=True)
    return Case("matmuls", k.graph("mm", outs), ({"m": 1}, {"m": 9}))


def gelu_scalar_consts() -> Case:
    """Scalar math constants and the op-table decompositions with symbolic divisors."""
    k = Kit(n=(2, 30))
    x = k.input("x", (sym("n"),))
    y = k.op(Op.MUL, k.op(Op.GELU, x, approximate="none"), k.b.full(math.pi, F32))
    return Case("gelu_scalar", k.graph("g", {"y": y}), ({"n": 2}, {"n": 29}))


CASES: dict[str, Callable[[], Case]] = {
    f.__name__: f
    for f in (
        mlp_block,
        unary_math,
        binary_logic,
        int_ops,
        reductions,
        layout,
        conv_net,
        attention,
        matmuls,
        gelu_scalar_consts,
    )
}
