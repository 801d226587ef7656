"""The flash-attention template under the Triton interpreter against the op table's SDPA reference
(aotc/ir/ops/nn.py, float64 numpy), over a table of masks, lengths, head dims, dtypes and head layouts.

Every listed value (lengths 1, 17, 128, 1000 and differing q/k lengths; head dims 32, 64, 80, 128 and
the 16/256 ends; fp32/fp16/bf16; causal, bool and float masks; GQA and MQA) runs at least once here;
test_attention_slow.py holds the full cross product (slow marker). Lengths are dynamic symbols passed
as kernel arguments, and q/k/v come from one packed QKV tensor through views, read with no copy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec
from aotc.errors import UnsupportedError
from aotc.frontend.trace import trace
from aotc.ir import Builder, DType, Graph, Op, Symbol, TensorType, Value
from aotc.ir.evaluate import GraphRunner
from aotc.ir.schedule import ArgKind
from aotc.ir.symbolic import sym
from aotc.ir.templates import KernelKind
from aotc.ir.verify import graph_ctx
from aotc.kernels.attention import AttentionConfig, attention_config, emit_attention, why_not_attention
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from tests.kernel_layer.contraction_kit import anchor_of, builder_for, run_kernel

pytest.importorskip("triton")

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16
# (atol, rtol) against the float64 reference: fp32 differs by summation order; half precision by the
# rounding of p to v's dtype before the second dot and of the output (8-bit mantissa for bf16).
TOLERANCE = {F32: (2e-5, 2e-5), F16: (3e-3, 3e-3), BF16: (2.5e-2, 2.5e-2)}


@dataclass(frozen=True)
class Case:
    dtype: DType = F32
    lq: int = 17
    lk: int = 17
    d: int = 32
    heads: int = 2
    kv_heads: int = 2  # < heads: grouped-query (1: multi-query), k/v heads repeated through views
    repeat: bool = True  # False: MQA as SDPA's own broadcast of a [B, 1, Lk, D] k/v
    batch: int = 1
    causal: bool = False
    # "bool" [B, H, Lq, Lk], "pad" bool [B, 1, 1, Lk], "float" [1, H, Lq, Lk], "bias" float [B, 1, 1, Lk],
    # "2d" float [Lq, Lk]
    mask: str | None = None
    packed: bool = False  # q, k, v sliced and permuted out of one [B, L, 3, H, D] tensor (lq == lk)
    scale: float | None = None
    block: tuple[int, int] | None = (64, 64)  # interpreter-friendly tiles; None: the heuristics

    def __str__(self) -> str:
        parts = [self.dtype.value, f"q{self.lq}", f"k{self.lk}", f"d{self.d}", f"h{self.heads}/{self.kv_heads}"]
        parts += (
            ["bcast"] * (not self.repeat)
            + ["causal"] * self.causal
            + [self.mask or "nomask"]
            + ["packed"] * self.packed
        )
        return "-".join(parts)


def _symbols(case: Case) -> tuple[Symbol, ...]:
    if case.lq == case.lk and case.packed:
        return (Symbol("seq", 1, 2048),)
    return (Symbol("lq", 1, 2048), Symbol("lk", 1, 2048))


def attention_graph(case: Case) -> Graph:
    """inputs -> (views) -> SDPA -> output, with the query/key lengths as symbols."""
    symbols = _symbols(case)
    lq, lk = (sym("seq"), sym("seq")) if len(symbols) == 1 else (sym("lq"), sym("lk"))
    stub = Graph((), (), (), (), {"tuple": []}, symbols, ())
    b = Builder(graph_ctx(stub))
    bt, h, hk, d, dt = case.batch, case.heads, case.kv_heads, case.d, case.dtype
    inputs: list[Value] = []
    if case.packed:
        qkv = b.new_value(TensorType(dt, (bt, lq, 3, h, d)))
        inputs.append(qkv)
        q, k, v = (_head_split(b, qkv, i, lq) for i in range(3))
    else:
        q = b.new_value(TensorType(dt, (bt, h, lq, d)))
        k = b.new_value(TensorType(dt, (bt, hk, lk, d)))
        v = b.new_value(TensorType(dt, (bt, hk, lk, d)))
        inputs += [q, k, v]
        if hk != h and case.repeat:
            k, v = _repeat_heads(b, k, h // hk), _repeat_heads(b, v, h // hk)
    shapes = {
        "bool": (DType.bool, (bt, h, lq, lk)),
        "pad": (DType.bool, (bt, 1, 1, lk)),
        "float": (dt, (1, h, lq, lk)),
        "bias": (dt, (bt, 1, 1, lk)),
        "2d": (dt, (lq, lk)),
    }
    extra = []
    if case.mask is not None:
        mdt, mshape = shapes[case.mask]
        m = b.new_value(TensorType(mdt, mshape))
        inputs.append(m)
        extra.append(m)
    attrs = {"is_causal": case.causal} | ({} if case.scale is None else {"scale": case.scale})
    out = b.op(Op.SDPA, q, k, v, *extra, **attrs)
    names = tuple(f"in{i}" for i in range(len(inputs)))
    return Graph(tuple(inputs), names, tuple(b.nodes), (out,), {"tuple": [0]}, symbols, (), {}, "attention")


def _head_split(b: Builder, qkv: Value, i: int, lq) -> Value:
    bt, _, _, h, d = qkv.type.shape
    part = b.op(Op.SLICE, qkv, starts=(0, 0, i, 0, 0), stops=(bt, lq, i + 1, h, d), steps=(1,) * 5)
    return b.permute(b.reshape(part, (bt, lq, h, d)), (0, 2, 1, 3))


def _repeat_heads(b: Builder, x: Value, groups: int) -> Value:
    bt, hk, lk, d = x.type.shape
    wide = b.op(Op.BROADCAST, b.reshape(x, (bt, hk, 1, lk, d)), shape=(bt, hk, groups, lk, d))
    return b.reshape(wide, (bt, hk * groups, lk, d))


def feeds_for(graph: Graph, case: Case, env: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for v in graph.inputs:
        shape = tuple(d if isinstance(d, int) else env[d.symbol_name] for d in v.type.shape)
        if v.type.dtype is DType.bool:
            keep = rng.random(shape) < 0.7
            keep[..., 0] = True  # padding masks keep the first key; fully masked rows are tested apart
            out.append(keep)
        elif case.mask in ("float", "bias", "2d") and v is graph.inputs[-1]:
            bias = np.where(rng.random(shape) < 0.3, -np.inf, rng.standard_normal(shape))
            bias[..., 0] = 0.0
            out.append(bias.astype(v.type.dtype.np))
        else:
            out.append((1.5 * rng.standard_normal(shape)).astype(np.float32).astype(v.type.dtype.np))
    return out


def run_case(case: Case, feeds: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    graph = attention_graph(case)
    env = {"seq": case.lq} if len(graph.symbols) == 1 else {"lq": case.lq, "lk": case.lk}
    feeds = list(feeds) if feeds is not None else feeds_for(graph, case, env)
    node = anchor_of(graph, Op.SDPA)
    config = AttentionConfig(*case.block) if case.block else None
    kernel = emit_attention(builder_for(graph, node), node, config=config)
    got = run_kernel(graph, kernel, feeds, env)[graph.outputs[0].id]
    (want,) = GraphRunner(graph).run(feeds, env)
    return got, want


def check_case(case: Case) -> None:
    got, want = run_case(case)
    assert got.shape == want.shape and got.dtype == want.dtype
    atol, rtol = TOLERANCE[case.dtype]
    assert not np.isnan(want).any()
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol, err_msg=str(case))


# Each listed value at least once, in combinations that keep the interpreter under a minute.
TABLE = [
    Case(F32, 17, 17, 32),
    Case(F32, 128, 128, 64, causal=True),
    Case(F32, 1, 128, 80, mask="pad"),
    Case(F32, 17, 1, 32),
    Case(F32, 128, 17, 128, heads=4, kv_heads=2, mask="float"),
    Case(F32, 1000, 1000, 64, heads=1, kv_heads=1, causal=True, block=(128, 128)),
    Case(F32, 17, 128, 32, heads=4, kv_heads=1, mask="bool"),
    Case(F32, 128, 1000, 16, heads=1, kv_heads=1, mask="bias", block=(128, 128)),
    Case(F32, 17, 17, 256, causal=True, block=(32, 32)),
    Case(F32, 17, 17, 32, causal=True, packed=True, batch=2),
    Case(F16, 128, 128, 64, mask="bool"),
    Case(F16, 17, 128, 80, heads=4, kv_heads=2, causal=True),
    Case(F16, 1, 1, 128, mask="float"),
    Case(F16, 1000, 17, 32, heads=1, kv_heads=1, mask="pad", block=(128, 32)),
    Case(BF16, 17, 17, 64, causal=True),
    Case(BF16, 128, 17, 128, mask="bias", scale=0.3),
    Case(BF16, 17, 1000, 80, heads=2, kv_heads=1, mask="bool", block=(32, 128)),
    Case(BF16, 128, 128, 32, packed=True, mask="pad", batch=2),
    Case(F16, 17, 128, 64, heads=4, kv_heads=1, repeat=False, mask="2d", batch=2),
    Case(F32, 128, 17, 32, heads=2, kv_heads=1, repeat=False, causal=True),
]


@pytest.mark.parametrize("case", TABLE, ids=str)
def test_attention_matches_reference(case: Case) -> None:
    check_case(case)


def test_heuristic_config_runs() -> None:
    check_case(Case(F16, 17, 40, 64, block=None, causal=True))


def test_views_are_read_in_place() -> None:
    """Packed QKV: the kernel's only input is the packed tensor (the head split is index math)."""
    case = Case(F16, 17, 17, 32, packed=True, mask="pad")
    graph = attention_graph(case)
    node = anchor_of(graph, Op.SDPA)
    kernel = emit_attention(builder_for(graph, node), node, config=AttentionConfig(32, 32))
    assert set(kernel.inputs) == {graph.inputs[0].id, graph.inputs[1].id}
    assert kernel.outputs == (graph.outputs[0].id,) and kernel.kind is KernelKind.ATTENTION
    sizes = [a.name for a in kernel.args if a.kind is ArgKind.SIZE]
    assert sizes == ["seq"], sizes  # dynamic length as a kernel argument
    assert "BLOCK_D" in dict(kernel.constexprs) and "tl.dot" in kernel.source


