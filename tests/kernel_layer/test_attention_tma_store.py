"""The Hopper attention kernel's output store through a tensor descriptor (issue 27): ``out_desc.store`` writes the
output tile as one TMA box, clipped at the descriptor's shape, so the tail rows past the query length and the
head-dim padding past ``e`` are not written. Under the Triton interpreter it matches torch's SDPA and leaves
the memory past each entry's rows as it was; the reader bounds the box by the descriptor and refuses a widened
one; sm_90a code built here with no GPU stores by TMA (``cp.async.bulk.tensor`` global <- shared::cta, SASS
``UTMASTG``) with a fourth descriptor's scratch (512 bytes per CTA), which the reader's metadata check requires.
Where the box would not write what the pointer store does (a view output, rows not 16-byte aligned) the pointer
store stays, with its reason in the kernel and in --explain."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from aotc.artifact.code_checks import check_meta
from aotc.artifact.source_bounds import check_source
from aotc.errors import ArtifactError
from aotc.ir import Builder, Graph, Op, Symbol, TensorType
from aotc.ir.schedule import ArgKind
from aotc.ir.symbolic import sym
from aotc.ir.symbolic_values import evaluate
from aotc.ir.verify import graph_ctx
from aotc.kernels.attention import AttentionConfig, emit_attention
from aotc.kernels.explain import explain
from aotc.kernels.scheduler import schedule_graph
from aotc.lowering.options import CompileOptions
from aotc.runtime.backends import triton_interp
from tests.artifact.kernel_kit import meta
from tests.kernel_layer.contraction_kit import anchor_of, builder_for, run_kernel
from tests.kernel_layer.test_attention import BF16, F16, TOLERANCE, Case, attention_graph
from tests.kernel_layer.test_attention_forms import masked_feeds, torch_sdpa
from tests.kernel_layer.test_attention_sm90 import SHARED_LIMIT, _dump
from tests.kernel_layer.test_attention_tma import DESCRIPTORS, kernel_for

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

STORE = ("out_desc = tl.make_tensor_descriptor(out_ptr", "out_desc.store([pid_m * BLOCK_M, 0], out.to(")
TMA_STORE_PTX = re.compile(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta\b")  # the store direction

CASES = [
    Case(F16, 37, 50, 64, block=(16, 16)),  # 37 rows: the last tile's 11 rows past the length are clipped
    Case(F16, 37, 50, 64, causal=True, block=(16, 16)),
    Case(BF16, 21, 33, 80, causal=True, heads=2, kv_heads=2, batch=2, block=(16, 16)),  # BLOCK_E 128: 48 clipped
    Case(F16, 19, 19, 80, block=(32, 16)),
]


def _expected(case: Case) -> tuple[list[np.ndarray], np.ndarray]:
    feeds = masked_feeds(case, {"lq": case.lq, "lk": case.lk}, seed=case.lq + 7 * case.lk)
    return feeds, torch_sdpa(case, [x.astype(np.float32) for x in feeds])  # no bf16 in torch's numpy


def test_the_descriptor_form_stores_the_output_by_box() -> None:
    k = kernel_for(Case(F16, 37, 50, 80, causal=True, block=(16, 16)))
    assert all(s in k.source for s in STORE) and "tl.store(" not in k.source
    assert "shape=[lq, 80], strides=[80, 1], block_shape=[BLOCK_M, BLOCK_E])" in k.source
    assert "pointer stores" not in k.source


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_descriptor_store_matches_torch_sdpa_under_the_interpreter(case: Case) -> None:
    """Through the kernel layer's own runner, whose fence holds every store to the extents the kernel claims."""
    k = kernel_for(case)
    assert all(s in k.source for s in (*DESCRIPTORS, *STORE))
    graph = attention_graph(case)
    feeds, expected = _expected(case)
    got = run_kernel(graph, k, feeds, {"lq": case.lq, "lk": case.lk})[graph.outputs[0].id]
    atol, rtol = TOLERANCE[case.dtype]
    np.testing.assert_allclose(got.astype(np.float64), expected, atol=atol, rtol=rtol, err_msg=str(case))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_descriptor_store_writes_no_row_past_the_length_nor_column_past_the_head_dim(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The output is the front of a larger NaN-filled buffer and only the first (batch, head) entry's programs run
    (grid y = 1): every element past that entry's ``lq x e`` stays NaN, so neither the last tile's rows past the
    length (which would land on the next entry's rows) nor the padding columns past ``e`` (the next row's) were
    written. The fence is held to the arrays here, not to the claimed extents, so a stray write shows as one."""
    monkeypatch.setattr(triton_interp, "CHECK_EXTENTS", False)
    k = kernel_for(case)
    graph = attention_graph(case)
    feeds, expected = _expected(case)
    env = {"lq": case.lq, "lk": case.lk}
    out = graph.outputs[0]
    shape = tuple(evaluate(d, env) for d in out.type.shape)
    entry = case.lq * shape[-1]
    block_e = 1 << (shape[-1] - 1).bit_length()
    big = np.full(int(np.prod(shape)) + 128 * block_e, np.nan, dtype=out.type.dtype.np)
    known = dict(zip((v.id for v in graph.inputs), feeds))
    args = []
    for a in k.args:
        if a.kind is ArgKind.SIZE:
            args.append(evaluate(a.size, env))
        else:
            args.append(big if a.value == out.id else np.ascontiguousarray(known[a.value]))
    grid = [evaluate(g, env) for g in k.grid]
    tiles = -(-case.lq // dict(k.constexprs)["BLOCK_M"])
    assert grid == [tiles, int(np.prod(shape[:-2])), 1] and grid[1] > 1, grid  # entries on y: run the first only
    with np.errstate(all="ignore"):
        triton_interp.launch(k, [grid[0], 1, 1], args)
    first = big[:entry].astype(np.float64).reshape(case.lq, shape[-1])
    atol, rtol = TOLERANCE[case.dtype]
    np.testing.assert_allclose(first, expected.reshape(-1, case.lq, shape[-1])[0], atol=atol, rtol=rtol)
    rest = big[entry:].astype(np.float64)
    assert np.isnan(rest).all(), f"{int((~np.isnan(rest)).sum())} elements past the entry's rows were written"


SHAPES = ({"lq": 1, "lk": 1}, {"lq": 17, "lk": 15}, {"lq": 64, "lk": 64}, {"lq": 100, "lk": 33})


def test_source_bounds_accept_the_store_descriptor_and_refuse_a_widened_one() -> None:
    k = kernel_for(Case(F16, 37, 50, 24, causal=True, batch=2, block=(16, 16)))
    made = re.search(r"out_desc = tl\.make_tensor_descriptor\(.*\)", k.source)
    assert made is not None and "shape=[lq, 24], strides=[24, 1]" in made.group(0)
    for env in SHAPES:
        check_source(k, env, f"{k.name} at {env}")
    for old, new in (("shape=[lq, 24]", "shape=[lq + 1, 24]"), ("strides=[24, 1]", "strides=[25, 1]")):
        widened = dataclasses.replace(k, source=k.source.replace(made.group(0), made.group(0).replace(old, new)))
        with pytest.raises(ArtifactError, match="reaches offsets"):
            check_source(widened, {"lq": 17, "lk": 15}, "widened")


def sliced_graph(d: int = 20, width: int = 24) -> Graph:
    """q, k, v the first ``d`` columns of [1, 2, L, width] buffers: 48-byte rows, so they load by TMA, while the
    output's own rows are ``d`` wide (40 bytes at d 20: no TMA store)."""
    syms = (Symbol("lq", 1, 512),)
    b = Builder(graph_ctx(Graph((), (), (), (), {"tuple": []}, syms, ())))
    lq = sym("lq")
    inputs = [b.new_value(TensorType(F16, (1, 2, lq, width))) for _ in range(3)]
    q, k, v = (b.op(Op.SLICE, x, starts=(0, 0, 0, 0), stops=(1, 2, lq, d), steps=(1, 1, 1, 1)) for x in inputs)
    out = b.op(Op.SDPA, q, k, v, is_causal=True)
    return Graph(tuple(inputs), ("q", "k", "v"), tuple(b.nodes), (out,), {"tuple": [0]}, syms, (), {}, "sliced")


def viewed_graph() -> Graph:
    """The attention output returned transposed to [B, L, H, D]: a view output the kernel stores by its own map."""
    syms = (Symbol("lq", 1, 512),)
    b = Builder(graph_ctx(Graph((), (), (), (), {"tuple": []}, syms, ())))
    inputs = [b.new_value(TensorType(F16, (2, 2, sym("lq"), 32))) for _ in range(3)]
    out = b.permute(b.op(Op.SDPA, *inputs), (0, 2, 1, 3))
    return Graph(tuple(inputs), ("q", "k", "v"), tuple(b.nodes), (out,), {"tuple": [0]}, syms, (), {}, "viewed")


def _hopper(graph: Graph) -> str:
    (k,) = schedule_graph(graph, CompileOptions(cuda_driver_floor="12.8")).kernels
    (hopper,) = [v.kernel for v in k.arch_launches if v.arch == "sm_90"]
    assert "make_tensor_descriptor" not in k.source  # the portable kernel keeps its pointer store
    return hopper.source


@pytest.mark.parametrize(
    "graph,why",
    [
        (sliced_graph, "# out keeps pointer stores: its row stride, 20 x 2 bytes, is not a multiple of 16 bytes"),
        (viewed_graph, "# out keeps pointer stores: it is stored through views too"),
    ],
    ids=["unaligned-rows", "view-output"],
)
def test_the_pointer_store_stays_where_the_box_would_not_write_the_same(graph, why: str) -> None:
    g = graph()
    source = _hopper(g)
    assert all(d in source for d in DESCRIPTORS), "the loads still take descriptors"
    assert why in source and "out_desc" not in source and "tl.store(" in source
    text = explain(g, schedule_graph(g, CompileOptions(cuda_driver_floor="12.8")))
    assert "TMA loads of q, k, v" in text and "TMA store" not in text, text
    assert "pointer stores of out: " + why.split(": ", 1)[1] in text, text


def test_the_sliced_operands_with_a_pointer_store_match_torch_under_the_interpreter() -> None:
    graph = sliced_graph()
    node = anchor_of(graph, Op.SDPA)
    k = emit_attention(builder_for(graph, node), node, arch_hint="sm_90", config=AttentionConfig(16, 16), ptx=87)
    assert all(d in k.source for d in DESCRIPTORS) and "out keeps pointer stores" in k.source
    rng = np.random.default_rng(2)
    feeds = [rng.standard_normal((1, 2, 37, 24)).astype(np.float16) for _ in range(3)]
    got = run_kernel(graph, k, feeds, {"lq": 37})[graph.outputs[0].id].astype(np.float64)
    q, kk, v = (torch.from_numpy(x[..., :20]).double() for x in feeds)
    want = torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True).numpy()
    np.testing.assert_allclose(got, want, atol=3e-3, rtol=3e-3)


