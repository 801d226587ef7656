"""The IR, the bottom layer (any layer may import it; it imports numpy and aotc.errors only).

The IR: dtypes, symbolic integers, the op table, graphs (and variants: a graph with its launch plan) and their
verifier. Depends on numpy only."""

from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType, dtype_of, promote
from aotc.ir.graph import Graph, Guard, Symbol
from aotc.ir.ops import OPS, Op, OpDef
from aotc.ir.symbolic import SymExpr, sym
from aotc.ir.types import Attrs, Node, TensorType, Value
from aotc.ir.variant import Variant
from aotc.ir.verify import verify

__all__ = [
    "OPS",
    "Attrs",
    "Builder",
    "DType",
    "Graph",
    "Guard",
    "Node",
    "Op",
    "OpDef",
    "SymExpr",
    "Symbol",
    "TensorType",
    "Value",
    "Variant",
    "dtype_of",
    "promote",
    "sym",
    "verify",
]
