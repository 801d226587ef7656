"""The attention pass (CompileOptions.fuse_attention): F.scaled_dot_product_attention stays whole and
hand-written softmax(q @ k^T * scale + mask) @ v folds back into one SDPA node, computing what the
decomposed graph computes on the cpu backend; near misses are explained."""

from __future__ import annotations

import math

import numpy as np
import pytest

import aotc.functional as F
from aotc import Dim, TensorSpec
from aotc.errors import VerifyError
from aotc.frontend.trace import trace
from aotc.ir import Op
from aotc.ir.evaluate import GraphRunner
from aotc.ir.symbolic import mul, sym
from aotc.lowering.attention import decompose_keeping_attention, explain_attention, fuse_attention, verify_fused
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower, stages
from models import bert, gpt2

FUSE = CompileOptions(fuse_attention=True, verify_each_stage=True)
PLAIN = CompileOptions(verify_each_stage=True, fuse_attention=False)


def _count(graph, op: Op) -> int:
    return sum(n.op is op for n in graph.nodes)


def _same_results(graph, feeds, env, tol=1e-5):
    fused, plain = lower(graph, FUSE), lower(graph, PLAIN)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        got = GraphRunner(fused).run(feeds, env)
        want = GraphRunner(plain).run(feeds, env)
    for g, w in zip(got, want):
        # a hand-written softmax over a row whose keys are all masked is 0/0; the SDPA it folds into gives 0 there,
        # as PyTorch's SDPA (and torch.compile's own attention patterns) do
        assert not np.isnan(g).any()
        w = np.where(np.isnan(w), 0.0, w)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)
    return fused


def test_flag_defaults_on_and_adds_the_stage() -> None:
    assert CompileOptions().fuse_attention is True
    assert "attention" in [name for name, _ in stages(CompileOptions())]
    assert "attention" not in [name for name, _ in stages(CompileOptions(fuse_attention=False))]


def test_gpt2_keeps_sdpa_whole() -> None:
    model, spec = gpt2.build(vocab_size=64, n_positions=32, d_model=32, n_layer=2, n_head=4)
    graph = trace(model, spec)
    ids = np.random.default_rng(0).integers(0, 64, size=(2, 9)).astype(np.int64)
    fused = _same_results(graph, [ids], {"batch": 2, "seq": 9}, tol=2e-5)
    assert _count(fused, Op.SDPA) == 2
    assert all(n.attrs["is_causal"] for n in fused.nodes if n.op is Op.SDPA)
    assert _count(lower(graph, PLAIN), Op.SDPA) == 0


def test_bert_hand_written_attention_becomes_sdpa() -> None:
    model, spec = bert.build(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=50
    )
    graph = trace(model, spec)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 50, size=(3, 11)).astype(np.int64)
    mask = np.ones((3, 11), np.int64)
    mask[1, 6:] = 0  # padded sequence: the additive mask matters
    fused = _same_results(graph, [ids, mask], {"batch": 3, "seq": 11})
    sdpa = [n for n in fused.nodes if n.op is Op.SDPA]
    assert len(sdpa) == 2 and all(len(n.inputs) == 4 for n in sdpa)  # the padding bias kept as the mask
    assert all(math.isclose(n.attrs["scale"], 1 / 4) for n in sdpa)
    assert _count(fused, Op.EXP) == 0 and explain_attention(decompose_keeping_attention(graph)) == []


B, H, D = Dim("batch", min=1, max=8), 2, 16
SEQ = Dim("seq", min=1, max=64)


def _qkv(x):
    b, s, _ = x.shape
    return (x[..., i * H * D : (i + 1) * H * D].reshape(b, s, H, D).transpose(1, 2) for i in range(3))


def _scaled_scores(q, k):
    return q @ k.transpose(-2, -1) * (1 / math.sqrt(D))


def _scale_on_q(q, k):
    return (q * (1 / math.sqrt(D))) @ k.transpose(-2, -1)


def _divided(q, k):
    return (q @ k.transpose(-1, -2)) / math.sqrt(D)


def _masked_fill(x, keep):
    q, k, v = _qkv(x)
    scores = _divided(q, k).masked_fill(keep[:, None, None, :] == 0, float("-inf"))
    return F.softmax(scores, dim=-1) @ v


def _where_keep(x, keep):
    q, k, v = _qkv(x)
    from aotc import where

    s = where(keep[:, None, None, :] != 0, _scale_on_q(q, k), float("-inf"))
    return F.softmax(s, dim=-1) @ v