def test_explain_names_the_tma_store() -> None:
    graph = attention_graph(Case(F16, 37, 50, 64))
    text = explain(graph, schedule_graph(graph, CompileOptions(cuda_driver_floor="12.8")))
    assert "TMA loads of q, k, v, TMA store of out" in text and "pointer stores" not in text, text


def test_the_reader_requires_scratch_for_each_descriptor() -> None:
    """A binary for sm_90 whose source makes four descriptors carries 4 x 128 bytes of scratch per CTA (the launch
    plan allocates what the metadata says); the portable sm_80 code of the same source needs none."""
    k = kernel_for(Case(F16, 37, 50, 64, block=(16, 16)))
    assert k.source.count("tl.make_tensor_descriptor(") == 4
    good = dataclasses.replace(meta(k, "sm_90a"), global_scratch_size=512, global_scratch_align=128)
    check_meta(k, good, ("sm_90", "sm_90a"), "four descriptors")
    check_meta(k, meta(k, "sm_80"), ("sm_80",), "pointer lowering")
    for size, align in ((384, 128), (512, 16)):  # three descriptors' worth; a misaligned one
        short = dataclasses.replace(good, global_scratch_size=size, global_scratch_align=align)
        with pytest.raises(ArtifactError, match=r"makes 4 tensor descriptors, 512 bytes of global scratch"):
            check_meta(k, short, ("sm_90", "sm_90a"), "short scratch")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from aotc.kernels.aot import AotOptions, compile_cubins

    kernels = []
    for d, causal in ((64, True), (80, False)):
        case = Case(BF16, 17, 17, d, heads=16, kv_heads=16, batch=4, causal=causal, block=None)
        kernels.append(kernel_for(case, name=f"attn_store_d{d}"))
    graph = sliced_graph()
    node = anchor_of(graph, Op.SDPA)
    kernels.append(emit_attention(builder_for(graph, node), node, arch_hint="sm_90", ptx=87, name="attn_kept"))
    options = AotOptions(cuda_driver_floor="12.8", cache_dir=str(tmp_path_factory.mktemp("cache")))
    out = compile_cubins(kernels, "sm_90", options)
    for c in out.values():
        assert not isinstance(c, str), c
    return {k.name: (k, out[k.name]) for k in kernels}


