"""Mixed precision: contractions in bfloat16/float16 with float32 accumulation, statistics in float32.

The policy is PyTorch autocast's, with the weights stored in the low precision:

- Contractions (matmul, linear, conv, attention) take low-precision inputs and give a low-precision output.
  Their numpy references and kernels accumulate half inputs in float32 and round once, so no extra attr is
  needed on MATMUL for "accumulate in float32".
- Softmax, normalizations, reductions that accumulate (sum, mean, prod) and exp/log/sqrt/rsqrt/pow/reciprocal
  run in float32: a low-precision input is cast up first.
- Every other op runs in its inputs' dtype, promoted as PyTorch does (bf16 + f32 -> f32). A float32 FULL (a
  Python scalar in the model) is weakly typed: it takes the low dtype of its partner when it fits.
- A float32 weight that feeds a contraction or an embedding/gather is stored in the low precision (half the
  bytes); its value is then the weight rounded once. Other readers of it cast it up to float32 at the point
  of use, so a weight read by both a matmul and a residual add is stored once. Weights read only by
  float32 ops (norm scales, hand-added biases) stay float32: rounding them would save little and cost accuracy.
  A weight with values beyond the low dtype's range (fp16 overflows past 65504) stays float32, and so do the
  contractions that read it.
- The model's inputs and outputs keep their dtypes: inputs are cast down by the first contraction that
  reads them, outputs are cast back.

The pass runs on the high-level graph, before decomposition, so the decompositions of softmax and the norms
see their real input dtypes and keep their statistics in float32 (see ``_up`` in aotc/ir/ops/nn.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aotc.errors import UnsupportedError
from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops import OPS, Op, OpKind
from aotc.ir.types import Node, Value
from aotc.ir.verify import graph_ctx

PRECISIONS = ("fp32", "tf32", "tf32x3", "bf16", "fp16")
LOW_DTYPES = {"bf16": DType.bfloat16, "fp16": DType.float16}
F32 = DType.float32

# Contractions: inputs cast to the low dtype.
LOW_OPS = frozenset({Op.MATMUL, Op.LINEAR, Op.CONV, Op.CONV2D, Op.SDPA})
# Statistics and transcendental ops that lose too much in 8 (bf16) or 11 (fp16) mantissa bits.
F32_OPS = frozenset(
    {
        Op.SOFTMAX,
        Op.LOG_SOFTMAX,
        Op.LAYER_NORM,
        Op.RMS_NORM,
        Op.BATCH_NORM,
        Op.REDUCE_SUM,
        Op.REDUCE_PROD,
        Op.REDUCE_MEAN,
        Op.EXP,
        Op.LOG,
        Op.SQRT,
        Op.RSQRT,
        Op.RECIPROCAL,
        Op.POW,
    }
)
# Ops whose float output holds copies of their float input's elements: a stored-low weight stays low through them.
_COPYING = frozenset({Op.GATHER, Op.EMBEDDING})
_MAX_FINITE = {DType.bfloat16: 3.3895313892515355e38, DType.float16: 65504.0}


def check_precision(value: object) -> str:
    """``value`` if it names a precision, else UnsupportedError naming it and the choices."""
    if not isinstance(value, str) or value not in PRECISIONS:
        choices = ", ".join(repr(p) for p in PRECISIONS)
        raise UnsupportedError(f"precision {value!r} is not supported: expected one of {choices}")
    return value


def fits(value: float | np.ndarray, dtype: DType) -> bool:
    """True when ``value`` converts to ``dtype`` without a finite number becoming infinite."""
    arr = np.asarray(value)
    return float(np.max(np.abs(arr[np.isfinite(arr)]), initial=0.0)) <= _MAX_FINITE[dtype]


def convert_precision(graph: Graph, precision: str) -> Graph:
    """The graph with its contractions in ``precision`` ('bf16' or 'fp16'); 'fp32', 'tf32' and 'tf32x3' return it
    as is."""
    low = LOW_DTYPES.get(check_precision(precision))
    if low is None:
        return graph
    return _Converter(graph, low).run()


def mark_tf32(graph: Graph) -> Graph:
    """Float32 MATMUL/CONV nodes get ``allow_tf32=True``: GPU kernels may then use tf32 tensor cores (10-bit
    mantissa products, float32 accumulation). The cpu backend's numpy references ignore the attr, so on the cpu
    a tf32 compile computes exactly what a fp32 compile does."""
    nodes = []
    for n in graph.nodes:
        if n.op in (Op.MATMUL, Op.CONV) and n.inputs[0].type.dtype is F32 and not n.attrs.get("allow_tf32", False):
            n = n.replace(attrs=n.attrs.set(allow_tf32=True))
        nodes.append(n)
    return graph.replace(nodes=tuple(nodes))


def mark_tf32x3(graph: Graph) -> Graph:
    """Float32 MATMUL/CONV nodes get ``input_precision="tf32x3"``: GPU kernels then multiply on tensor cores in
    three tf32 products (a*b ~ a_hi*b_hi + a_hi*b_lo + a_lo*b_hi, each operand split into a tf32 head and its
    remainder), close to float32's error at tensor-core speed. As with tf32, the cpu backend ignores the attr."""
    nodes = []
    for n in graph.nodes:
        if n.op in (Op.MATMUL, Op.CONV) and n.inputs[0].type.dtype is F32 and "input_precision" not in n.attrs:
            n = n.replace(attrs=n.attrs.set(input_precision="tf32x3"))
        nodes.append(n)
    return graph.replace(nodes=tuple(nodes))


