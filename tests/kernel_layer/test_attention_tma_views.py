"""The Hopper attention kernel's descriptor (TMA) loads through views (issue 27): q, k and v split out of one
packed QKV buffer (GPT-2's ``c_attn`` output, split on its last dim, and the [B, L, 3, H, D] layout), and the
k/v head repeat of grouped-query attention, load through descriptors over the buffer under the views; under the
Triton interpreter they match torch's SDPA, and sm_90a code built here with no GPU loads them by TMA. A view TMA
cannot take (a cast, a head dim that is not contiguous, a row stride or base offset not a multiple of 16 bytes,
a broadcast along the keys, a reshape whose rows have no fixed stride) keeps the pointer loads, with its reason in
the kernel and in --explain."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec
from aotc.artifact.reader import read_artifact
from aotc.artifact.source_bounds import check_source
from aotc.ir import Builder, DType, Graph, Op, Symbol, TensorType, Value
from aotc.ir.index import index_var
from aotc.ir.schedule import Kernel
from aotc.ir.symbolic import sym
from aotc.ir.verify import graph_ctx
from aotc.kernels.attention import AttentionConfig, emit_attention
from aotc.kernels.attention_tma import why_not_descriptor
from aotc.kernels.emit import KernelBuilder
from aotc.kernels.explain import explain
from aotc.kernels.scheduler import schedule_graph
from aotc.kernels.strided_views import window
from aotc.lowering.options import CompileOptions
from tests.kernel_layer.contraction_kit import anchor_of, builder_for, run_kernel
from tests.kernel_layer.test_attention import BF16, F16, TOLERANCE, Case, attention_graph

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

HOPPER_PTX = 87  # what a CUDA 12.8 driver floor builds sm_90 at (ptxas 12.9)
DESCRIPTORS = ("q_desc = tl.make_tensor_descriptor(", "k_desc = tl.make_tensor_descriptor(", "v_desc = ")


@dataclass(frozen=True)
class Packed:
    """GPT-2's attention input: one [B, seq, width] buffer whose last dim holds q, k, v from element ``start``
    on, each [H * D] split into heads by a slice, a reshape and a permute. ``layout`` bends one of them into a
    view TMA cannot take ("" for none)."""

    dtype: DType = F16
    seq: int = 37
    d: int = 32
    heads: int = 2
    batch: int = 2
    start: int = 0
    width: int | None = None  # the buffer's row, 3 * H * D + start unless given
    causal: bool = False
    layout: str = ""  # "cast": k through a cast; "transposed": k's head dim strided; "broadcast": k's rows stride 0

    def __str__(self) -> str:
        return f"{self.dtype.value}-s{self.seq}-d{self.d}-h{self.heads}-at{self.start}" + "-causal" * self.causal


def packed_graph(p: Packed) -> Graph:
    seq = sym("seq")
    stub = Graph((), (), (), (), {"tuple": []}, (Symbol("seq", 1, 2048),), ())
    b = Builder(graph_ctx(stub))
    hd = p.heads * p.d
    width = p.width or 3 * hd + p.start
    x = b.new_value(TensorType(p.dtype, (p.batch, seq, width)))
    heads = []
    for t in range(3):
        lo = p.start + t * hd
        part = b.op(Op.SLICE, x, starts=(0, 0, lo), stops=(p.batch, seq, lo + hd), steps=(1, 1, 1))
        heads.append(b.permute(b.reshape(part, (p.batch, seq, p.heads, p.d)), (0, 2, 1, 3)))
    q, k, v = heads
    inputs: list[Value] = [x]
    if p.layout == "cast":
        k32 = b.new_value(TensorType(DType.float32, (p.batch, p.heads, seq, p.d)))
        inputs.append(k32)
        k = b.cast(k32, p.dtype)
    elif p.layout == "transposed":  # a [B, H, D, seq] buffer read as [B, H, seq, D]: the head dim strides by seq
        kt = b.new_value(TensorType(p.dtype, (p.batch, p.heads, p.d, seq)))
        inputs.append(kt)
        k = b.permute(kt, (0, 1, 3, 2))
    elif p.layout == "broadcast":  # one key row for every position
        k1 = b.new_value(TensorType(p.dtype, (p.batch, p.heads, 1, p.d)))
        inputs.append(k1)
        k = b.op(Op.BROADCAST, k1, shape=(p.batch, p.heads, seq, p.d))
    out = b.op(Op.SDPA, q, k, v, is_causal=p.causal)
    names = tuple(f"in{i}" for i in range(len(inputs)))
    return Graph(tuple(inputs), names, tuple(b.nodes), (out,), {"tuple": [0]}, stub.symbols, (), {}, "packed")


def merged_rows_graph() -> Graph:
    """k's 20 rows merged from a [4, 5] grid stored [5, 4]: row r sits at (r % 5) * 4 + r // 5, no fixed stride."""
    b = Builder()
    q = b.new_value(TensorType(F16, (1, 2, 20, 16)))
    kb = b.new_value(TensorType(F16, (1, 2, 5, 4, 16)))
    k = b.reshape(b.permute(kb, (0, 1, 3, 2, 4)), (1, 2, 20, 16))
    v = b.new_value(TensorType(F16, (1, 2, 20, 16)))
    out = b.op(Op.SDPA, q, k, v)
    return Graph((q, kb, v), ("q", "k", "v"), tuple(b.nodes), (out,), {"tuple": [0]}, (), (), {}, "merged")