def test_gqa_reads_each_kv_head_not_a_repeat() -> None:
    case = Case(F32, 17, 17, 32, heads=4, kv_heads=2)
    graph = attention_graph(case)
    node = anchor_of(graph, Op.SDPA)
    kernel = emit_attention(builder_for(graph, node), node)
    assert set(kernel.inputs) == {v.id for v in graph.inputs}  # the [B, Hkv, L, D] inputs themselves


def test_fully_masked_rows_are_zero_as_in_pytorch() -> None:
    """A row with no allowed key is 0 in the reference and in the kernel, as PyTorch's SDPA gives (its safe
    softmax), not NaN; every other row is finite even when its allowed keys start in a later key block."""
    torch = pytest.importorskip("torch")
    case = Case(F32, 17, 100, 32, mask="bool", block=(16, 16))
    graph = attention_graph(case)
    feeds = feeds_for(graph, case, {"lq": 17, "lk": 100})
    keep = np.zeros((1, 2, 17, 100), bool)
    keep[:, :, 1:, 90:] = True  # rows 1.. see only the last block; row 0 sees nothing
    keep[:, 1, 5, :] = False
    feeds[-1] = keep
    got, want = run_case(case, feeds)
    assert not np.isnan(want).any() and not np.isnan(got).any()
    assert (want[0, :, 0] == 0).all() and (got[0, :, 0] == 0).all() and (got[0, 1, 5] == 0).all()
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
    q, k, v, m = (torch.from_numpy(np.ascontiguousarray(x)) for x in feeds)
    if k.shape[1] != q.shape[1]:  # grouped-query: torch takes the heads repeated
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m).numpy()
    np.testing.assert_allclose(want, expected, atol=2e-5, rtol=2e-5)