def _float_mask_then_scale(x, keep):
    q, k, v = _qkv(x)
    bias = (1.0 - keep[:, None, None, :].float()) * -1e4
    s = (q @ k.transpose(-2, -1) + bias) * (1 / math.sqrt(D))  # mask added before the scale
    return F.softmax(s, dim=-1) @ v


def _no_mask(x, keep):
    q, k, v = _qkv(x)
    return F.softmax(_scaled_scores(q, k), dim=-1) @ v


def _finfo_min_fill(x, keep):
    """HF eager style (DeBERTa): heads folded into the batch, masked_fill(finfo.min), reshapes around it."""
    q, k, v = _qkv(x)
    b, h, s, d = q.shape
    q3, k3, v3 = (t.reshape(b * h, s, d) for t in (q, k, v))
    scores = (q3 @ (k3.transpose(-1, -2) / math.sqrt(D))).reshape(b, h, s, s)
    scores = scores.masked_fill(keep[:, None, None, :] == 0, float(np.finfo(np.float32).min))
    return (F.softmax(scores, dim=-1).reshape(b * h, s, s) @ v3).reshape(b, h, s, d)


def _torch_export_style(x, keep):
    """torch's SDPA export: sqrt(scale) on q and on k^T, a where(mask, 0, -inf) bias, NaN probabilities zeroed."""
    from aotc import where

    q, k, v = _qkv(x)
    half = (1 / math.sqrt(D)) ** 0.5
    bias = where(keep[:, None, None, :] != 0, 0.0, float("-inf"))
    p = F.softmax((q * half) @ (k.transpose(-2, -1) * half) + bias, dim=-1)
    return where(p.isnan(), 0.0, p) @ v


def _zero_rows(bias, p):
    """The ONNX Attention importer's wrapper: zero probabilities on the rows whose bias is -inf everywhere."""
    from aotc import where

    return where(bias.amax(dim=-1, keepdim=True) == float("-inf"), 0.0, p)


def _padding_bias(keep):
    from aotc import where

    return where(keep[:, None, None, :] != 0, 0.0, float("-inf"))


def _causal_bias(s):
    from aotc import arange, where

    return where(arange(s)[None, :] <= arange(s)[:, None], 0.0, float("-inf"))


def _onnx_importer_style(x, keep):
    """ONNX Attention's explicit path: sqrt(scale) on q and k^T, one additive bias, its fully masked rows zeroed."""
    q, k, v = _qkv(x)
    half = (1 / math.sqrt(D)) ** 0.5
    bias = _padding_bias(keep)
    p = F.softmax((q * half) @ (k.transpose(-2, -1) * half) + bias, dim=-1)
    return _zero_rows(bias, p) @ v


HAND_WRITTEN = [
    _masked_fill,
    _where_keep,
    _float_mask_then_scale,
    _no_mask,
    _finfo_min_fill,
    _torch_export_style,
    _onnx_importer_style,
]


@pytest.mark.parametrize("fn", HAND_WRITTEN, ids=lambda f: f.__name__.strip("_"))
def test_hand_written_variants_fold(fn) -> None:
    spec = {"x": TensorSpec((B, SEQ, 3 * H * D), "float32"), "keep": TensorSpec((B, SEQ), "int64")}
    graph = trace(fn, spec, name="attn")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 13, 3 * H * D)).astype(np.float32)
    keep = np.ones((3, 13), np.int64)
    keep[0, 9:] = 0
    keep[2] = 0  # fully padded: NaN rows for -inf masks, uniform ones for finfo.min, 0 after where(isnan)
    # (s - 1e4) * scale rounds s to float32's ulp at 1e4 in the decomposed graph of a fully padded row
    tol = 2e-4 if fn is _float_mask_then_scale else 1e-5
    fused = _same_results(graph, [x, keep], {"batch": 3, "seq": 13}, tol)
    (node,) = [n for n in fused.nodes if n.op is Op.SDPA]
    assert math.isclose(node.attrs["scale"], 1 / math.sqrt(D))
    assert _count(fused, Op.REDUCE_MAX) == 0