def symbolic_stride_graph(multiple_of: int = 1, seq_first: bool = False) -> Graph:
    """q, k, v whose rows stride by a symbol: seq-first [seq, nb, 2, 16] buffers (the stride nb * 32 is a multiple
    of 16 bytes for every nb), or the first 16 columns of [2, seq, w] buffers (the stride w is one only when w is
    declared ``multiple_of`` 8)."""
    syms = (Symbol("seq", 1, 512), Symbol("nb", 1, 8), Symbol("w", 16, 64, multiple_of))
    b = Builder(graph_ctx(Graph((), (), (), (), {"tuple": []}, syms, ())))
    seq, nb, w = (sym(s.name) for s in syms)
    shape = (seq, nb, 2, 16) if seq_first else (2, seq, w)
    inputs = [b.new_value(TensorType(F16, shape)) for _ in range(3)]
    if seq_first:
        q, k, v = (b.permute(x, (1, 2, 0, 3)) for x in inputs)
    else:
        cols = [b.op(Op.SLICE, x, starts=(0, 0, 0), stops=(2, seq, 16), steps=(1, 1, 1)) for x in inputs]
        q, k, v = (b.reshape(x, (2, 1, seq, 16)) for x in cols)
    out = b.op(Op.SDPA, q, k, v, is_causal=True)
    return Graph(tuple(inputs), ("q", "k", "v"), tuple(b.nodes), (out,), {"tuple": [0]}, syms, (), {}, "strided")


def kernel_of(graph: Graph, block: tuple[int, int] | None = (16, 16), name: str = "attention") -> Kernel:
    node = anchor_of(graph, Op.SDPA)
    config = AttentionConfig(*block) if block else None
    return emit_attention(builder_for(graph, node), node, arch_hint="sm_90", config=config, ptx=HOPPER_PTX, name=name)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """torch's SDPA in float64, k and v repeated over the query heads where they have fewer."""
    groups = q.shape[1] // k.shape[1]
    k, v = (np.repeat(x, groups, axis=1) for x in (k, v))
    t = (torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)) for x in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal).numpy()


def split(p: Packed, x: np.ndarray) -> list[np.ndarray]:
    hd = p.heads * p.d
    parts = [x[:, :, p.start + t * hd : p.start + (t + 1) * hd] for t in range(3)]
    return [y.reshape(p.batch, p.seq, p.heads, p.d).transpose(0, 2, 1, 3).astype(np.float32) for y in parts]


def check(got: np.ndarray, want: np.ndarray, dtype: DType, what: str) -> None:
    atol, rtol = TOLERANCE[dtype]
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got.astype(np.float64), want, atol=atol, rtol=rtol, err_msg=what)


PACKED = [
    Packed(F16, 37, 32, causal=True),  # an odd length: the tail box past seq loads as zeros
    Packed(BF16, 37, 64, heads=2, batch=1),
    Packed(F16, 21, 16, heads=3, start=8, width=3 * 48 + 8 + 16, causal=True),  # q at byte 16 of a 336-byte row
]