def test_huge_negative_float_mask_stays_uniform() -> None:
    """HF-style masks use finfo.min: a fully padded row is a uniform average in numpy, not NaN."""
    case = Case(F32, 17, 40, 32, mask="bias", block=(16, 16))
    graph = attention_graph(case)
    feeds = feeds_for(graph, case, {"lq": 17, "lk": 40})
    feeds[-1] = np.full((1, 1, 1, 40), np.finfo(np.float32).min, np.float32)
    got, want = run_case(case, feeds)
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


def test_config_and_rejections() -> None:
    assert attention_config(1, 4096, 80, F16).block_m == 16  # a decode step wastes no rows
    cfg = attention_config(4096, 4096, 128, BF16, "sm_90")
    assert (cfg.block_m, cfg.block_n, cfg.num_stages, cfg.num_warps) == (128, 64, 3, 8)  # Inductor's H100 d128
    cfg = attention_config(4096, 4096, 64, BF16, "sm_90")
    assert (cfg.block_m, cfg.block_n, cfg.num_stages, cfg.num_warps) == (128, 128, 3, 8)  # its d64 tile
    assert attention_config(4096, 4096, 64, BF16, "sm_80").block_n == 64
    with pytest.raises(UnsupportedError, match="power of two"):
        AttentionConfig(48, 64)
    with pytest.raises(UnsupportedError, match="arch_hint"):
        attention_config(16, 16, 64, F16, "volta")
    graph = attention_graph(Case(F32, 17, 17, 32))
    node = anchor_of(graph, Op.SDPA)
    assert why_not_attention(node) is None
    assert "not scaled_dot_product_attention" in why_not_attention(graph.nodes[0].replace(op=Op.MATMUL))


