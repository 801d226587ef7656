"""The Hopper matmul's tensor-descriptor (TMA) loads and store (issue 27): where the form is taken and where an
operand or the output keeps its pointers (with the reason as a comment ``--explain`` shows), its numerics under the Triton
interpreter (which runs descriptors) against the cpu backend at odd sizes, in the plain and the persistent form,
the source-bounds proof of its descriptors, the scheduler's choice by driver floor, and its sm_90a code compiled
here with no GPU (TMA and wgmma in the PTX, registers and shared memory within limits)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from aotc.artifact.source_bounds import check_source
from aotc.errors import ArtifactError
from aotc.ir import DType, Op, Symbol, TensorType
from aotc.ir.symbolic import sym
from aotc.ir.tiles import TileConfig
from aotc.kernels.explain import explain
from aotc.kernels.matmul import emit_matmul
from aotc.kernels.scheduler import schedule_graph
from aotc.lowering.options import CompileOptions
from tests.kernel_layer.contraction_graphs import linear_graph, matmul_graph
from tests.kernel_layer.contraction_kit import anchor_of, builder_for, check_kernel, epilogue_of

pytest.importorskip("triton")

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16
HOPPER_PTX = 87  # what a CUDA 12.8 driver floor builds sm_90 at (ptxas 12.9)
A_DESC, B_DESC = "a_desc = tl.make_tensor_descriptor(", "b_desc = tl.make_tensor_descriptor("
OUT_DESC, OUT_STORE = "out_desc = tl.make_tensor_descriptor(", "out_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], "
SMALL = TileConfig(16, 16, 16)


def kernel_for(graph, arch="sm_90", ptx=HOPPER_PTX, config=SMALL, persistent=False, name="matmul"):
    node = anchor_of(graph, Op.MATMUL)
    b = builder_for(graph, node)
    return emit_matmul(
        b, node, epilogue_of(graph, node), arch_hint=arch, ptx=ptx, config=config, persistent=persistent, name=name
    )


def _bias_relu(b, z, bias):
    return b.op(Op.RELU, b.op(Op.ADD, z, bias))


# -- where the form is taken -------------------------------------------------------------------------------------


def test_the_default_floor_and_sm80_leave_the_kernel_text_unchanged() -> None:
    g = linear_graph(BF16, act=(Op.GELU, {}))
    plain = kernel_for(g, ptx=None).source
    assert "make_tensor_descriptor" not in plain and "keeps pointer loads" not in plain
    assert kernel_for(g, ptx=84).source == plain  # the 12.4 floor's PTX 8.4: ptxas refuses TMA below 8.6
    assert kernel_for(g, arch="sm_80").source == kernel_for(g, arch="sm_80", ptx=None).source


def test_a_linear_loads_x_and_its_transposed_weight_by_box() -> None:
    k = kernel_for(linear_graph(BF16, act=(Op.GELU, {}), residual=True)).source
    # x [3, 7, 40] folds into 21 rows; the [24, 40] weight loads as the buffer lays it out, then .T (tutorial 09)
    assert "shape=[21, 40], strides=[40, 1], block_shape=[BLOCK_M, BLOCK_K]" in k
    assert "shape=[24, 40], strides=[40, 1], block_shape=[BLOCK_N, BLOCK_K]" in k
    assert "a = a_desc.load([pid_m * BLOCK_M, k0])" in k and "b = b_desc.load([pid_n * BLOCK_N, k0]).T" in k
    assert "offs_k" not in k  # no pointer load is left in the K loop: the boxes zero-fill the tails
    # the epilogue's loads stay masked pointer loads; its [21, 24] rows (48 bytes) store by box, clipped as masked
    assert "shape=[21, 24], strides=[24, 1], block_shape=[BLOCK_M, BLOCK_N]" in k and OUT_STORE + "out)" in k
    assert "tl.store(" not in k and "res = tl.load(res_ptr" in k


@pytest.mark.parametrize(
    "graph,role,why",
    [
        (matmul_graph((37, 40), (40, 24), F32), "a", "tf32"),
        (matmul_graph((37, 20), (20, 24), F16), "a", "not a multiple of 16 bytes"),  # 40-byte rows of A
        (matmul_graph((37, 40), (40, 20), F16), "b", "not a multiple of 16 bytes"),  # 40-byte rows of B
        (linear_graph(BF16, w_cast=True), "b", "through a cast"),  # a fused prologue: the kernel computes b
        (matmul_graph((20, 30), (30, 10), DType.int32), "a", "int32 operands"),
    ],
    ids=["fp32", "a-unaligned", "b-unaligned", "cast-weight", "int32"],
)
def test_an_operand_descriptors_cannot_take_keeps_pointers_with_the_reason(graph, role: str, why: str) -> None:
    k = kernel_for(graph).source
    found = dict(re.findall(r"^\s*# (\w+) keeps pointer loads: (.*)$", k, re.M))
    assert role in found and why in found[role], found
    assert f"{role}_desc" not in k and "tl.load(" in k
    check_kernel(graph, kernel_for(graph))


@pytest.mark.parametrize(
    "graph,outputs,why",
    [
        (matmul_graph((37, 40), (40, 20), F16), None, "its rows, 20 x 2 bytes, are not a multiple of 16 bytes"),
        (matmul_graph((64, 32), (32, 50257), BF16), None, "its rows, 50257 x 2 bytes"),  # GPT-2's lm head
        (matmul_graph((3, 17, 24), (3, 24, 40), F16), None, "the product is batched on the grid"),
        (linear_graph(BF16, act=(Op.GELU, {})), "two", "the kernel stores 2 values"),
        (matmul_graph((20, 32), (32, 16), DType.int32), None, "int32 outputs"),
    ],
    ids=["unaligned-rows", "lm-head", "batched", "two-outputs", "int32"],
)
def test_the_store_stays_a_pointer_store_where_a_box_cannot_take_it(graph, outputs, why: str) -> None:
    node = anchor_of(graph, Op.MATMUL)
    epilogue = epilogue_of(graph, node)
    stored = (node.outputs[0], epilogue[-1].outputs[0]) if outputs == "two" else None
    k = emit_matmul(builder_for(graph, node), node, epilogue, stored, arch_hint="sm_90", ptx=HOPPER_PTX, config=SMALL)
    assert "# out keeps pointer stores: " + why in k.source, k.source
    assert "out_desc" not in k.source and "tl.store(" in k.source


def test_a_staging_tile_past_shared_memory_keeps_the_pointer_store() -> None:
    """128x256 fp32 outputs stage 128 KiB in shared memory beside 144 KiB of 3-stage bf16 operand tiles."""
    g = matmul_graph((256, 64), (64, 256), BF16, lambda b, z: b.cast(z, F32))
    k = kernel_for(g, config=TileConfig(128, 256, 64, 8, 8, 3)).source
    assert "keeps pointer stores: its 128x256 staging tile (131072 bytes)" in k, k
    assert A_DESC in k and B_DESC in k and OUT_DESC not in k


def test_b_keeps_pointers_when_a_does() -> None:
    """A descriptor for b alone would give b the first pointer argument, unlike the portable form (a first)."""
    g = matmul_graph((37, 20), (20, 32), F16)  # a's 40-byte rows keep pointers, b's 64-byte rows would not
    k = kernel_for(g).source
    assert A_DESC not in k and B_DESC not in k and "# b keeps pointer loads: a keeps pointer loads" in k
    g = matmul_graph((37, 32), (32, 20), F16)  # the other way round a takes a descriptor, b pointers
    k = kernel_for(g).source
    assert A_DESC in k and B_DESC not in k and "offs_k = k0 + tl.arange(0, BLOCK_K)" in k
    check_kernel(g, kernel_for(g))


def test_a_batch_that_does_not_fold_at_one_stride_keeps_pointers() -> None:
    """A [2, 16, 24] activation seen as its [16, 2, 24] permute folds [16, 2] into rows whose strides do not chain."""

    def body(b, x, w):
        return [b.op(Op.MATMUL, b.op(Op.PERMUTE, x, perm=(1, 0, 2)), w)]

    from aotc.lowering.decompose import decompose
    from tests.graph_kit import make_graph

    g = decompose(make_graph({"x": TensorType(F16, (2, 16, 24)), "w": TensorType(F16, (24, 32))}, body))
    k = kernel_for(g).source
    assert "# a keeps pointer loads:" in k and "does not fold into its rows" in k, k
    assert A_DESC not in k and B_DESC not in k  # b keeps pointers too (test_b_keeps_pointers_when_a_does)
    check_kernel(g, kernel_for(g))


# -- numerics under the interpreter ------------------------------------------------------------------------------

CASES = {
    "odd-fp16": matmul_graph((37, 40), (40, 24), F16),  # K tail of 8 in a 16-deep box, M and N edges
    "odd-bf16-k-tail": matmul_graph((33, 72), (72, 56), BF16),
    "bias-gelu-transposed-weight": linear_graph(BF16, act=(Op.GELU, {})),
    "bias-gelu-residual-fp16": linear_graph(F16, act=(Op.GELU, {}), residual=True),
    "bias-relu": matmul_graph((45, 32), (32, 24), F16, _bias_relu, extra={"bias": TensorType(F16, (24,))}),
    "batched-on-grid": matmul_graph((3, 17, 24), (3, 24, 40), F16),  # one descriptor per batch entry
    "batch-broadcast-a": matmul_graph((17, 24), (3, 24, 40), BF16),  # every entry reads a's one matrix
    "folded-batch": matmul_graph((2, 19, 32), (32, 40), BF16),  # [2, 19] rows fold into one 38-row descriptor
    "decode-rows": matmul_graph((5, 1, 32), (32, 24), F16),  # seq 1: every row is a batch entry
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_descriptor_form_matches_the_cpu_backend(case: str) -> None:
    g = CASES[case]
    k = kernel_for(g)
    assert A_DESC in k.source and B_DESC in k.source and "keeps pointer loads" not in k.source, k.source
    on_grid = case in ("batched-on-grid", "batch-broadcast-a")  # these keep the pointer store
    assert (OUT_STORE in k.source) is not on_grid, k.source
    check_kernel(g, k)


@pytest.mark.parametrize("case", ["odd-fp16", "odd-bf16-k-tail", "bias-gelu-residual-fp16", "folded-batch"])
def test_the_persistent_descriptor_form_matches_the_cpu_backend(case: str) -> None:
    g = CASES[case]
    k = kernel_for(g, persistent=True)
    head, loop, body = k.source.partition("for tile in range(pid, num_tiles, NUM_SMS):")
    assert loop and A_DESC in head and B_DESC in head and OUT_DESC in head  # made once, before the tile loop
    assert OUT_STORE in body
    check_kernel(g, k)


SEQ = Symbol("seq", 1, 4096, multiple_of=8)


def _symbolic():
    return matmul_graph((2, sym("seq"), 64), (64, 40), F16, symbols=(SEQ,))


@pytest.mark.parametrize("persistent", [False, True])
def test_symbolic_rows_fold_into_the_descriptor(persistent: bool) -> None:
    k = kernel_for(_symbolic(), persistent=persistent)
    assert A_DESC in k.source and B_DESC in k.source, k.source
    check_kernel(_symbolic(), k, {"seq": 24})


# -- what the artifact reader proves -------------------------------------------------------------------------------


@pytest.mark.parametrize("persistent", [False, True])
def test_source_bounds_accept_the_descriptors(persistent: bool) -> None:
    for case in ("bias-gelu-residual-fp16", "batched-on-grid", "decode-rows"):
        k = kernel_for(CASES[case], persistent=persistent and case != "batched-on-grid")
        check_source(k, {}, f"{case} as emitted")
    k = kernel_for(_symbolic(), persistent=persistent)
    for rows in (8, 24, 2000, 4096):
        check_source(k, {"seq": rows}, f"seq {rows}")


@pytest.mark.parametrize(
    "old,new",
    [
        ("shape=[37, 40]", "shape=[38, 40]"),
        ("shape=[40, 24], strides=[24, 1]", "shape=[40, 24], strides=[25, 1]"),
        ("shape=[37, 24]", "shape=[38, 24]"),  # the store's box one row past the output
    ],
    ids=["rows", "stride", "store-rows"],
)
def test_source_bounds_refuse_a_widened_descriptor(old: str, new: str) -> None:
    k = kernel_for(CASES["odd-fp16"])
    widened = dataclasses.replace(k, source=k.source.replace(old, new, 1))
    assert widened.source != k.source
    check_source(k, {}, "as emitted")
    with pytest.raises(ArtifactError, match="reaches offsets"):
        check_source(widened, {}, "widened")


# -- the scheduler and --explain ---------------------------------------------------------------------------------


def _linear_model():
    return linear_graph(BF16, act=(Op.GELU, {}), residual=True)


def test_the_scheduler_takes_descriptors_for_sm90_only_from_a_cuda_12_7_floor() -> None:
    """The portable kernel keeps pointers; the sm_90 arch launch takes descriptors at the 12.8 floor (PTX 8.7) and
    keeps its pointer text at the default 12.4 floor (PTX 8.4)."""
    for floor, tma in (("12.8", True), ("12.4", False)):
        (k,) = schedule_graph(_linear_model(), CompileOptions(cuda_driver_floor=floor)).kernels
        assert "make_tensor_descriptor" not in k.source
        hopper = [v.kernel for v in k.arch_launches if v.arch == "sm_90"]
        assert len(hopper) == 1, (floor, k.arch_launches)
        assert (A_DESC in hopper[0].source and B_DESC in hopper[0].source) is tma, hopper[0].source
        assert "keeps pointer loads" not in hopper[0].source


def test_explain_names_the_tma_loads_and_the_pointer_loads_reasons() -> None:
    g = _linear_model()
    text = explain(g, schedule_graph(g, CompileOptions(cuda_driver_floor="12.8")))
    assert "TMA loads of a, b, TMA store of out" in text, text
    assert "TMA" not in explain(g, schedule_graph(g, CompileOptions()))
    g = matmul_graph((64, 40), (40, 20), F16)  # b's 40-byte rows
    text = explain(g, schedule_graph(g, CompileOptions(cuda_driver_floor="12.8")))
    assert "TMA loads of a" in text and "pointer loads of b: its row stride in its buffer, 20 x 2 bytes" in text, text
    assert "pointer stores of out: its rows, 20 x 2 bytes, are not a multiple of 16 bytes" in text, text


def test_a_model_compiled_for_a_cuda_12_8_floor_ships_the_descriptor_form(tmp_path) -> None:
    """End to end: a bf16 Linear + GELU's sm_90 arch launch loads by TMA, the reader accepts its source when the
    file loads, and the portable kernel (what the interpreter runs) still matches numpy."""
    from math import erf

    import numpy as np

    import aotc
    import aotc.functional as F
    from aotc import Dim, TensorSpec
    from aotc.artifact.reader import read_artifact

    seq = Dim("seq", min=1, max=512)
    inputs = {"x": TensorSpec((2, seq, 64), "bfloat16"), "w": TensorSpec((96, 64), "bfloat16")}

    def layer(x, w):
        return F.gelu(F.linear(x, w))

    options = CompileOptions(cuda_driver_floor="12.8", targets=("sm_80", "sm_90"))
    path = tmp_path / "linear.aotc"
    aotc.compile(layer, inputs, options=options).save(str(path))
    art = read_artifact(str(path))
    (launch,) = [k for k in art.variants[0].plan.kernels if "tl.dot(" in k.source]
    assert "make_tensor_descriptor" not in launch.source
    (hopper,) = [v.kernel for v in launch.arch_launches if v.arch == "sm_90"]
    assert A_DESC in hopper.source and B_DESC in hopper.source, hopper.source
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((2, 37, 64), (96, 64)))
    got = aotc.load(str(path), device="interpret")(x=x.astype(DType.bfloat16.np), w=w.astype(DType.bfloat16.np))
    bf = DType.bfloat16.np
    ref = (x.astype(bf).astype(np.float64) @ w.astype(bf).astype(np.float64).T).astype(bf).astype(np.float64)
    ref = ref * 0.5 * (1.0 + np.vectorize(erf)(ref / np.sqrt(2.0)))
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), ref, atol=3e-2, rtol=2e-2)


# -- the sm_90a code ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from aotc.errors import UnsupportedError
    from aotc.kernels.aot import AotOptions, compile_cubins
    from aotc.kernels.toolchain import choose_toolchain

    try:
        chain = choose_toolchain("sm_90", "12.8")
    except UnsupportedError as e:
        pytest.skip(f"no ptxas here builds sm_90 for a CUDA 12.8 floor: {e}")
    if chain.ptx_version < 86:
        pytest.skip(f"the 12.8 floor's toolchain here emits PTX {chain.ptx_version}, below TMA's 8.6")
    lm = Symbol("rows", 1, 8192, multiple_of=16)
    graphs = {
        # GPT-2's qkv projection as the scheduler emits it for sm_90 (its heuristic tile), bias epilogue
        "mm_tma_plain": matmul_graph(
            (8192, 768), (768, 2304), BF16, _bias_relu, extra={"bias": TensorType(BF16, (2304,))}
        ),
        "mm_tma_persistent": matmul_graph((8192, 768), (768, 2304), F16),
        "mm_tma_linear": linear_graph(BF16, act=(Op.GELU, {}), residual=True),  # the transposed weight's .T
        "mm_tma_lm_head": matmul_graph((sym("rows"), 768), (768, 50257), BF16, symbols=(lm,)),  # b: 100,514-byte rows
        "mm_fp32": matmul_graph((512, 256), (256, 512), F32),
    }
    # the heuristic's tiles, but the small Linear's: its small-M tile (32 rows) runs on mma.sync, not wgmma
    configs = {"mm_tma_linear": TileConfig(64, 64, 64)}
    kernels = [
        kernel_for(g, config=configs.get(name), persistent=name == "mm_tma_persistent", name=name)
        for name, g in graphs.items()
    ]
    out = compile_cubins(
        kernels, "sm_90", AotOptions(cuda_driver_floor="12.8", cache_dir=str(tmp_path_factory.mktemp("c")))
    )
    for name, c in out.items():
        assert not isinstance(c, str), (name, c)
    return {k.name: (k, out[k.name]) for k in kernels}


@pytest.mark.parametrize("name", ["mm_tma_plain", "mm_tma_persistent", "mm_tma_linear", "mm_tma_lm_head"])
def test_the_sm90a_code_loads_by_tma_on_wgmma_within_limits(compiled, tmp_path, name: str) -> None:
    from tests.kernel_layer.test_attention_sm90 import SHARED_LIMIT, _dump

    k, c = compiled[name]
    boxes = 1 if name == "mm_tma_lm_head" else 2  # the lm head's b keeps pointers: its rows are not 16-byte aligned
    assert A_DESC in k.source and (B_DESC in k.source) is (boxes == 2), k.source
    assert "cp.async.bulk.tensor" in c.ptx and "wgmma.mma_async" in c.ptx and c.meta.arch == "sm_90a"
    sass = _dump(c.cubin, "-sass", tmp_path)
    assert len(re.findall(r"\bUTMALDG\b", sass)) >= boxes
    # the lm head's 50,257-column rows are not 16-byte aligned: its store stays a pointer store
    stores = name != "mm_tma_lm_head"
    assert (OUT_DESC in k.source) is stores and bool(re.search(r"\bUTMASTG\b", sass)) is stores, k.source
    usage = _dump(c.cubin, "-res-usage", tmp_path)
    res = {m[0]: int(m[1]) for m in re.findall(r"\b(REG|STACK|LOCAL):(\d+)", usage)}
    assert res["REG"] <= 255 and res["STACK"] == 0 and res["LOCAL"] == 0, usage
    assert 0 < c.meta.shared <= SHARED_LIMIT and c.meta.num_warps == k.num_warps, c.meta
    # in-kernel descriptors live in the global scratch the launch plan allocates per CTA from the compiled
    # metadata (runtime/backends/cuda/launch.py scratch_bytes), as the attention's do: 128 bytes each
    assert c.meta.global_scratch_size >= boxes * 128, c.meta
    assert tuple(map(int, c.meta.ptx_version.split("."))) >= (8, 6)


def test_the_sm90a_fp32_kernel_keeps_pointer_loads_and_stores_by_box(compiled, tmp_path) -> None:
    """fp32 operands keep pointer loads (a box load may round to tf32); the store writes the tile's own fp32."""
    from tests.kernel_layer.test_attention_sm90 import _dump

    k, c = compiled["mm_fp32"]
    assert "# a keeps pointer loads: float32 operands" in k.source and A_DESC not in k.source
    assert B_DESC not in k.source and OUT_DESC in k.source
    sass = _dump(c.cubin, "-sass", tmp_path)
    assert not re.search(r"\bUTMALDG\b", sass) and re.search(r"\bUTMASTG\b", sass)
    assert c.meta.global_scratch_size >= 128, c.meta


