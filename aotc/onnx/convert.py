"""The ONNX op table for import: op type -> converter, gathered from the modules that hold each family."""

from __future__ import annotations

from aotc.onnx import (
    ops_einsum,
    ops_gather,
    ops_layout,
    ops_math,
    ops_nn,
    ops_resize,
    ops_scan,
    ops_scatter,
    ops_shape,
)
from aotc.onnx.ops_attention import convert_attention, convert_rotary_embedding
from aotc.onnx.ops_math import Converter

CONVERTERS: dict[str, Converter] = {
    **ops_math.CONVERTERS,
    **ops_shape.CONVERTERS,
    **ops_layout.CONVERTERS,
    **ops_scan.CONVERTERS,
    **ops_nn.CONVERTERS,
    **ops_gather.CONVERTERS,
    **ops_resize.CONVERTERS,
    **ops_einsum.CONVERTERS,
    **ops_scatter.CONVERTERS,
    "Attention": convert_attention,
    "RotaryEmbedding": convert_rotary_embedding,
}

# Never folded by ONNX's reference implementation even when every input is known: a ConstantOfShape may
# describe a huge tensor better kept as one FULL node.
NO_REFERENCE_FOLD = frozenset({"ConstantOfShape"})

__all__ = ["CONVERTERS", "NO_REFERENCE_FOLD"]