def test_rows_with_no_allowed_key_come_out_zero() -> None:
    """Padding plus causal in one bias: rows 0-3 of a sequence padded at the front and every row of a fully
    padded one attend no key; the importer's wrapper gives them 0 (as onnxruntime does), so must SDPA."""

    def fn(x, keep):
        q, k, v = _qkv(x)
        bias = _padding_bias(keep) + _causal_bias(q.shape[2])
        return _zero_rows(bias, F.softmax(_scaled_scores(q, k) + bias, dim=-1)) @ v

    graph = trace(fn, SPEC, name="attn")
    assert explain_attention(decompose_keeping_attention(graph)) == []
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 9, 3 * H * D)).astype(np.float32)
    keep = np.ones((3, 9), np.int64)
    keep[0, :4] = 0
    keep[2] = 0
    fused = _same_results(graph, [x, keep], {"batch": 3, "seq": 9})
    assert _count(fused, Op.SDPA) == 1 and _count(fused, Op.REDUCE_MAX) == 0
    with np.errstate(invalid="ignore"):
        (out,) = GraphRunner(fused).run([x, keep], {"batch": 3, "seq": 9})
    no_key = np.zeros((3, 9), bool)
    no_key[0, :4] = no_key[2] = True
    zero = (out == 0).all(axis=-1)  # (batch, heads, queries)
    assert (zero == no_key[:, None, :]).all() and np.isfinite(out).all()


def test_half_precision_hand_written_attention() -> None:
    def fn(q, k, v):
        return F.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1) @ v

    spec = {n: TensorSpec((B, H, SEQ, 64), "float16") for n in "qkv"}
    graph = trace(fn, spec, name="attn")
    rng = np.random.default_rng(3)
    feeds = [rng.standard_normal((1, H, 7, 64)).astype(np.float16) for _ in range(3)]
    fused = _same_results(graph, feeds, {"batch": 1, "seq": 7}, tol=2e-3)
    assert _count(fused, Op.SDPA) == 1


def _explained(fn, spec) -> list[str]:
    return explain_attention(decompose_keeping_attention(trace(fn, spec, name="attn")))


SPEC = {"x": TensorSpec((B, SEQ, 3 * H * D), "float32"), "keep": TensorSpec((B, SEQ), "int64")}


def test_near_miss_finite_fill() -> None:
    def fn(x, keep):
        q, k, v = _qkv(x)
        s = _divided(q, k).masked_fill(keep[:, None, None, :] == 0, -1e9)
        return F.softmax(s, dim=-1) @ v

    (reason,) = _explained(fn, SPEC)
    assert "fill value -1000000000.0 is not -inf" in reason
    assert _count(fuse_attention(decompose_keeping_attention(trace(fn, SPEC))), Op.SDPA) == 0


def test_near_miss_probabilities_returned() -> None:
    def fn(x, keep):
        q, k, v = _qkv(x)
        p = F.softmax(_scaled_scores(q, k), dim=-1)
        return p @ v, p

    (reason,) = _explained(fn, SPEC)
    assert "graph output" in reason


def test_near_miss_softcap() -> None:
    def fn(x, keep):
        q, k, v = _qkv(x)
        s = F.tanh(_scaled_scores(q, k) / 30.0) * 30.0
        return F.softmax(s, dim=-1) @ v

    (reason,) = _explained(fn, SPEC)
    assert "pass through tanh" in reason


def test_near_miss_tensor_scale() -> None:
    def fn(x, keep):
        q, k, v = _qkv(x)
        s = (q @ k.transpose(-2, -1)) * keep[:, None, None, :].float()
        return F.softmax(s, dim=-1) @ v

    (reason,) = _explained(fn, SPEC)
    assert "not a scalar constant" in reason


def test_verify_fused_rejects_other_high_level_ops() -> None:
    def fn(x, keep):
        return F.gelu(x)

    graph = trace(fn, SPEC, name="g")
    with pytest.raises(VerifyError, match="high-level op left"):
        verify_fused(graph)
    verify_fused(decompose_keeping_attention(graph))


def test_near_miss_half_precision_finite_fill() -> None:
    def fn(q, k, v, keep):
        s = (q @ k.transpose(-2, -1)).masked_fill(keep[:, None, None, :] == 0, -65504.0)
        return F.softmax(s, dim=-1) @ v

    spec = {n: TensorSpec((B, H, SEQ, 16), "float16") for n in "qkv"} | {"keep": TensorSpec((B, SEQ), "int64")}
    (reason,) = _explained(fn, spec)
    assert "-65504.0 is not -inf or a float32 finfo.min-like value" in reason