@pytest.mark.parametrize("d", [64, 80])
def test_the_sm90a_code_stores_by_tma_with_the_fourth_descriptors_scratch(compiled, tmp_path, d: int) -> None:
    k, c = compiled[f"attn_store_d{d}"]
    assert all(s in k.source for s in STORE) and c.meta.arch == "sm_90a"
    assert TMA_STORE_PTX.search(c.ptx), "the output stores global <- shared::cta by TMA"
    sass = _dump(c.cubin, "-sass", tmp_path)
    assert re.search(r"\bUTMASTG\b", sass) and len(re.findall(r"\bUTMALDG\b", sass)) >= 3
    assert c.meta.global_scratch_size == 4 * 128 and c.meta.global_scratch_align >= 64, c.meta
    assert 0 < c.meta.shared <= SHARED_LIMIT, c.meta
    check_meta(k, c.meta, ("sm_90", "sm_90a"), k.name)  # the reader's scratch check agrees with Triton's


def test_the_sm90a_code_of_a_kept_pointer_store_has_no_tma_store(compiled) -> None:
    k, c = compiled["attn_kept"]
    assert "out keeps pointer stores" in k.source
    assert not TMA_STORE_PTX.search(c.ptx) and "cp.async.bulk.tensor.2d.shared::cta.global" in c.ptx
    assert c.meta.global_scratch_size == 3 * 128, c.meta
    check_meta(k, c.meta, ("sm_90", "sm_90a"), k.name)
