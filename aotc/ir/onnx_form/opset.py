"""The ONNX aotc writes: its opset and IR version, its element types, and which element types each op that the
emitters may hand a half-precision tensor takes at that opset.

Opset 18 is the first where every reduction takes ``axes`` as an input, and onnxruntime has run it since 1.14;
ops ONNX only gained later (Gelu in 20, Attention and RMSNormalization in 23) are written as decompositions.
The type table is what onnx.defs says at opset 18, written out so that writing a model needs no onnx package;
tests/onnx/test_onnx_form_opset.py checks it against onnx.defs.
"""

from __future__ import annotations

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType

EXPORT_OPSET = 18
# The oldest ONNX IR version that can import opset 18 (onnx.helper.find_min_ir_version_for).
IR_VERSION = 8

# ONNX TensorProto.DataType numbers for the dtypes aotc has.
DTYPE_TO_ONNX: dict[DType, int] = {
    DType.float32: 1,
    DType.int32: 6,
    DType.int64: 7,
    DType.bool: 9,
    DType.float16: 10,
    DType.bfloat16: 16,
}
ONNX_TO_DTYPE: dict[int, DType] = {v: k for k, v in DTYPE_TO_ONNX.items()}

# Metadata keys of the models aotc writes: symbol ranges (so that importing the file again restores them), the
# guards (for reference only: ONNX has no form for them), the weights of a model that takes them as inputs
# (JSON of ONNX input name -> the constant it binds) and the half dtypes a float32 model was widened from.
SYMBOLS_META_KEY = "aotc.symbols"
GUARDS_META_KEY = "aotc.guards"
WEIGHTS_META_KEY = "aotc.weights"
WIDENED_META_KEY = "aotc.widened"

_F, _H, _B, _I32, _I64, _BOOL = DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.int64, DType.bool
_NUMBERS = frozenset({_F, _H, _B, _I32, _I64})
_FLOATS = frozenset({_F, _H, _B})
_LOGIC = frozenset({_BOOL})
_INTS = frozenset({_I32, _I64})

# op type -> the aotc dtypes its first input takes at EXPORT_OPSET
FIRST_INPUT_TYPES: dict[str, frozenset[DType]] = {
    **dict.fromkeys(("Neg", "Abs", "Sign", "Relu", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"), _NUMBERS),
    **dict.fromkeys(("Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Mod", "MatMul"), _NUMBERS),
    **dict.fromkeys(("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean"), _NUMBERS),
    **dict.fromkeys(("Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Erf", "Floor", "Ceil", "IsNaN", "Sigmoid"), _FLOATS),
    **dict.fromkeys(("Sin", "Cos", "Acos", "Asin", "Atan", "Round"), frozenset({_F, _H})),
    "IsInf": frozenset({_F}),
    "Equal": _NUMBERS | _LOGIC,
    **dict.fromkeys(("Not", "And", "Or", "Xor", "Where"), _LOGIC),
    **dict.fromkeys(("BitwiseNot", "BitwiseAnd", "BitwiseOr", "BitwiseXor"), _INTS),
}


def accepts(op_type: str, dtype: DType) -> bool:
    """Whether ``op_type`` at EXPORT_OPSET takes ``dtype`` for its first input."""
    types = FIRST_INPUT_TYPES.get(op_type)
    if types is None:
        raise UnsupportedError(
            f"op type {op_type!r} is not in aotc's table of ONNX input types (aotc/ir/onnx_form/opset.py); "
            f"it knows {sorted(FIRST_INPUT_TYPES)}"
        )
    return dtype in types