@pytest.mark.parametrize("p", PACKED, ids=str)
def test_a_gpt2_packed_qkv_loads_through_descriptors_and_matches_torch(p: Packed) -> None:
    graph = packed_graph(p)
    k = kernel_of(graph)
    assert all(d in k.source for d in DESCRIPTORS) and "tl.load(" not in k.source
    width = p.width or 3 * p.heads * p.d + p.start
    assert f"strides=[{width}, 1]" in k.source  # each head's rows step by the buffer's row
    rng = np.random.default_rng(p.seq + p.d)
    x = (1.5 * rng.standard_normal((p.batch, p.seq, width))).astype(p.dtype.np)
    got = run_kernel(graph, k, [x], {"seq": p.seq})[graph.outputs[0].id]
    check(got, reference(*split(p, x), p.causal), p.dtype, str(p))


VIEW_CASES = [
    Case(F16, 37, 37, 32, causal=True, packed=True, batch=2, block=(16, 16)),  # [B, L, 3, H, D], sliced on dim 2
    Case(F16, 37, 37, 64, packed=True, block=(16, 32)),
    Case(F16, 17, 33, 32, heads=4, kv_heads=2, causal=True, batch=2, block=(16, 16)),  # GQA: k, v repeated
    Case(BF16, 19, 19, 16, heads=3, kv_heads=1, block=(16, 16)),  # MQA through the repeat views
]


@pytest.mark.parametrize("case", VIEW_CASES, ids=str)
def test_head_split_and_head_repeat_views_load_through_descriptors_and_match_torch(case: Case) -> None:
    graph = attention_graph(case)
    k = kernel_of(graph, case.block)
    assert all(d in k.source for d in DESCRIPTORS) and "tl.load(" not in k.source
    env = {"seq": case.lq} if case.packed else {"lq": case.lq, "lk": case.lk}
    rng = np.random.default_rng(case.lq + case.d)
    feeds = [(1.5 * rng.standard_normal(shape_of(v, env))).astype(case.dtype.np) for v in graph.inputs]
    got = run_kernel(graph, k, feeds, env)[graph.outputs[0].id]
    if case.packed:
        q, kk, v = (feeds[0][:, :, t].transpose(0, 2, 1, 3) for t in range(3))
    else:
        q, kk, v = feeds
    check(got, reference(*(y.astype(np.float32) for y in (q, kk, v)), case.causal), case.dtype, str(case))