def _linear(m: int, n: int, k: int):
    """``x @ w.T`` with the [N, K] weight a Linear holds, a bf16 GPT-2 layer's shapes."""
    from aotc.lowering.decompose import decompose
    from tests.graph_kit import make_graph

    def body(b, x, w):
        return [b.op(Op.MATMUL, x, b.op(Op.PERMUTE, w, perm=(1, 0)))]

    return decompose(make_graph({"x": TensorType(BF16, (m, k)), "w": TensorType(BF16, (n, k))}, body))


@pytest.mark.slow
def test_every_sm90_tile_compiles_with_descriptors_within_limits(tmp_path) -> None:
    """Each tile the sm_90 heuristic can pick (and the small-M form's), on a Linear's transposed weight: the TMA
    loads' barriers and the bf16 store's staging tile keep shared memory and registers within Hopper's limits."""
    from aotc.ir.tiles import SM90_TILES
    from aotc.kernels.aot import AotOptions, compile_cubins
    from tests.kernel_layer.test_attention_sm90 import SHARED_LIMIT, _dump

    g = _linear(8192, 2304, 768)
    kernels = [
        kernel_for(g, config=TileConfig(bm, bn, bk, 8, warps, stages), name=f"tile_{bm}x{bn}x{bk}_{warps}w{stages}s")
        for bm, bn, bk, warps, stages in SM90_TILES
    ]
    kernels.append(kernel_for(_linear(16, 2304, 768), config=None, name="small_m"))
    out = compile_cubins(kernels, "sm_90", AotOptions(cuda_driver_floor="12.8", cache_dir=str(tmp_path / "c")))
    for k in kernels:
        c = out[k.name]
        assert not isinstance(c, str), (k.name, c)
        assert A_DESC in k.source and B_DESC in k.source and OUT_DESC in k.source, k.name
        assert "cp.async.bulk.tensor" in c.ptx and re.search(r"\bUTMASTG\b", _dump(c.cubin, "-sass", tmp_path))
        usage = _dump(c.cubin, "-res-usage", tmp_path)
        res = {m[0]: int(m[1]) for m in re.findall(r"\b(REG|STACK|LOCAL):(\d+)", usage)}
        assert res["STACK"] == 0 and res["LOCAL"] == 0 and c.meta.shared <= SHARED_LIMIT, (k.name, usage, c.meta)
