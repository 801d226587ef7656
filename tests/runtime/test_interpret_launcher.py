"""The numpy-only Triton interpreter launcher: hand-written kernels against numpy."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("triton")

from aotc.errors import AotcError, ExecError
from aotc.ir.schedule import Kernel
from aotc.runtime.backends.triton_interp import launch, launch_source, load_function
from tests.kernel_fixtures import ADD, HEADER, flag, hand_kernel, ptr, size

ROW_SUM = (
    HEADER
    + """
@triton.jit
def _square(x):
    return x * x


@triton.jit
def row_sumsq(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(_square(x), axis=0))
"""
)

GATHER = (
    HEADER
    + """
@triton.jit
def gather_rows(table_ptr, ids_ptr, out_ptr, flag_ptr, rows, dim, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    idx = tl.load(ids_ptr + i)
    tl.store(flag_ptr, 1, mask=(idx < 0) | (idx >= rows))
    offs = tl.arange(0, BLOCK)
    # The interpreter mis-broadcasts a scalar int1 into an int1 block ("mask has unsupported
    # dtype"), so the id is broadcast before it is compared.
    ids = idx + offs * 0
    m = (offs < dim) & (ids >= 0) & (ids < rows)
    v = tl.load(table_ptr + ids * dim + offs, mask=m, other=0.0)
    tl.store(out_ptr + i * dim + offs, v, mask=offs < dim)
"""
)

WIDE = (
    HEADER
    + """
@triton.jit
def wide_index(out_ptr, big):
    # big * 4 overflows int32 but not int64: the size arg must keep its declared type.
    tl.store(out_ptr, (big * 4) // 8)
"""
)

MASKED_COPY = (
    HEADER
    + """
@triton.jit
def masked_copy(x_ptr, keep_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inb = offs < n
    keep = tl.load(keep_ptr + offs, mask=inb, other=0) != 0
    x = tl.load(x_ptr + offs, mask=inb)
    tl.store(out_ptr + offs, tl.where(keep, x, tl.zeros_like(x)), mask=inb)
"""
)

# A loop bound from a runtime size, as attention's and matmul's K loops take it: the interpreter turns the scalar
# tl.cdiv(...) into an int through the tensor's __index__.
CHUNKED_SUM = (
    HEADER
    + """
@triton.jit
def chunked_sum(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for k in range(tl.cdiv(cols, BLOCK)):
        acc += tl.load(x_ptr + row * cols + k * BLOCK + offs, mask=k * BLOCK + offs < cols, other=0.0)
    for k in tl.range(0, tl.cdiv(cols, BLOCK)):
        acc += tl.load(x_ptr + row * cols + k * BLOCK + offs, mask=k * BLOCK + offs < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))
"""
)


def test_vector_add_with_a_tail_mask() -> None:
    n = 1000  # 4 programs of 256; the last one is partly masked
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    out = np.full(n + 8, 7.0, np.float32)  # writes past n would show in the padding
    launch_source(ADD, "add_kernel", (4,), [x, y, out[:n], n], ["*fp32", "*fp32", "*fp32", "i32"], {"BLOCK": 256})
    np.testing.assert_array_equal(out[:n], x + y)
    np.testing.assert_array_equal(out[n:], 7.0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_row_reduction_through_a_jit_helper(dtype: str) -> None:
    from aotc.ir.dtypes import dtype_of

    npd = dtype_of(dtype).np
    x = np.random.default_rng(2).standard_normal((5, 37)).astype(npd)
    out = np.zeros(5, np.float32)
    ptr = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16"}[dtype]
    launch_source(ROW_SUM, "row_sumsq", (5,), [x, out, 37], [ptr, "*fp32", "i32"], {"BLOCK": 64})
    np.testing.assert_allclose(out, (x.astype(np.float32) ** 2).sum(axis=1), rtol=1e-5)


def test_a_loop_bound_from_a_runtime_size() -> None:
    """Triton 3.6's interpreter made the bound int(data) of a one-element array, which numpy >= 2.4 refuses: every
    kernel with such a loop failed ("only 0-dimensional arrays can be converted to Python scalars")."""
    import triton.language as tl

    index_before = tl.tensor.__dict__.get("__index__")
    x = np.random.default_rng(3).standard_normal((3, 100)).astype(np.float32)
    out = np.zeros(3, np.float32)
    launch_source(CHUNKED_SUM, "chunked_sum", (3,), [x, out, 100], ["*fp32", "*fp32", "i32"], {"BLOCK": 32})
    np.testing.assert_allclose(out, 2 * x.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert tl.tensor.__dict__.get("__index__") is index_before  # the launch leaves triton as it found it


def _gather_kernel() -> Kernel:
    args = [ptr("table_ptr", 0), ptr("ids_ptr", 1, "*i64"), ptr("out_ptr", 2), flag("flag_ptr")]
    return hand_kernel(
        "gather_rows", GATHER, [*args, size("rows", 10, "i64"), size("dim", 6)], (4, 1, 1), [("BLOCK", 8)]
    )


def test_int64_index_load_and_a_bounds_flag() -> None:
    table = np.arange(60, dtype=np.float32).reshape(10, 6)
    out = np.zeros((4, 6), np.float32)
    flag = np.zeros(1, np.int32)
    ids = np.array([9, 0, 3, 9], np.int64)
    launch(_gather_kernel(), (4,), [table, ids, out, flag, 10, 6])
    np.testing.assert_array_equal(out, table[ids])
    assert flag[0] == 0
    bad = np.array([2, 10, -1, 0], np.int64)
    launch(_gather_kernel(), (4,), [table, bad, out, flag, 10, 6])
    assert flag[0] == 1
    np.testing.assert_array_equal(out[[0, 3]], table[[2, 0]])
    np.testing.assert_array_equal(out[[1, 2]], 0.0)  # masked: nothing read out of bounds


def test_int64_size_args_keep_their_type() -> None:
    out = np.zeros(1, np.int64)
    big = 2**30 + 6
    launch_source(WIDE, "wide_index", (1,), [out, big], ["*i64", "i64"])
    assert out[0] == big * 4 // 8


def test_bool_arrays() -> None:
    x = np.arange(1, 11, dtype=np.float32)
    keep = np.arange(10) % 3 == 0
    out = np.full(10, -1.0, np.float32)
    launch_source(MASKED_COPY, "masked_copy", (1,), [x, keep, out, 10], ["*fp32", "*i1", "*fp32", "i32"], {"BLOCK": 16})
    np.testing.assert_array_equal(out, np.where(keep, x, 0.0))


def test_bad_arguments_are_aotc_errors() -> None:
    x = np.zeros(4, np.float32)
    types = ["*fp32", "*fp32", "*fp32", "i32"]
    with pytest.raises(AotcError, match=r"argument y_ptr is \*fp32, got an array of dtype float16"):
        launch_source(ADD, "add_kernel", (1,), [x, x.astype(np.float16), x, 4], types, {"BLOCK": 16})
    with pytest.raises(AotcError, match="C-contiguous"):
        launch_source(ADD, "add_kernel", (1,), [x, np.zeros(8, np.float32)[::2], x, 4], types, {"BLOCK": 16})
    with pytest.raises(AotcError, match="does not fit i32"):
        launch_source(ADD, "add_kernel", (1,), [x, x, x, 2**31], types, {"BLOCK": 16})
    with pytest.raises(
        AotcError,
        match=r"takes \(x_ptr, y_ptr, out_ptr, n, BLOCK\) but the schedule passes \(x_ptr, y_ptr, out_ptr, BLOCK\)",
    ):
        launch_source(ADD, "add_kernel", (1,), [x, x, x], types[:3], {"BLOCK": 16})
    gather = _gather_kernel()
    with pytest.raises(AotcError, match="takes 6 arguments, got 5"):
        launch(gather, (1,), [x, x, x, x, 3])
    with pytest.raises(AotcError, match=r"no @triton\.jit function named 'missing'"):
        load_function("missing", ADD)
    with pytest.raises(AotcError, match="does not load: SyntaxError"):
        load_function("broken", HEADER + "def broken(:\n")


def test_a_failing_kernel_is_an_exec_error() -> None:
    src = HEADER + "@triton.jit\ndef bad(x_ptr, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)\n"
    with pytest.raises(ExecError, match="kernel bad failed under the Triton interpreter"):
        launch_source(src, "bad", (1,), [np.zeros(3, np.float32)], ["*fp32"], {"BLOCK": 3})  # not a power of 2


def test_sources_load_once_and_launches_are_thread_safe() -> None:
    assert load_function("add_kernel", ADD) is load_function("add_kernel", ADD)
    n = 300
    results: list[bool] = []

    def work(seed: int) -> None:
        x = np.full(n, float(seed), np.float32)
        out = np.zeros(n, np.float32)
        launch_source(ADD, "add_kernel", (3,), [x, x, out, n], ["*fp32", "*fp32", "*fp32", "i32"], {"BLOCK": 128})
        results.append(bool((out == 2.0 * seed).all()))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 4
