"""Keep the artifact's source graph on the weights the lowered graph stores, so each weight is stored once.

The artifact shares constants by name between the lowered graph and the source graph (kept for ONNX export).
Lowering may replace a weight under its own name: mixed precision stores it in bfloat16/float16, matmul
padding stores it padded with zeros. The source graph then reads the stored array and recovers its own view
of it: a SLICE back to the original shape (padding adds zeros only after each axis) and a CAST back to the
original dtype (the weight rounded once, which is what the compiled model computes with).
"""

from __future__ import annotations

from aotc.errors import VerifyError
from aotc.ir.builder import Builder
from aotc.ir.dtypes import dtype_of
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.types import Value
from aotc.ir.verify import graph_ctx


def rebase_source(source: Graph, lowered: Graph) -> Graph:
    """``source`` reading, for every constant name both graphs hold, the array ``lowered`` stores."""
    changed = {
        name
        for name, arr in source.constants.items()
        if name in lowered.constants
        and (lowered.constants[name].dtype != arr.dtype or lowered.constants[name].shape != arr.shape)
    }
    if not changed:
        return source
    b = Builder(graph_ctx(source), next_id=source.max_value_id() + 1)
    remap: dict[int, Value] = {v.id: v for v in source.inputs}
    constants = dict(source.constants)
    for node in source.nodes:
        b.loc = node.loc
        name = node.attrs.get("name") if node.op is Op.CONSTANT else None
        if name in changed:
            stored = lowered.constants[name]
            shape = tuple(node.attrs["shape"])
            if stored.ndim != len(shape) or any(s < d for s, d in zip(stored.shape, shape)):
                raise VerifyError(f"constant {name!r}: stored shape {stored.shape} does not contain {shape}")
            constants[name] = stored
            v = b.op(Op.CONSTANT, name=name, shape=tuple(stored.shape), dtype=dtype_of(stored.dtype))
            if tuple(stored.shape) != shape:
                v = b.op(Op.SLICE, v, starts=(0,) * len(shape), stops=shape, steps=(1,) * len(shape))
            remap[node.outputs[0].id] = b.cast(v, node.attrs["dtype"])
            continue
        inputs = tuple(remap[v.id] for v in node.inputs)
        same = all(a is c for a, c in zip(inputs, node.inputs))
        b.nodes.append(node if same else node.replace(inputs=inputs))
        for o in node.outputs:
            remap[o.id] = o
    outputs = tuple(remap[o.id] for o in source.outputs)
    return source.replace(nodes=tuple(b.nodes), outputs=outputs, constants=constants)