def shape_of(v: Value, env: dict[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else env[d.symbol_name] for d in v.type.shape)


@pytest.mark.parametrize("p", [PACKED[0], Packed(F16, 37, 64, heads=2, start=8, width=400)], ids=str)
def test_source_bounds_accept_the_view_descriptors(p: Packed) -> None:
    k = kernel_of(packed_graph(p))
    for seq in (1, 15, 16, 37, 200):
        check_source(k, {"seq": seq}, f"{k.name} at seq {seq}")


REFUSED = [
    (Packed(F16, 37, 8, start=4, width=56), "q", "base offset in the buffer, 56*i0*seq + 8*i1 + 4 x 2 bytes"),  # byte 8
    (Packed(F16, 37, 8, width=3 * 16 + 4), "k", "row stride, 52 x 2 bytes, is not a multiple of 16 bytes"),
    (Packed(F16, 37, 32, layout="cast"), "k", "(through a cast), not a strided view"),
    (Packed(F16, 37, 32, layout="transposed"), "k", "head dim has stride seq in its buffer"),
    (Packed(F16, 37, 32, layout="broadcast"), "k", "rows have stride 0 in its buffer (a broadcast"),
]


@pytest.mark.parametrize("p,role,why", REFUSED, ids=["base", "stride", "cast", "transposed", "broadcast"])
def test_views_tma_cannot_take_keep_pointer_loads_and_say_why(p: Packed, role: str, why: str) -> None:
    graph = packed_graph(p)
    k = kernel_of(graph)
    assert f"{role}_desc = " not in k.source
    (comment,) = [line.strip() for line in k.source.splitlines() if line.strip().startswith(f"# {role} keeps")]
    assert why in comment, comment
    node = anchor_of(graph, Op.SDPA)
    operand = node.inputs["qkv".index(role)]
    reason = why_not_descriptor(builder_for(graph, node), operand, 90, HOPPER_PTX)
    assert reason is not None and why in reason, reason
    if p.layout in ("cast", "transposed", "broadcast"):  # q and v, plain views, still take descriptors
        assert "q_desc = " in k.source and "v_desc = " in k.source


def test_a_reshape_that_leaves_rows_no_fixed_stride_keeps_pointer_loads() -> None:
    graph = merged_rows_graph()
    k = kernel_of(graph)
    assert "k_desc = " not in k.source and "q_desc = " in k.source and "v_desc = " in k.source
    assert "# k keeps pointer loads: the views leave dim 2 of the operand no fixed stride" in k.source
    rng = np.random.default_rng(3)
    q, kb, v = ((1.5 * rng.standard_normal(x.type.shape)).astype(np.float16) for x in graph.inputs)
    got = run_kernel(graph, k, [q, kb, v], {})[graph.outputs[0].id]
    kk = kb.transpose(0, 1, 3, 2, 4).reshape(1, 2, 20, 16)
    check(got, reference(q.astype(np.float32), kk.astype(np.float32), v.astype(np.float32), False), F16, "merged")


def test_a_symbolic_row_stride_takes_descriptors_only_where_its_alignment_is_proven() -> None:
    graph = symbolic_stride_graph(seq_first=True)
    k = kernel_of(graph)
    assert all(d in k.source for d in DESCRIPTORS) and "strides=[nb * 32, 1]" in k.source
    env = {"seq": 37, "nb": 3, "w": 16}
    rng = np.random.default_rng(5)
    feeds = [rng.standard_normal((37, 3, 2, 16)).astype(np.float16) for _ in range(3)]
    got = run_kernel(graph, k, feeds, env)[graph.outputs[0].id]
    check(got, reference(*(x.transpose(1, 2, 0, 3).astype(np.float32) for x in feeds), True), F16, "seq first")
    for at in ({"seq": 1, "nb": 1, "w": 16}, {"seq": 300, "nb": 8, "w": 16}):
        check_source(k, at, f"seq first at {at}")
    unproven = kernel_of(symbolic_stride_graph())
    assert not any(d in unproven.source for d in DESCRIPTORS) and "out_desc.store(" in unproven.source  # [.., 16] rows
    assert "# q keeps pointer loads: its row stride, w x 2 bytes, is not a multiple of 16 bytes" in unproven.source
    declared = kernel_of(symbolic_stride_graph(multiple_of=8))
    assert all(d in declared.source for d in DESCRIPTORS) and "strides=[w, 1]" in declared.source


GRAPHS = {
    "gpt2": lambda: packed_graph(PACKED[2]),
    "packed": lambda: attention_graph(VIEW_CASES[0]),
    "gqa": lambda: attention_graph(VIEW_CASES[2]),
    "seq-first": lambda: symbolic_stride_graph(seq_first=True),
}


@pytest.mark.parametrize("name", GRAPHS)
def test_the_scheduler_ships_the_view_descriptors_as_the_sm90_launch(name: str) -> None:
    """The arch launch stands in for the base kernel only with its args (schedule.same_launch): the descriptors'
    bases and strides read no size the pointer form does not pass, so the sm_90 launch keeps them."""
    graph = GRAPHS[name]()
    (k,) = schedule_graph(graph, CompileOptions(cuda_driver_floor="12.8")).kernels
    (hopper,) = [v.kernel for v in k.arch_launches if v.arch == "sm_90"]
    assert all(d in hopper.source for d in DESCRIPTORS) and "make_tensor_descriptor" not in k.source


def test_explain_names_the_operands_that_keep_pointer_loads_and_why() -> None:
    graph = packed_graph(Packed(F16, 37, 8, start=4, width=56))  # q, k and v each start 8 bytes off 16
    text = explain(graph, schedule_graph(graph, CompileOptions(cuda_driver_floor="12.8")))
    for role in "qkv":
        assert f"pointer loads of {role}: its base offset in the buffer" in text, text
    assert "TMA loads" not in text, text
    aligned = packed_graph(Packed(F16, 37, 8, start=8, width=56))
    text = explain(aligned, schedule_graph(aligned, CompileOptions(cuda_driver_floor="12.8")))
    assert "TMA loads of q, k, v" in text and "pointer loads of" not in text, text


def test_the_sm90a_code_loads_views_by_tma_and_keeps_pointers_where_it_must(tmp_path) -> None:
    """Compiled here (no GPU) at a CUDA 12.8 floor: the packed QKV's descriptors become ``cp.async.bulk.tensor``;
    the one whose heads start 8 bytes off a 16-byte boundary keeps its pointer loads (no TMA load in its PTX)."""
    from aotc.kernels.aot import AotOptions, compile_cubins

    good = kernel_of(packed_graph(Packed(BF16, 37, 64, heads=4, batch=2, causal=True)), None, "attn_packed")
    odd = kernel_of(packed_graph(Packed(F16, 37, 8, start=4, width=56)), None, "attn_offset")
    assert "# q keeps pointer loads" in odd.source and "tl.load(" in odd.source
    options = AotOptions(cuda_driver_floor="12.8", cache_dir=str(tmp_path / "cache"))
    out = compile_cubins([good, odd], "sm_90", options)
    for c in out.values():
        assert not isinstance(c, str), c
    assert out["attn_packed"].ptx.count("cp.async.bulk.tensor") >= 3, "q, k and v each load by TMA"
    # no TMA load (global to shared); its aligned output still stores by TMA (test_attention_tma_store.py)
    assert out["attn_offset"].meta.arch == "sm_90a" and ".shared::cta.global" not in out["attn_offset"].ptx
    assert out["attn_packed"].meta.global_scratch_size >= 3 * 128, out["attn_packed"].meta


def test_a_model_with_gpt2s_head_split_ships_the_view_descriptors(tmp_path) -> None:
    """End to end, as models/gpt2.py splits its c_attn output: the sm_90 launch of the file compiled at a 12.8 floor
    loads q, k, v through descriptors over the packed input, the reader accepts its source at load, and the
    portable kernel (what the interpreter runs) matches torch."""
    seq = Dim("seq", min=1, max=512)

    def attend(qkv):
        b, t, _ = qkv.shape
        q, k, v = (x.reshape(b, t, 4, 16).transpose(1, 2) for x in qkv.split(64, dim=2))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    options = CompileOptions(cuda_driver_floor="12.8", targets=("sm_80", "sm_90"))
    path = tmp_path / "packed.aotc"
    aotc.compile(attend, {"qkv": TensorSpec((2, seq, 192), "float16")}, options=options).save(str(path))
    (launch,) = read_artifact(str(path)).variants[0].plan.kernels
    (hopper,) = [v.kernel for v in launch.arch_launches if v.arch == "sm_90"]
    assert all(d in hopper.source for d in DESCRIPTORS) and "strides=[192, 1]" in hopper.source
    x = np.random.default_rng(0).standard_normal((2, 37, 192)).astype(np.float16)
    got = aotc.load(str(path), device="interpret")(qkv=x)
    p = Packed(F16, 37, 16, heads=4)
    check(got, reference(*split(p, x), True), F16, "gpt2 split")


def _window_of(view: str) -> tuple | str:
    """k's window (strides over its last two dims, base) when k is [2, 1, rows, 16], read from the second of the
    three [16] columns of a [2, 40, 3, 16] buffer through ``view``, every view computed in the kernel."""
    b = Builder()
    x = b.new_value(TensorType(F16, (2, 40, 3, 16)))
    step = 2 if view == "rows-step-2" else 1
    part = b.op(Op.SLICE, x, starts=(0, 0, 1, 0), stops=(2, 40, 2, 16), steps=(1, step, 1, 1))
    if view.startswith("flip"):
        part = b.op(Op.FLIP, part, axes=(1 if view == "flip-rows" else 0,))
    k = b.permute(part, (0, 2, 1, 3))
    graph = Graph((x,), ("x",), tuple(b.nodes), (k,), {"tuple": [0]}, (), (), {}, "window")
    producers = {o.id: (i, n) for i, n in enumerate(graph.nodes) for o in n.outputs}
    builder = KernelBuilder(graph, set(producers), producers)
    found = window(builder, k, (2, 3))
    return found if isinstance(found, str) else (found.strides, found.base)


I0 = index_var("i0")  # k's batch index, which the window's base holds


@pytest.mark.parametrize(
    "view,want",
    [
        ("rows-step-2", ((96, 1), I0 * 1920 + 16)),  # every other row: twice the buffer's row of 48
        ("flip-rows", ((-48, 1), I0 * 1920 + 39 * 48 + 16)),  # from the last row down
        ("flip-batch", ((48, 1), 1920 - I0 * 1920 + 16)),  # a batch flip moves the base only
    ],
)
def test_a_window_is_the_affine_offset_the_views_give(view: str, want: tuple) -> None:
    assert _window_of(view) == want
