"""Integer pow kernels under the interpreter against the cpu backend, exactly: products wrap modulo 2**bits as
numpy's do, a negative exponent gives 0 except for bases 1 and -1 (the reference's rule), for computed and
for constant exponents and bases."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.ir import DType, Op, TensorType
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check, compile_renamed_for_sm80, in_fresh_process

BASES = [0, 1, -1, 2, -2, 3, -3, 7, 10, 12345, -99991]
EXPONENTS = [0, 1, 2, 3, 5, 17, 30, 31, 62, 63, 1000003, -1, -2, -3]


@pytest.mark.parametrize("dtype", [DType.int32, DType.int64])
def test_every_base_to_every_computed_exponent(dtype: DType) -> None:
    shape = (len(BASES), len(EXPONENTS))
    g = make_graph(
        {"a": TensorType(dtype, (shape[0], 1)), "b": TensorType(dtype, (1, shape[1]))},
        lambda b, x, y: [b.op(Op.POW, x, y)],
    )
    exps = list(EXPONENTS)
    if dtype is DType.int64:
        exps[-4] = 2**40 + 3  # an exponent past 32 bits
    a = np.array(BASES, dtype.np).reshape(-1, 1)
    e = np.array(exps, dtype.np).reshape(1, -1)
    check(g, [a, e])


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 13, 40, -1, -2, -7])
def test_constant_exponent(exponent: int) -> None:
    def body(b, x):
        return [b.op(Op.POW, x, b.full(exponent, DType.int32))]

    g = make_graph({"a": TensorType(DType.int32, (len(BASES),))}, body)
    check(g, [np.array(BASES, np.int32)])


def test_constant_base_to_computed_exponents() -> None:
    def body(b, y):
        return [b.op(Op.POW, b.full(3, DType.int64), y), b.op(Op.POW, b.full(-1, DType.int64), y)]

    g = make_graph({"b": TensorType(DType.int64, (len(EXPONENTS),))}, body)
    check(g, [np.array(EXPONENTS, np.int64)])


def compile_int_pow_kernels() -> None:
    """Computed and constant exponents and a constant base, both widths, compile for sm_80."""
    graphs = []
    for dtype in (DType.int32, DType.int64):

        def body(b, x, y, dtype=dtype):
            return [b.op(Op.POW, x, y), b.op(Op.POW, x, b.full(13, dtype)), b.op(Op.POW, b.full(3, dtype), y)]

        graphs.append((dtype.value, make_graph({"a": TensorType(dtype, (4, 1)), "b": TensorType(dtype, (1, 5))}, body)))
    compile_renamed_for_sm80(graphs)


def test_int_pow_kernels_compile_for_sm80() -> None:
    in_fresh_process("from tests.kernel_layer.test_int_pow import compile_int_pow_kernels\ncompile_int_pow_kernels()")