class _Converter:
    def __init__(self, graph: Graph, low: DType) -> None:
        self.graph = graph
        self.low = low
        self.b = Builder(graph_ctx(graph), next_id=graph.max_value_id() + 1)
        self.constants = dict(graph.constants)
        self.remap: dict[int, Value] = {v.id: v for v in graph.inputs}
        self.producer: dict[int, Node] = {}
        # Values whose dtype is low but whose meaning is a float32 weight rounded once (stored-low weights and
        # views/gathers of them): readers other than contractions cast them up.
        self.lazy: set[int] = set()
        self.upcast: dict[int, Value] = {}
        self.unfit: set[int] = set()
        self.store_low, self.too_big = _classify_weights(graph, low)

    def run(self) -> Graph:
        for node in self.graph.nodes:
            self.b.loc = node.loc
            outs = self._node(node, [self.remap[v.id] for v in node.inputs])
            for old, new in zip(node.outputs, outs):
                self.remap[old.id] = new
        self.b.loc = ""
        outputs = []
        for o in self.graph.outputs:
            v = self.remap[o.id]
            if v.type.dtype is not o.type.dtype:
                v = self.b.cast(v, o.type.dtype)
            outputs.append(v)
        return self.graph.replace(nodes=tuple(self.b.nodes), outputs=tuple(outputs), constants=self.constants)

    def _emit(self, node: Node, inputs: Sequence[Value]) -> tuple[Value, ...]:
        if all(a.type == c.type for a, c in zip(inputs, node.inputs)):
            # Types unchanged: the node's own output types still hold.
            n = node if all(a is c for a, c in zip(inputs, node.inputs)) else node.replace(inputs=tuple(inputs))
            self.b.nodes.append(n)
            outs = n.outputs
        else:
            outs = self.b.emit(node.op, inputs, node.attrs)
        for o in outs:
            self.producer[o.id] = self.b.nodes[-1]
        return outs

    def _node(self, node: Node, ins: list[Value]) -> tuple[Value, ...]:
        op = node.op
        if op is Op.CONSTANT and node.attrs["name"] in self.store_low:
            name = node.attrs["name"]
            arr = self.constants[name]
            if arr.dtype != self.low.np:
                self.constants[name] = np.ascontiguousarray(arr.astype(self.low.np))
            v = self.b.op(Op.CONSTANT, name=name, shape=node.attrs["shape"], dtype=self.low)
            self.lazy.add(v.id)
            return (v,)
        if op is Op.CONSTANT and node.attrs["name"] in self.too_big:
            # A weight beyond the low dtype's range (fp16 tops out at 65504): its contractions stay float32.
            self.unfit.add(node.outputs[0].id)
        floats = [i for i, v in enumerate(ins) if v.type.dtype.is_float]
        if not floats or op is Op.CAST:
            return self._emit(node, [self._resolved(v) if op is Op.CAST else v for v in ins])
        if op in LOW_OPS and not any(v.id in self.unfit for v in ins):
            return self._emit(node, [self._to(v, self.low) if i in floats else v for i, v in enumerate(ins)])
        if op in F32_OPS:
            return self._emit(node, [self._to(v, F32) if i in floats else v for i, v in enumerate(ins)])
        keeps_lazy = OPS[op].kind is OpKind.VIEW or op in _COPYING
        if keeps_lazy and all(v.id in self.lazy for i, v in enumerate(ins) if i in floats):
            outs = self._emit(node, ins)
            self.lazy.update(o.id for o in outs if o.type.dtype is self.low)
            return outs
        outs = self._emit(node, self._promoted(ins, floats))
        if OPS[op].kind is OpKind.VIEW and any(v.id in self.unfit for v in ins):
            self.unfit.update(o.id for o in outs)
        return outs

    def _promoted(self, ins: list[Value], floats: list[int]) -> list[Value]:
        """Float inputs brought to one dtype: the strongly typed inputs' dtype, float32 when they differ or a
        weakly typed scalar does not fit the low dtype."""
        ins = [self._resolved(v) if i in floats else v for i, v in enumerate(ins)]
        strong = {ins[i].type.dtype for i in floats if not self._weak(ins[i])}
        if not strong:
            return ins  # float32 scalars among themselves
        target = strong.pop() if len(strong) == 1 else F32
        if target is self.low and not all(self._weak_fits(ins[i]) for i in floats):
            target = F32
        return [self._to(v, target) if i in floats else v for i, v in enumerate(ins)]

    def _weak(self, v: Value) -> bool:
        n = self.producer.get(v.id)
        return n is not None and n.op is Op.FULL and v.type.dtype is F32

    def _weak_fits(self, v: Value) -> bool:
        if not self._weak(v):
            return True
        value = self.producer[v.id].attrs.get("value", 0.0)
        return isinstance(value, (int, float)) and fits(value, self.low)

    def _resolved(self, v: Value) -> Value:
        """A stored-low weight as the float32 value it stands for (one cast per value, shared by its readers)."""
        if v.id not in self.lazy:
            return v
        if v.id not in self.upcast:
            self.upcast[v.id] = self._cast(v, F32)
        return self.upcast[v.id]

    def _to(self, v: Value, dtype: DType) -> Value:
        if v.type.dtype is dtype:
            return v
        if v.id in self.lazy and dtype is F32:
            return self._resolved(v)
        if self._weak(v) and self._weak_fits(v):
            full = self.producer[v.id]
            out = self.b.op(Op.FULL, **dict(full.attrs.set(dtype=dtype).items()))
            self.producer[out.id] = self.b.nodes[-1]
            return out
        return self._cast(v, dtype)

    def _cast(self, v: Value, dtype: DType) -> Value:
        out = self.b.cast(v, dtype)
        self.producer[out.id] = self.b.nodes[-1]
        return out


def _classify_weights(graph: Graph, low: DType) -> tuple[frozenset[str], frozenset[str]]:
    """Names of the float32 constants read (through views, or as a gather table) by a contraction or a gather:
    those whose values fit ``low`` (to store low), and those that do not."""
    readers: dict[int, list[Node]] = {}
    for n in graph.nodes:
        for v in n.inputs:
            readers.setdefault(v.id, []).append(n)

    def feeds_low(v: Value) -> bool:
        for n in readers.get(v.id, ()):
            if n.op in LOW_OPS or (n.op in _COPYING and n.inputs[0] == v):
                return True
            if OPS[n.op].kind is OpKind.VIEW and n.inputs[0] == v and feeds_low(n.outputs[0]):
                return True
        return False

    names = {
        n.attrs["name"]
        for n in graph.nodes
        if n.op is Op.CONSTANT and n.outputs[0].type.dtype is F32 and feeds_low(n.outputs[0])
    }
    store = frozenset(name for name in names if fits(graph.constants[name], low))
    return store, frozenset(names - store)