def test_near_miss_rows_zeroed_by_another_bias() -> None:
    """The wrapper reads the padding bias but the scores get padding + causal: a row the causal mask empties
    would stay NaN in the graph and come out 0 from SDPA."""

    def fn(x, keep):
        q, k, v = _qkv(x)
        pad = _padding_bias(keep)
        bias = pad + _causal_bias(q.shape[2])
        return _zero_rows(pad, F.softmax(_scaled_scores(q, k) + bias, dim=-1)) @ v

    graph = decompose_keeping_attention(trace(fn, SPEC, name="attn"))
    (reason,) = explain_attention(graph)
    assert "masks a whole row, but the masks added to the scores are %" in reason
    assert _count(fuse_attention(graph), Op.SDPA) == 0


def test_near_miss_rows_zeroed_with_other_masks() -> None:
    def fn(x, keep):
        q, k, v = _qkv(x)
        bias = _padding_bias(keep)
        s = (_scaled_scores(q, k) + bias).masked_fill(keep[:, None, :, None] == 0, float("-inf"))
        return _zero_rows(bias, F.softmax(s, dim=-1)) @ v

    (reason,) = _explained(fn, SPEC)
    assert "other masks on the scores can mask a row too" in reason


def test_near_miss_rows_zeroed_by_another_condition() -> None:
    def fn(x, keep):
        from aotc import where

        q, k, v = _qkv(x)
        p = F.softmax(_scaled_scores(q, k), dim=-1)
        return where(keep[:, None, :, None] == 0, 0.0, p) @ v

    (reason,) = _explained(fn, SPEC)
    assert "neither isnan(p) nor reduce_max(bias) == -inf" in reason


def test_a_mask_below_a_batch_reshape_folds_in_the_matmuls_grouping() -> None:
    """Scores over [B*H] get a [B*H, 1, S] bias, then are viewed as [B, H] for the softmax: attention runs over
    [B*H] (where the bias fits) and its output is viewed as [B, H]."""

    def fn(x, keep):
        q, k, v = _qkv(x)
        b, h, s, d = q.shape
        scores = q.reshape(b * h, s, d) @ k.reshape(b * h, s, d).transpose(-1, -2)
        bias = (1.0 - keep[:, None, :].float().expand(b, h, s).reshape(b * h, 1, s)) * -1e4
        p = F.softmax((scores + bias).reshape(b, h, s, s), dim=-1)
        return p @ v

    graph = trace(fn, SPEC, name="attn")
    assert explain_attention(decompose_keeping_attention(graph)) == []
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 10, 3 * H * D)).astype(np.float32)
    keep = (rng.random((3, 10)) < 0.7).astype(np.int64)
    fused = _same_results(graph, [x, keep], {"batch": 3, "seq": 10})
    (node,) = [n for n in fused.nodes if n.op is Op.SDPA]
    assert node.inputs[0].type.rank == 3 and node.outputs[0].type.shape[0] == mul(sym("batch"), H)


W = 4  # windows per image


def _windows(x, rel, win, fill=None):
    """torchvision's shifted_window_attention: windows folded into the batch, scores viewed as [B, W, H] to add
    the per-window mask (or mask them with ``fill``), then viewed back to [B*W, H] for the softmax."""
    b, w, s, c = x.shape
    q, k, v = _qkv(x.reshape(b * w, s, c))  # [B*W, H, S, D]
    scores = _scale_on_q(q, k)
    if rel is not None:
        scores = scores + rel  # the relative position bias [H, S, S], over [B*W, H]
    scores = scores.reshape(b, w, H, s, s)
    mask = win[None, :, None]  # [1, W, 1, S, S]
    scores = scores + mask if fill is None else scores.masked_fill(mask < 0, fill)
    return F.softmax(scores.reshape(b * w, H, s, s), dim=-1) @ v


WINDOW_SPEC = {
    "x": TensorSpec((B, W, SEQ, 3 * H * D), "float32"),
    "rel": TensorSpec((H, SEQ, SEQ), "float32"),
    "win": TensorSpec((W, SEQ, SEQ), "float32"),
}
SHIFTED = {
    "add": lambda x, rel, win: _windows(x, rel, win),
    "neg_inf": lambda x, rel, win: _windows(x, rel, win, float("-inf")),
    "finfo_min": lambda x, rel, win: _windows(x, None, win, float(np.finfo(np.float32).min)),
}


