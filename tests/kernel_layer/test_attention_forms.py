"""The attention template's loop forms (issue 27): the unmasked main loop with a peeled masked tail, the
two-stage causal walk (off-band blocks unmasked, the diagonal masked), the scale folded into the exponent's
FFMA and the causal query tiles in reverse order; each under the Triton interpreter against torch's SDPA at
aligned and odd lengths, causal or not, with bool and float masks and fully masked rows, and each kernel's
source read by the artifact reader's source-bounds check at several shapes."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest

from aotc.artifact.source_bounds import check_source
from aotc.errors import ArtifactError
from aotc.ir import Builder, Graph, Op, Symbol, TensorType
from aotc.ir.schedule import Kernel
from aotc.ir.symbolic import sym
from aotc.ir.verify import graph_ctx
from aotc.kernels.attention import AttentionConfig, emit_attention
from tests.kernel_layer.contraction_kit import anchor_of, builder_for, run_kernel
from tests.kernel_layer.test_attention import F32, Case, attention_graph, feeds_for, run_case

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

# (lq, lk) aligned to every block below, odd, shorter than one block, and causal with lq != lk both ways
LENGTHS = ((64, 64), (37, 50), (9, 13), (50, 37), (20, 70))
BLOCKS = ((16, 16), (16, 32), (32, 16))


def kernel_for(case: Case) -> Kernel:
    graph = attention_graph(case)
    node = anchor_of(graph, Op.SDPA)
    return emit_attention(builder_for(graph, node), node, config=AttentionConfig(*case.block))


def loops(source: str) -> list[str]:
    """The text of each top-level ``for`` loop of the kernel, in order."""
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef))
    return [ast.get_source_segment(source, s) or "" for s in fn.body if isinstance(s, ast.For)]


def masked_feeds(case: Case, env: dict[str, int], seed: int) -> list[np.ndarray]:
    """Random q, k, v and a mask with fully masked rows: a bool mask with rows of no key and rows whose only
    keys sit in the last block; a float mask with -inf rows, finfo.min rows and scattered -inf."""
    graph = attention_graph(case)
    feeds = feeds_for(graph, case, env, seed)
    if case.mask is None:
        return feeds
    rng = np.random.default_rng(seed + 1)
    shape = feeds[-1].shape
    if case.mask == "bool":
        keep = rng.random(shape) < 0.6
        keep[..., 0, :] = False  # row 0: no key at all
        if shape[-2] > 3:
            keep[..., 3, :] = False
            keep[..., 3, -1] = True  # row 3: only the last key
        feeds[-1] = keep
    else:
        bias = np.where(rng.random(shape) < 0.3, -np.inf, rng.standard_normal(shape)).astype(np.float32)
        bias[..., 0, :] = -np.inf  # a row with no key
        if shape[-2] > 2:
            bias[..., 2, :] = np.finfo(np.float32).min  # HF's padding: a uniform row, never NaN
        feeds[-1] = bias
    return feeds


def torch_sdpa(case: Case, feeds: Sequence[np.ndarray]) -> np.ndarray:
    q, k, v = (torch.from_numpy(np.ascontiguousarray(x)).double() for x in feeds[:3])
    mask = None
    if case.mask is not None:
        mask = torch.from_numpy(feeds[3])
        mask = mask if mask.dtype == torch.bool else mask.double()
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=case.causal)
    return out.numpy()


CASES = [
    Case(F32, lq, lk, d, heads=2, kv_heads=2, causal=causal, mask=mask, block=block)
    for (lq, lk), block, d, causal, mask in (
        (LENGTHS[0], BLOCKS[0], 16, False, None),
        (LENGTHS[0], BLOCKS[1], 32, True, None),
        (LENGTHS[0], BLOCKS[2], 16, True, "bool"),
        (LENGTHS[0], BLOCKS[0], 32, False, "float"),
        (LENGTHS[1], BLOCKS[0], 16, False, None),
        (LENGTHS[1], BLOCKS[1], 16, True, None),
        (LENGTHS[1], BLOCKS[2], 32, True, "float"),
        (LENGTHS[1], BLOCKS[0], 16, False, "bool"),
        (LENGTHS[2], BLOCKS[1], 16, True, "bool"),
        (LENGTHS[2], BLOCKS[0], 16, False, "float"),
        (LENGTHS[3], BLOCKS[2], 16, True, None),
        (LENGTHS[3], BLOCKS[0], 16, True, "bool"),
        (LENGTHS[4], BLOCKS[1], 16, True, "float"),
        (LENGTHS[4], BLOCKS[2], 32, False, None),
    )
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c}-b{c.block[0]}x{c.block[1]}")
def test_forms_match_torch_sdpa(case: Case) -> None:
    env = {"lq": case.lq, "lk": case.lk}
    feeds = masked_feeds(case, env, seed=case.lq + 7 * case.lk)
    got, want = run_case(case, feeds)
    expected = torch_sdpa(case, feeds)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(want, expected, atol=1e-6, rtol=1e-6)  # the op table agrees with torch
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=2e-5, err_msg=str(case))
    if case.mask == "bool":
        assert (got[..., 0, :] == 0).all()  # a row with no key is 0, as torch's safe softmax gives
    if case.mask == "float":
        assert (got[..., 0, :] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
def test_main_loop_has_no_key_mask_and_one_folded_exponent(causal: bool) -> None:
    """Odd dynamic lengths: the main loop runs to lk rounded down to BLOCK_N with no key mask, no select and
    ``exp2(s * scale - m)``; one masked loop follows (the tail, or causal: the diagonal blocks)."""
    k = kernel_for(Case(F32, 37, 50, 16, causal=causal, block=(16, 16)))
    main, edge = loops(k.source)
    assert "lk_full = lk // BLOCK_N * BLOCK_N" in k.source
    assert main.startswith("for n0 in range(0, band," if causal else "for n0 in range(0, lk_full,")
    assert "mask_t" not in main and "tl.where" not in main and "keep" not in main
    assert "s = tl.dot(q, kt" in main and "tl.exp2(s * " in main and "tl.max(s, 1) * " in main
    assert edge.startswith("for n0 in range(band, hi," if causal else "for n0 in range(lk_full, lk,")
    assert "mask_t = offs_t < lk" in edge and "tl.where(keep" in edge
    assert ("offs_t[None, :] <= offs_m[:, None]" in edge) is causal
    assert ("pid_m = tl.num_programs(0) - 1 - pid_m" in k.source) is causal  # heaviest causal rows first


def test_a_float_mask_keeps_natural_units() -> None:
    """With an additive mask the scores stay in natural units (scale, then the mask, then exp): a mask of
    finfo.min times log2(e) would overflow to -inf."""
    k = kernel_for(Case(F32, 37, 50, 16, mask="float", block=(16, 16)))
    main, _ = loops(k.source)
    assert "tl.exp2" not in k.source and "tl.exp(s - m_use[:, None])" in main
    assert "m_use = tl.where(m_new" in main  # a float mask may hold -inf: the guard stays


SHAPES = ({"lq": 1, "lk": 1}, {"lq": 17, "lk": 15}, {"lq": 64, "lk": 64}, {"lq": 100, "lk": 33}, {"lq": 33, "lk": 200})


@pytest.mark.parametrize(
    "case",
    [
        Case(F32, 37, 50, 16, block=(16, 16)),
        Case(F32, 37, 50, 16, causal=True, block=(16, 32)),
        Case(F32, 37, 50, 16, causal=True, block=(32, 16), mask="bool"),
        Case(F32, 37, 50, 80, mask="float", block=(16, 16)),
        Case(F32, 37, 37, 32, causal=True, packed=True, batch=2, block=(16, 16)),
    ],
    ids=str,
)
def test_source_bounds_accept_every_form(case: Case) -> None:
    k = kernel_for(case)
    packed = case.packed
    for env in SHAPES:
        check_source(k, {"seq": env["lq"]} if packed else env, f"{k.name} at {env}")


def test_source_bounds_refuse_an_unmasked_loop_past_the_rounded_length() -> None:
    """The check reads the main loop's range: run it to lk instead of lk rounded down and the unmasked key
    loads past the last full block are refused."""
    k = kernel_for(Case(F32, 37, 50, 16, block=(16, 16)))
    widened = dataclasses.replace(k, source=k.source.replace("range(0, lk_full, BLOCK_N)", "range(0, lk, BLOCK_N)"))
    assert widened.source != k.source
    check_source(k, {"lq": 37, "lk": 50}, "as emitted")
    check_source(widened, {"lq": 37, "lk": 48}, "widened, at an aligned length")  # touches nothing past lk
    with pytest.raises(ArtifactError):
        check_source(widened, {"lq": 37, "lk": 50}, "widened")


def test_causal_tiles_reverse_when_the_batch_rides_on_grid_x() -> None:
    """A batch that may pass CUDA's y limit moves onto grid x (tile = pid % tiles): the causal tiles still
    run heaviest first, and the result matches torch at odd lengths."""
    stub = Graph((), (), (), (), {"tuple": []}, (Symbol("n", 1, 70000), Symbol("lq", 1, 64)), ())
    b = Builder(graph_ctx(stub))
    q, k, v = (b.new_value(TensorType(F32, (sym("n"), sym("lq"), 16))) for _ in range(3))
    out = b.op(Op.SDPA, q, k, v, is_causal=True)
    graph = Graph((q, k, v), ("q", "k", "v"), tuple(b.nodes), (out,), {"tuple": [0]}, stub.symbols, ())
    node = anchor_of(graph, Op.SDPA)
    kernel = emit_attention(builder_for(graph, node), node, config=AttentionConfig(16, 16))
    assert "pid_m = pid_m % tiles" in kernel.source and "pid_m = tiles - 1 - pid_m" in kernel.source
    env = {"n": 3, "lq": 37}
    rng = np.random.default_rng(9)
    feeds = [rng.standard_normal((3, 37, 16)).astype(np.float32) for _ in range(3)]
    got = run_kernel(graph, kernel, feeds, env)[out.id]
    want = torch.nn.functional.scaled_dot_product_attention(*(torch.from_numpy(x) for x in feeds), is_causal=True)
    np.testing.assert_allclose(got, want.numpy(), atol=2e-5, rtol=2e-5)
    for shape in ({"n": 1, "lq": 1}, {"n": 5, "lq": 64}, {"n": 70000, "lq": 33}):
        check_source(kernel, shape, f"batch on x at {shape}")


@pytest.mark.parametrize("scale", [-0.5, 0.0])
def test_a_scale_of_no_positive_sign_multiplies_before_the_max(scale: float) -> None:
    """The max over raw scores is the max over scaled ones only for a positive scale: otherwise the kernel
    scales first (and never multiplies a masked -inf by 0)."""
    case = Case(F32, 37, 50, 16, causal=True, mask="bool", scale=scale, block=(16, 16))
    k = kernel_for(case)
    assert f's = tl.dot(q, kt, input_precision="ieee") * {scale * 1.4426950408889634!r}' in k.source
    feeds = masked_feeds(case, {"lq": 37, "lk": 50}, seed=3)
    got, want = run_case(case, feeds)
    q, kk, v = (torch.from_numpy(x).double() for x in feeds[:3])
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, kk, v, attn_mask=torch.from_numpy(feeds[3]) & torch.ones(37, 50, dtype=torch.bool).tril(), scale=scale
    )
    np.testing.assert_allclose(want, expected.numpy(), atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(got, expected.numpy(), atol=2e-5, rtol=2e-5)
