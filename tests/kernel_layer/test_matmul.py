"""The matmul template under the Triton interpreter against the cpu backend: the M/N/K table, batch
broadcasting (folded into rows and on grid axis y), symbolic sizes, fused prologue views/casts,
each epilogue (bias, activations, residual, cast) and every float dtype."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from aotc.errors import UnsupportedError
from aotc.ir import DType, Op, Symbol, TensorType
from aotc.ir.schedule import ArgKind
from aotc.ir.symbolic import sym
from aotc.ir.templates import KernelKind
from aotc.ir.tiles import TileConfig, matmul_config
from aotc.kernels.matmul import emit_matmul, matmul_shape, why_not_epilogue, why_not_matmul
from tests.graph_kit import make_graph
from tests.kernel_layer.contraction_graphs import linear_graph, matmul_graph
from tests.kernel_layer.contraction_kit import anchor_of, builder_for, check_kernel, epilogue_of

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16
BIG = TileConfig(64, 64, 64)  # few programs: the interpreter's cost grows with their number


def _emit(graph, config=BIG, **kw):
    node = anchor_of(graph, Op.MATMUL)
    return emit_matmul(builder_for(graph, node), node, epilogue_of(graph, node), config=config, **kw)


# Every value of {1, 17, 64, 1000} appears as M, as N and as K; K=1000 runs 16 BLOCK_K steps with a tail.
@pytest.mark.parametrize("m,n,k", [(1, 64, 1000), (17, 1000, 64), (1000, 17, 1), (64, 1, 17)])
def test_table_float32(m, n, k):
    g = matmul_graph((m, k), (k, n))
    kern = _emit(g, TileConfig(128, 128, 64))
    assert kern.kind is KernelKind.MATMUL
    check_kernel(g, kern)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_16bit_dtypes_with_long_k(dtype):
    g = matmul_graph((17, 1000), (1000, 64), dtype)
    check_kernel(g, _emit(g))


def test_default_config_runs():
    g = matmul_graph((33, 70), (70, 40))
    check_kernel(g, _emit(g, config=None))


@pytest.mark.parametrize("a,b", [((5, 0), (0, 7)), ((0, 3), (3, 4)), ((2, 1, 1), (1, 1, 1))])
def test_empty_and_unit_dims(a, b):
    g = matmul_graph(a, b)  # K = 0 gives zeros; M = 0 launches nothing
    check_kernel(g, _emit(g, config=None))


@pytest.mark.parametrize("dtype", [DType.int32, DType.int64])
def test_int_matmul_wraps_like_numpy(dtype):
    g = matmul_graph((5, 40), (40, 9), dtype)
    kern = _emit(g, config=None)
    assert "tl.dot" not in kern.source
    check_kernel(g, kern)


def test_batched_broadcast_on_grid_y():
    g = matmul_graph((2, 1, 17, 33), (1, 3, 33, 20))
    kern = _emit(g)
    assert kern.grid[1] == 6
    check_kernel(g, kern)


def test_batch_folds_into_rows_when_b_is_shared():
    g = matmul_graph((3, 5, 17), (17, 9))  # a Linear on (batch, seq, d)
    kern = _emit(g, TileConfig(16, 16, 16))
    assert kern.grid[1] == 1 and "program_id(1)" not in kern.source
    check_kernel(g, kern)


def test_folded_rows_read_contiguous_operands_as_plain_offsets():
    """A Linear on (batch, seq, d): the folded row's batch and seq digits merge back, so the a-operand
    load and the store index with offs_m alone (no // or %)."""
    g = matmul_graph((3, 5, 17), (17, 9))
    kern = _emit(g, TileConfig(16, 16, 16))
    lines = kern.source.splitlines()
    assert not any("//" in line or "%" in line for line in lines if "offs_m" in line and "=" in line), lines
    assert any("tl.load(a_ptr + (offs_m[:, None] * 17 + offs_k" in line for line in lines), lines
    assert any("tl.store(out_ptr + (offs_m[:, None] * 9 + offs_n" in line for line in lines), lines
    check_kernel(g, kern)


@pytest.mark.parametrize("a", [(2, 3, 1, 4), (4, 1, 16)])
def test_folded_rows_of_one_row_per_batch_entry(a):
    """M = 1 under folded batches (ONNX Resize as a matmul): stores keep the full tile shape."""
    g = matmul_graph(a, (a[-1], 16))
    check_kernel(g, _emit(g, TileConfig(16, 16, 16)))


def test_huge_symbolic_batch_rides_on_grid_x():
    b = Symbol("nb", 1, 100_000)
    g = matmul_graph((sym("nb"), 4, 8), (sym("nb"), 8, 5), symbols=(b,))
    kern = _emit(g, TileConfig(16, 16, 16))
    assert kern.grid[1] == 1 and "pid_b = pid // tiles" in kern.source
    check_kernel(g, kern, {"nb": 3})


@pytest.mark.parametrize("seq", [1, 37])
def test_symbolic_rows_and_k(seq):
    s, d = Symbol("seq", 1, 512), Symbol("d", 16, 256, multiple_of=16)
    g = matmul_graph((2, sym("seq"), sym("d")), (sym("d"), 24), symbols=(s, d))
    kern = _emit(g, TileConfig(32, 32, 16))
    sizes = {a.name: i for i, a in enumerate(kern.args) if a.kind is ArgKind.SIZE}
    assert sizes["d"] in kern.divisible  # d is a multiple of 16 for every binding
    assert all(i not in kern.divisible for name, i in sizes.items() if name != "d")
    assert "offs_k[None, :] <" not in kern.source  # d % BLOCK_K == 0 always: no K tail mask
    assert "mask_m" in kern.source  # seq is any size: rows stay masked
    check_kernel(g, kern, {"seq": seq, "d": 48})


def test_operands_broadcast_along_a_tile_axis():
    # An expanded column and a constant load as [BLOCK_M, 1] tiles / literals; tl.dot still gets full tiles.
    def body(b, x, y):
        col = b.op(Op.BROADCAST, x, shape=(32, 32))
        return [b.op(Op.MATMUL, col, y), b.op(Op.MATMUL, col, b.full(0.5, F32, (32, 32)))]

    g = make_graph({"a": TensorType(F32, (32, 1)), "b": TensorType(F32, (32, 32))}, body)
    for node in [n for n in g.nodes if n.op is Op.MATMUL]:
        one = g.replace(outputs=node.outputs, output_tree={"tuple": [0]})
        check_kernel(one, emit_matmul(builder_for(one, node), node, config=TileConfig(32, 32, 32)))


EPILOGUES = {
    "bias": {},
    "relu": {"act": (Op.RELU, {})},
    "gelu": {"act": (Op.GELU, {})},
    "gelu_tanh": {"act": (Op.GELU, {"approximate": "tanh"})},
    "silu": {"act": (Op.SILU, {})},
    "tanh": {"act": (Op.TANH, {})},
    "residual": {"residual": True, "bias": False},
    "cast": {"out_cast": F16},
}


@pytest.mark.parametrize("case", sorted(EPILOGUES))
def test_epilogue_float32(case):
    g = linear_graph(**EPILOGUES[case])
    kern = _emit(g, TileConfig(32, 32, 32))
    # The weight is read transposed in place (no copy kernel) and the epilogue is inside this kernel.
    assert set(kern.inputs) == {v.id for v in g.inputs}
    assert kern.outputs == (g.outputs[0].id,)
    assert "permute" in kern.fused and "matmul" in kern.fused
    check_kernel(g, kern)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_gelu_residual_epilogue_16bit(dtype):
    g = linear_graph(dtype, act=(Op.GELU, {}), residual=True)
    check_kernel(g, _emit(g, TileConfig(32, 32, 32)))


def test_prologue_cast_of_weight_is_fused():
    g = linear_graph(F16, w_cast=True)
    kern = _emit(g, TileConfig(32, 32, 32))
    assert "cast" in kern.fused and set(kern.inputs) == {v.id for v in g.inputs}
    check_kernel(g, kern)


def test_kernel_can_store_the_product_and_the_epilogue():
    def epi(b, z):
        return b.op(Op.TANH, z)

    g0 = matmul_graph((20, 30), (30, 18), epilogue=epi)
    mm, out = anchor_of(g0, Op.MATMUL).outputs[0], g0.outputs[0]
    g = g0.replace(outputs=(mm, out), output_tree={"tuple": [0, 1]})
    node = anchor_of(g, Op.MATMUL)
    kern = emit_matmul(builder_for(g, node), node, epilogue_of(g, node), outputs=(mm, out), config=BIG)
    assert set(kern.outputs) == {mm.id, out.id}
    check_kernel(g, kern)


def test_fp32_uses_ieee_unless_tf32_allowed():
    g = matmul_graph((16, 16), (16, 16))
    assert 'input_precision="ieee"' in _emit(g).source
    assert 'input_precision="tf32"' in _emit(g, precision="tf32").source
    assert "input_precision" not in _emit(matmul_graph((16, 16), (16, 16), F16)).source


def test_source_reads_like_a_triton_matmul():
    src = _emit(matmul_graph((100, 70), (70, 50)), config=None).source
    for piece in ("BLOCK_M: tl.constexpr", "GROUP_M", "tl.cdiv", "for k0 in range(0, 70, BLOCK_K):", "tl.dot("):
        assert piece in src
    assert "mask=" in src  # 70 is no multiple of any K tile: the tail is masked


def test_static_multiples_drop_masks():
    src = _emit(matmul_graph((64, 64), (64, 64)), TileConfig(32, 32, 32)).source
    assert "mask=" not in src


def test_matmul_shape_and_rejections():
    g = matmul_graph((2, 1, 5, 6), (3, 6, 7))
    shape = matmul_shape(anchor_of(g, Op.MATMUL))
    assert (shape.batch, shape.m, shape.n, shape.k, shape.fold) == ((2, 3), 5, 7, 6, False)
    assert (shape.a_batch, shape.b_batch) == ((2, 1), (1, 3))
    add = make_graph({"a": TensorType(F32, (4, 4))}, lambda b, x: [b.op(Op.ADD, x, x)]).nodes[0]
    assert "not a matmul" in why_not_matmul(add)
    with pytest.raises(UnsupportedError, match="MATMUL"):
        matmul_shape(add)


def test_node_of_another_graph_is_refused():
    g1, g2 = matmul_graph((16, 16), (16, 16)), matmul_graph((16, 16), (16, 16))
    with pytest.raises(UnsupportedError, match="not a node of the builder's graph"):
        emit_matmul(builder_for(g1, g1.nodes[0]), anchor_of(g2, Op.MATMUL))


def test_epilogue_rules():
    def body(b, x, y, r):
        z = b.op(Op.MATMUL, x, y)
        s = b.op(Op.REDUCE_SUM, z, axes=(1,), keepdim=True)
        t = b.op(Op.ADD, b.op(Op.PERMUTE, z, perm=(1, 0)), r)
        return [s, t]

    sq = TensorType(F32, (8, 8))
    g = make_graph({"a": sq, "b": sq, "r": sq}, body)
    mm, red, perm, add = g.nodes
    assert "not pointwise" in why_not_epilogue(mm, red)
    assert why_not_epilogue(mm, perm) is not None
    assert why_not_epilogue(mm, add) is None  # same shape and pointwise ...
    with pytest.raises(UnsupportedError, match="outside the epilogue"):
        emit_matmul(builder_for(g, mm), mm, [add], outputs=[add.outputs[0]], config=BIG)  # ... but reads a transpose


def test_configs():
    small = matmul_config(1, 4096, 4096, F16, "sm_80")
    assert small.block_m == 16
    big80, big90 = matmul_config(4096, 4096, 4096, F16, "sm_80"), matmul_config(4096, 4096, 4096, F16, "sm_90")
    assert big80.block_n < big90.block_n and big80.num_warps == 8
    # IEEE fp32 is an FMA loop unrolled per K step: the least K step tl.dot takes keeps its code small
    assert matmul_config(4096, 4096, 4096, F32, "sm_80").block_k == 16 < big80.block_k
    tiny = matmul_config(17, 9, 5, F32)
    assert (tiny.block_m, tiny.block_n, tiny.block_k) == (32, 16, 16)
    with pytest.raises(UnsupportedError, match="power of two"):
        TileConfig(48, 64, 64)
    with pytest.raises(UnsupportedError, match=r"block_k=8: tl\.dot"):
        _emit(matmul_graph((16, 16), (16, 16)), TileConfig(16, 16, 8))
    with pytest.raises(UnsupportedError, match="arch hint"):
        matmul_config(1, 1, 1, F32, "sm_75")
    assert matmul_config(4096, 4096, 4096, F16, 90) == big90
    assert matmul_config(4096, 4096, 4096, F16, "sm_86") == big80
    # IEEE fp32 runs on FMA units: no 128x256 accumulator on Hopper either
    assert matmul_config(4096, 4096, 4096, F32, "sm_90").block_n == 128


def test_scheduler_fuses_linear_gelu_residual():
    from aotc.kernels.scheduler import schedule_graph
    from tests.kernel_layer.contraction_kit import random_feeds
    from tests.kernel_layer.kernel_kit import check

    g = linear_graph(act=(Op.GELU, {}), residual=True)
    schedule = schedule_graph(g)
    assert [k.kind for k in schedule.kernels] == [KernelKind.MATMUL]
    check(g, random_feeds(g, {}), {}, tol=(1e-4, 1e-4), schedule=schedule)