@pytest.mark.parametrize("style", list(SHIFTED))
def test_shifted_window_mask_added_across_a_batch_view_folds(style: str) -> None:
    """Before: softmax(view(view(q k^T + rel, [B, W, H]) + mask, [B*W, H])) @ v, a per-window mask that only
    broadcasts over the images once the windows have their own dim. After: one SDPA over [B, W, H] reading
    q, k, v and the masks through views (index arithmetic on its batch), its output viewed back to [B*W, H]."""
    fn = SHIFTED[style]
    graph = trace(fn, WINDOW_SPEC, name="attn")
    before = decompose_keeping_attention(graph)
    assert _count(before, Op.SDPA) == 0 and explain_attention(before) == []
    rng = np.random.default_rng(7)
    s = 9
    x = rng.standard_normal((2, W, s, 3 * H * D)).astype(np.float32)
    rel = (0.5 * rng.standard_normal((H, s, s))).astype(np.float32)
    win = np.where(rng.random((W, s, s)) < 0.4, -100.0, 0.0).astype(np.float32)
    win[:, np.arange(s), np.arange(s)] = 0.0  # every query keeps itself, as in Swin
    fused = _same_results(graph, [x, rel, win], {"batch": 2, "seq": s})
    (node,) = [n for n in fused.nodes if n.op is Op.SDPA]
    windows = (sym("batch"), W, H)
    assert [x.type.shape[:-2] for x in (*node.inputs[:3], node.outputs[0])] == [windows] * 4
    *images, windows_, heads = node.inputs[3].type.shape[:-2]  # the masks fit [B, W, H] and repeat over images
    assert all(d == 1 for d in images) and windows_ == W and heads in (1, H)
    assert fused.outputs[0].type.shape == (mul(sym("batch"), W), H, sym("seq"), D) and _count(fused, Op.REDUCE_MAX) == 0


def test_near_miss_masks_under_groupings_no_one_fits() -> None:
    """A per-window padding bias over [B*W] and the shift mask over [B, W, H]: neither grouping fits both."""

    def fn(x, rel, win):
        b, w, s, c = x.shape
        pad = (x[..., 0] > 0).float().reshape(b * w, 1, 1, s) * -1e4
        q, k, v = _qkv(x.reshape(b * w, s, c))
        scores = (_scale_on_q(q, k) + pad).reshape(b, w, H, s, s) + win[None, :, None]
        return F.softmax(scores.reshape(b * w, H, s, s), dim=-1) @ v

    (reason,) = _explained(fn, WINDOW_SPEC)
    assert "no one grouping of the scores' batch dims fits every mask, added as %" in reason


def test_near_miss_mask_growing_regrouped_scores() -> None:
    """One head's scores viewed as [B, W, 1] and broadcast to [B, W, H] by the mask: not a mask of attention."""

    def fn(x, rel, win):
        b, w, s, c = x.shape
        q, k, v = _qkv(x.reshape(b * w, s, c))
        scores = _scale_on_q(q[:, :1], k[:, :1]).reshape(b, w, 1, s, s) + rel[None, None]
        return F.softmax(scores.reshape(b * w, H, s, s), dim=-1) @ v

    (reason,) = _explained(fn, WINDOW_SPEC)
    assert "which a reshape regroups" in reason


def test_the_sdpa_decomposition_folds_back_into_one_sdpa() -> None:
    """ONNX export writes SDPA as the op table's decomposition (a safe softmax: fully masked rows give 0); its
    import must fold back into one attention with the same answer, fully masked rows included."""
    pytest.importorskip("onnx")
    from aotc.onnx import export_graph, import_onnx

    def f(q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)

    s = Dim("seq", 2, 16)
    spec = TensorSpec((1, 2, s, 8))
    graph = trace(f, {"q": spec, "k": spec, "v": spec, "keep": TensorSpec((1, 1, s, s), "bool")})
    again = import_onnx(export_graph(graph), dims={"seq": (2, 16)})
    fused = lower(again, FUSE)
    assert _count(fused, Op.SDPA) == 1 and _count(fused, Op.EXP) == 0
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 5, 8)).astype(np.float32) for _ in range(3))
    keep = np.ones((1, 1, 5, 5), bool)
    keep[..., 2, :] = False  # a fully masked row: 0, as PyTorch's SDPA gives
    (got,) = GraphRunner(fused).run([q, k, v, keep], {"seq": 5})
    (want,) = GraphRunner(graph).run([q, k, v, keep], {"seq": 5})
    assert (got[..., 2, :] == 0).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