def test_rejects_head_dims_past_256() -> None:
    graph = attention_graph(Case(F32, 17, 17, 320))
    node = anchor_of(graph, Op.SDPA)
    assert "outside [1, 256]" in why_not_attention(node)
    with pytest.raises(UnsupportedError, match="head dim 320"):
        emit_attention(builder_for(graph, node), node)


def test_hand_written_attention_through_the_pass_runs_as_one_kernel() -> None:
    """softmax(q k^T / sqrt(d)).masked_fill(pad, -inf) @ v, traced, lowered with fuse_attention: one SDPA
    node whose q/k/v are slices of the input and whose mask is computed from int ids inside the kernel."""
    h, d = 2, 24

    def fn(x, keep):
        b, s, _ = x.shape
        q, k, v = (x[..., i * h * d : (i + 1) * h * d].reshape(b, s, h, d).transpose(1, 2) for i in range(3))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(keep[:, None, None, :] == 0, float("-inf"))
        return F.softmax(scores, dim=-1) @ v

    seq = Dim("seq", min=1, max=256)
    spec = {
        "x": TensorSpec((Dim("batch", min=1, max=4), seq, 3 * h * d), "float32"),
        "keep": TensorSpec((1, seq), "int64"),
    }
    graph = lower(trace(fn, spec, name="attn"), CompileOptions(fuse_attention=True))
    node = anchor_of(graph, Op.SDPA)
    kernel = emit_attention(builder_for(graph, node), node, config=AttentionConfig(32, 32))
    assert set(kernel.inputs) == {v.id for v in graph.inputs}  # no copies: q/k/v and the mask come from the inputs
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 45, 3 * h * d)).astype(np.float32)
    keep = (rng.random((1, 45)) < 0.6).astype(np.int64)
    keep[0, 0] = 1
    env = {"batch": 2, "seq": 45}
    got = run_kernel(graph, kernel, [x, keep], env)[graph.outputs[0].id]
    (want,) = GraphRunner(lower(trace(fn, spec, name="attn"), CompileOptions())).run([x, keep], env)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


def test_shifted_window_attention_reads_its_mask_by_window() -> None:
    """Swin's shifted windows: scores over [B*W, H] viewed as [B, W, H] to add a per-window [W, S, S] mask, then
    viewed back. The pass runs attention over [B, W, H]; the kernel reads q/k/v and the mask from the inputs,
    the mask at the window index of its batch (index arithmetic, no [B*W, H, S, S] copy)."""
    h, d, w = 2, 8, 4

    def fn(x, win):
        b, nw, s, c = x.shape
        x = x.reshape(b * nw, s, c)
        q, k, v = (x[..., i * h * d : (i + 1) * h * d].reshape(b * nw, s, h, d).transpose(1, 2) for i in range(3))
        scores = (q * d**-0.5) @ k.transpose(-2, -1)
        scores = scores.reshape(b, nw, h, s, s) + win[None, :, None]
        return F.softmax(scores.reshape(b * nw, h, s, s), dim=-1) @ v

    seq = Dim("seq", min=1, max=64)
    spec = {
        "x": TensorSpec((Dim("batch", min=1, max=4), w, seq, 3 * h * d), "float32"),
        "win": TensorSpec((w, seq, seq), "float32"),
    }
    graph = lower(trace(fn, spec, name="attn"), CompileOptions(fuse_attention=True))
    node = anchor_of(graph, Op.SDPA)
    kernel = emit_attention(builder_for(graph, node), node, config=AttentionConfig(16, 16))
    assert set(kernel.inputs) == {v.id for v in graph.inputs}  # no copies: q/k/v and the mask from the inputs
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, w, 20, 3 * h * d)).astype(np.float32)
    win = np.where(rng.random((w, 20, 20)) < 0.5, -100.0, 0.0).astype(np.float32)
    env = {"batch": 3, "seq": 20}
    got = run_kernel(graph, kernel, [x, win], env)[node.outputs[0].id]
    (want,) = GraphRunner(lower(trace(fn, spec, name="attn"), CompileOptions())).run([x, win], env)
    np.testing.assert_allclose(got.reshape(want.shape), want, atol=2e-5, rtol=2e-5)


def test_three_dim_inputs_with_a_static_length() -> None:
    """[batch*heads, L, D] operands (one batch dim), static Lk and a head dim (48) padded to 64."""
    stub = Graph((), (), (), (), {"tuple": []}, (Symbol("lq", 1, 64),), ())
    b = Builder(graph_ctx(stub))
    q = b.new_value(TensorType(F32, (3, sym("lq"), 48)))
    k = b.new_value(TensorType(F32, (3, 20, 48)))
    v = b.new_value(TensorType(F32, (3, 20, 40)))  # value head dim differs from the query's
    out = b.op(Op.SDPA, q, k, v, is_causal=True, scale=0.2)
    graph = Graph((q, k, v), ("q", "k", "v"), tuple(b.nodes), (out,), {"tuple": [0]}, stub.symbols, ())
    env = {"lq": 33}
    rng = np.random.default_rng(4)
    feeds = [rng.standard_normal(s).astype(np.float32) for s in ((3, 33, 48), (3, 20, 48), (3, 20, 40))]
    node = anchor_of(graph, Op.SDPA)
    kernel = emit_attention(builder_for(graph, node), node, config=AttentionConfig(16, 16))
    assert [a.name for a in kernel.args if a.kind is ArgKind.SIZE] == ["lq"]
    got = run_kernel(graph, kernel, feeds, env)[out.id]
    (want,) = GraphRunner(graph).run(feeds, env)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_static_aligned_shapes_need_no_tail_masks(causal: bool) -> None:
    stub = Graph((), (), (), (), {"tuple": []}, (), ())
    b = Builder(graph_ctx(stub))
    q, k, v = (b.new_value(TensorType(F16, (2, n, 64))) for n in (32, 64, 64))
    out = b.op(Op.SDPA, q, k, v, is_causal=causal)
    graph = Graph((q, k, v), ("q", "k", "v"), tuple(b.nodes), (out,), {"tuple": [0]}, (), ())
    node = anchor_of(graph, Op.SDPA)
    kernel = emit_attention(builder_for(graph, node), node, config=AttentionConfig(16, 32))
    assert "mask_m" not in kernel.source and "mask_d" not in kernel.source and "lk_full" not in kernel.source
    assert ("keep" in kernel.source) is causal and not [a for a in kernel.args if a.kind is ArgKind.SIZE]
    # no tail loop; causal: the unmasked off-band loop, then the diagonal blocks (masked: their start varies)
    assert kernel.source.count("for n0 in range(") == 1 + causal
    assert ("mask_t" in kernel.source) is causal
    rng = np.random.default_rng(6)
    feeds = [rng.standard_normal((2, n, 64)).astype(np.float16) for n in (32, 64, 64)]
    got = run_kernel(graph, kernel, feeds, {})[out.id]
    (want,) = GraphRunner(graph).run(feeds, {})
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("mask_shape", [(), (1,)])
def test_a_scalar_float_mask_is_one_value_for_every_score(mask_shape: tuple[int, ...]) -> None:
    """A 0-d (or one-element) float mask, as ONNX FlexAttention's score_mod exports: it broadcasts to every
    score and, being a constant, reaches the kernel as a literal."""

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=aotc.full(mask_shape, 0.5))

    spec = {n: TensorSpec((2, 2, 3, 4), "float32") for n in "qkv"}
    graph = lower(trace(fn, spec, name="attn"), CompileOptions(fuse_attention=True))
    node = anchor_of(graph, Op.SDPA)
    kernel = emit_attention(builder_for(graph, node), node, config=AttentionConfig(16, 16))
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal((2, 2, 3, 4)).astype(np.float32) for _ in range(3)]
    got = run_kernel(graph, kernel, feeds, {})[graph.outputs[0].id]
    (want,) = GraphRunner(graph).run(feeds, {})
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6)
