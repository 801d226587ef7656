"""Matmul padding: the padded graph is the same math, pads only where the alignment rule and the cost rule say,
stores each padded weight once, and explains every decision."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

import aotc
import aotc.onnx
from aotc import Dim, TensorSpec, nn
from aotc.artifact.reader import read_artifact
from aotc.ir.dtypes import DType
from aotc.ir.evaluate import run_graph
from aotc.ir.graph import Graph, Symbol
from aotc.ir.ops import Op
from aotc.ir.symbolic import sym
from aotc.ir.types import TensorType
from aotc.ir.verify import verify
from aotc.lowering.options import CompileOptions
from aotc.lowering.padding import alignment, explain_padding, pad_matmuls, plan_padding
from tests.graph_kit import const, make_graph

F32 = DType.float32


def _options(**kw: object) -> CompileOptions:
    # Lowering only unless asked: most tests here check graphs and cpu results, not generated kernels.
    return dataclasses.replace(CompileOptions.from_env(), **{"kernels": False, **kw})


class TwoLinear(nn.Module):
    def __init__(self, d_in: int, d_mid: int, d_out: int) -> None:
        super().__init__()
        self.a = nn.Linear(d_in, d_mid)
        self.b = nn.Linear(d_mid, d_out)

    def forward(self, x):
        return self.b(self.a(x)) * 2.0


def _model(d_in: int, d_mid: int, d_out: int) -> TwoLinear:
    m = TwoLinear(d_in, d_mid, d_out)
    rng = np.random.default_rng(0)
    m.load_state_dict({k: (rng.standard_normal(v.shape) * 0.03).astype(np.float32) for k, v in m.state_dict().items()})
    return m


def _compile_both(model: nn.Module, d_in: int, max_batch: int = 64) -> tuple:
    inputs = {"x": TensorSpec((Dim("batch", min=1, max=max_batch), d_in), "float32")}
    padded = aotc.compile(model, inputs, options=_options())
    plain = aotc.compile(model, inputs, options=_options(matmul_padding=False))
    return padded, plain


def _stored(compiled: object) -> dict[str, np.ndarray]:
    return dict(read_artifact(compiled.artifact_bytes).constants)


def _close(y: np.ndarray, ref: np.ndarray) -> None:
    """Float32 agreement up to summation order: K ~ 1000 products per element, so errors scale with the
    output's magnitude, not each element's."""
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def _ops(graph: Graph, op: Op) -> list:
    return [n for n in graph.nodes if n.op is op]


def test_alignment_rule() -> None:
    assert alignment(4) == 4 and alignment(2) == 8 and alignment(8) == 2


@pytest.mark.parametrize("batch", [1, 3, 17, 64])
def test_odd_linear_is_padded_and_exact(batch: int) -> None:
    model = _model(1001, 999, 1000)
    padded, plain = _compile_both(model, 1001)
    # K 1001 -> 1004 on the first matmul (N 999 -> 1000 too), K 999 -> 1000 on the second.
    assert len(_ops(padded.lowered, Op.PAD)) == 2 and not _ops(plain.lowered, Op.PAD)
    x = np.random.default_rng(batch).standard_normal((batch, 1001)).astype(np.float32)
    y, y0 = padded(x=x), plain(x=x)
    assert y.shape == y0.shape == (batch, 1000)
    _close(y, y0)


def test_padded_weights_replace_the_originals_in_the_artifact() -> None:
    model = _model(1001, 999, 1000)
    padded, plain = _compile_both(model, 1001)
    stored, original = _stored(padded), _stored(plain)
    assert set(stored) == set(original) == set(model.state_dict())
    assert stored["a.weight"].shape == (1000, 1004) and stored["b.weight"].shape == (1000, 1000)
    np.testing.assert_array_equal(stored["a.weight"][:999, :1001], original["a.weight"])
    assert not stored["a.weight"][999:].any() and not stored["a.weight"][:, 1001:].any()
    total, total0 = (sum(a.nbytes for a in s.values()) for s in (stored, original))
    assert total0 < total < 1.01 * total0  # the padding only: no second copy of any weight


def test_aligned_linear_1000_is_left_alone() -> None:
    model = _model(1000, 1000, 1000)
    padded, plain = _compile_both(model, 1000)
    assert str(padded.lowered) == str(plain.lowered)
    for batch in (1, 3, 17):
        x = np.random.default_rng(batch).standard_normal((batch, 1000)).astype(np.float32)
        np.testing.assert_array_equal(padded(x=x), plain(x=x))


def test_bf16_needs_multiples_of_8() -> None:
    # 1004 is a multiple of 4 (aligned in float32) but not of 8 (misaligned in bfloat16).
    model = _model(1004, 1000, 1000)
    inputs = {"x": TensorSpec((Dim("batch", min=1, max=64), 1004), "float32")}
    f32 = aotc.compile(model, inputs, options=_options())
    bf16 = aotc.compile(model, inputs, options=_options(precision="bf16"))
    plain16 = aotc.compile(model, inputs, options=_options(precision="bf16", matmul_padding=False))
    assert not _ops(f32.lowered, Op.PAD)
    (pad,) = _ops(bf16.lowered, Op.PAD)
    assert pad.outputs[0].type == TensorType(DType.bfloat16, (sym("batch"), 1008))
    x = np.random.default_rng(0).standard_normal((5, 1004)).astype(np.float32)
    # Same math; the float32 sums may differ in order, which can move a bf16-rounded result by one ulp (2^-7).
    y, y0 = bf16(x=x), plain16(x=x)
    np.testing.assert_allclose(y, y0, rtol=2.0**-7, atol=2.0**-7 * float(np.abs(y0).max()))


def test_no_matmul_padding_option_turns_it_off() -> None:
    assert CompileOptions().matmul_padding is True
    _, plain = _compile_both(_model(1001, 999, 1000), 1001)
    assert not _ops(plain.lowered, Op.PAD) and not any(n.op is Op.SLICE for n in plain.lowered.nodes)


# -- the pass alone, on small graphs ---------------------------------------------------------------


def _transposed(b, v):
    """``v`` read by a view, not a pointwise op: a result that reaches the outputs only so is not a model output
    as far as the padding pass is concerned (it pads N and slices the result)."""
    return b.permute(v, tuple(reversed(range(v.type.rank))))


def _linear_graph(m: int | str, k: int, n: int, *, output_direct: bool = False, dtype: DType = F32) -> Graph:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, k)) * 0.1).astype(dtype.np)
    symbols = (Symbol("m", 1, 512),) if isinstance(m, str) else ()
    rows = sym(m) if isinstance(m, str) else m

    def body(b, x):
        y = b.op(Op.MATMUL, x, b.permute(const(b, "w", w), (1, 0)))
        return [y] if output_direct else [_transposed(b, b.op(Op.ADD, y, y))]

    return make_graph({"x": TensorType(dtype, (rows, k))}, body, symbols=symbols, constants={"w": w})


@pytest.mark.parametrize("m", [1, 3, 17])
def test_pass_is_exact_at_static_odd_batches(m: int) -> None:
    g = _linear_graph(m, 1001, 999)
    padded = pad_matmuls(g, min_macs=0)
    verify(padded, stage="matmul_padding", primitive_only=True)
    assert padded.constants["w"].shape == (1000, 1004)
    x = np.random.default_rng(m).standard_normal((m, 1001)).astype(np.float32)
    (y,), (y0,) = run_graph(padded, [x], {}), run_graph(g, [x], {})
    _close(y, y0)


def test_declines_a_memory_bound_matmul() -> None:
    report = plan_padding(_linear_graph(3, 1001, 999))  # 3M MACs
    assert report.graph.constants["w"].shape == (999, 1001) and not report.padded
    (line,) = report.lines
    assert "K 1001 -> 1004" in line and "memory-bound" in line


def test_declines_when_the_padding_adds_too_much_work() -> None:
    report = plan_padding(_linear_graph(4096, 4096, 3))  # N 3 -> 4: +33%
    (line,) = report.declined
    assert "N 3 -> 4" in line and "33.3% of the work" in line
    assert report.graph is not None and report.graph.constants["w"].shape == (3, 4096)


def test_declines_n_of_a_model_output_but_pads_its_k() -> None:
    report = plan_padding(_linear_graph(4096, 1001, 999, output_direct=True))
    (line,) = report.padded
    assert "K 1001 -> 1004" in line and "N = 999 not padded: the result is a model output" in line
    assert report.graph.constants["w"].shape == (999, 1004)
    only_n = plan_padding(_linear_graph(4096, 1000, 999, output_direct=True))
    assert not only_n.padded and "model output" in only_n.declined[0]


def test_symbolic_rows_use_their_largest_value_for_the_cost() -> None:
    g = _linear_graph("m", 1001, 999)  # m <= 512: up to 512M MACs
    assert len(plan_padding(g).padded) == 1
    x = np.random.default_rng(0).standard_normal((7, 1001)).astype(np.float32)
    (y,), (y0,) = run_graph(pad_matmuls(g), [x], {"m": 7}), run_graph(g, [x], {"m": 7})
    _close(y, y0)


def _symbolic_k_graph(multiple_of: int) -> Graph:
    def body(b, q, k):
        return [b.op(Op.MATMUL, q, k)]

    s = sym("s")
    return make_graph(
        {"q": TensorType(F32, (512, s)), "k": TensorType(F32, (s, 512))},
        body,
        symbols=(Symbol("s", multiple_of, 4096, multiple_of),),
    )


def test_symbolic_k_is_never_padded_and_says_how_to_prove_alignment() -> None:
    report = plan_padding(_symbolic_k_graph(1))
    assert report.graph.nodes == _symbolic_k_graph(1).nodes
    (line,) = report.declined
    assert "K = s" in line and "multiple_of=4" in line
    assert plan_padding(_symbolic_k_graph(4)).lines == []  # proven aligned: nothing to say


def test_integer_and_aligned_matmuls_are_silent() -> None:
    assert explain_padding(_linear_graph(4096, 1000, 1000)) == []
    assert explain_padding(_linear_graph(4096, 1001, 999, dtype=DType.int32)) == []


def test_tied_weight_is_stored_once_and_read_through_a_slice() -> None:
    """A weight read by a padded matmul and by a gather (a tied embedding) is stored padded, once."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((999, 1001)) * 0.1).astype(np.float32)

    def body(b, x, ids):
        wv = const(b, "w", w)
        emb = b.op(Op.GATHER, wv, ids, axis=0)
        y = b.op(Op.MATMUL, x, b.permute(wv, (1, 0)))
        return [_transposed(b, b.op(Op.ADD, y, y)), emb]

    g = make_graph({"x": TensorType(F32, (64, 1001)), "ids": TensorType(DType.int64, (5,))}, body, constants={"w": w})
    padded = pad_matmuls(g)
    verify(padded, stage="matmul_padding", primitive_only=True)
    assert set(padded.constants) == {"w"} and padded.constants["w"].shape == (1000, 1004)
    gather = _ops(padded, Op.GATHER)[0]
    assert gather.inputs[0].type.shape == (999, 1001)  # a SLICE view of the padded weight
    x = rng.standard_normal((64, 1001)).astype(np.float32)
    ids = np.array([0, 998, 5, 17, 3])
    out, ref = run_graph(padded, [x, ids], {}), run_graph(g, [x, ids], {})
    _close(out[0], ref[0])
    np.testing.assert_array_equal(out[1], ref[1])


def test_shared_activation_is_padded_once() -> None:
    rng = np.random.default_rng(0)
    ws = {f"w{i}": (rng.standard_normal((1000, 1001)) * 0.1).astype(np.float32) for i in range(3)}

    def body(b, x):
        ys = [b.op(Op.MATMUL, x, b.permute(const(b, n, w), (1, 0))) for n, w in ws.items()]
        return [b.op(Op.ADD, b.op(Op.ADD, ys[0], ys[1]), ys[2])]

    g = make_graph({"x": TensorType(F32, (256, 1001))}, body, constants=ws)
    padded = pad_matmuls(g)
    assert len(_ops(padded, Op.PAD)) == 1 and len(plan_padding(g).padded) == 3


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_artifact_source_graph_reads_the_padded_weights_and_exports(precision: str, tmp_path) -> None:
    """The source graph kept for ONNX export reads the stored (padded, maybe bf16) weight through a SLICE (and
    a CAST), so the file holds each weight once and the export still computes the model."""
    ort = pytest.importorskip("onnxruntime")
    model = _model(1001, 999, 1000)
    inputs = {"x": TensorSpec((Dim("batch", min=1, max=64), 1001), "float32")}
    compiled = aotc.compile(model, inputs, options=_options(precision=precision))
    art = read_artifact(compiled.artifact_bytes)
    assert art.constants["a.weight"].shape == (1000, 1008 if precision == "bf16" else 1004)
    assert any(
        n.op is Op.SLICE and n.inputs[0].type.shape == (1000, 1004 if precision == "fp32" else 1008)
        for n in art.source.nodes
    )
    path = tmp_path / "m.onnx"
    aotc.onnx.export_graph(art.source, path)
    x = np.random.default_rng(0).standard_normal((3, 1001)).astype(np.float32)
    (y,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    # The export computes in float32 with the stored (rounded) weights: float32 agreement for fp32, and
    # agreement within bf16 rounding of the activations for bf16.
    if precision == "fp32":
        _close(y, compiled(x=x))
    else:
        assert np.linalg.norm(y - compiled(x=x)) / np.linalg.norm(y) < 8 * 2.0**-8


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((2, 5, 7), (2, 7, 9)), ((3, 1, 6, 13), (4, 13, 5)), ((17, 3), (3, 10)), ((1, 1), (1, 1))],
)
def test_pass_is_exact_on_batched_activation_matmuls(a_shape: tuple, b_shape: tuple) -> None:
    """Both operands are activations (PAD views on each), batch dims broadcast, and N is sliced back."""

    def body(b, x, y):
        return [_transposed(b, b.op(Op.NEG, b.op(Op.MATMUL, x, y)))]

    g = make_graph({"x": TensorType(F32, a_shape), "y": TensorType(F32, b_shape)}, body)
    padded = pad_matmuls(g, min_macs=0, max_overhead=100.0)
    verify(padded, stage="matmul_padding", primitive_only=True)
    k, n = a_shape[-1], b_shape[-1]
    assert len(_ops(padded, Op.PAD)) == (k % 4 != 0) + (k % 4 != 0 or n % 4 != 0)
    rng = np.random.default_rng(len(a_shape))
    feeds = [rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)]
    (y,), (y0,) = run_graph(padded, feeds, {}), run_graph(g, feeds, {})
    assert y.shape == y0.shape
    _close(y, y0)


# -- the N slice sinks below pointwise consumers, into the matmul kernel's epilogue -------------------


class LinearReluLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(1000, 999)
        self.b = nn.Linear(999, 1000)

    def forward(self, x):
        return self.b(nn.functional.relu(self.a(x)))


@functools.cache
def _linear_relu_linear() -> tuple:
    """The model compiled with kernels (sources only: the suite builds no cubins), padded and not."""
    model = LinearReluLinear()
    rng = np.random.default_rng(0)
    model.load_state_dict(
        {k: (rng.standard_normal(v.shape) * 0.03).astype(np.float32) for k, v in model.state_dict().items()}
    )
    inputs = {"x": TensorSpec((Dim("batch", min=1, max=64), 1000), "float32")}
    padded = aotc.compile(model, inputs, options=_options(kernels=True))
    plain = aotc.compile(model, inputs, options=_options(kernels=True, matmul_padding=False))
    return padded, plain


def test_padded_linear_keeps_bias_and_relu_in_the_matmul_epilogue() -> None:
    """N 999 -> 1000 on the first Linear used to leave a SLICE between its matmul and the bias add, so the add
    and relu took a pointwise kernel of their own (3 kernels against 2 unpadded). With the slice sunk below
    the relu, the padded model has the unpadded model's kernels."""
    padded, plain = _linear_relu_linear()
    ops = [n.op for n in padded.lowered.nodes]
    assert ops.index(Op.MATMUL) < ops.index(Op.ADD) < ops.index(Op.MAXIMUM) < ops.index(Op.SLICE)
    assert read_artifact(padded.artifact_bytes).constants["a.bias"].shape == (1000,)  # padded once, stored once
    kinds = [k.kind.value for k in padded.schedule.kernels]
    assert kinds == [k.kind.value for k in plain.schedule.kernels] == ["matmul", "matmul"]
    assert {"matmul", "add", "maximum"} <= set(padded.schedule.kernels[0].fused)


@pytest.mark.parametrize("device", ["cpu", "interpret"])
def test_padded_linear_relu_linear_agrees_with_unpadded(device: str) -> None:
    if device == "interpret":
        pytest.importorskip("triton")
    padded, plain = _linear_relu_linear()
    exe, exe0 = aotc.load(padded.artifact_bytes, device=device), aotc.load(plain.artifact_bytes, device=device)
    for batch in (1, 3, 17):
        x = np.random.default_rng(batch).standard_normal((batch, 1000)).astype(np.float32)
        (y,), (y0,) = exe.run({"x": x}), exe0.run({"x": x})
        assert y.shape == y0.shape == (batch, 1000)
        _close(y, y0)


def _sink_graph(tail, *, extra: dict | None = None, k: int = 1001) -> Graph:
    """x (64, k) @ w^T (N = 999: padded to 1000; K 1001 -> 1004), then ``tail(b, y, bias, *extra inputs)``."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((999, k)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(999).astype(np.float32)

    def body(b, x, *rest):
        y = b.op(Op.MATMUL, x, b.permute(const(b, "w", w), (1, 0)))
        return tail(b, y, const(b, "bias", bias), *rest)

    types = {"x": TensorType(F32, (64, k)), **(extra or {})}
    return make_graph(types, body, constants={"w": w, "bias": bias})


def _run_both(g: Graph, feeds: list[np.ndarray]) -> tuple[Graph, list, list]:
    padded = pad_matmuls(g)
    verify(padded, stage="matmul_padding", primitive_only=True)
    return padded, run_graph(padded, feeds, {}), run_graph(g, feeds, {})


def _x() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((64, 1001)).astype(np.float32)


def _activation_slices(g: Graph) -> list:
    """The SLICE nodes that cut an N padding off (not the slice-back views of padded weights)."""
    consts = {n.outputs[0].id for n in _ops(g, Op.CONSTANT)}
    return [n for n in _ops(g, Op.SLICE) if n.inputs[0].id not in consts]


def test_slice_sinks_below_bias_and_activation_and_the_bias_is_padded_once() -> None:
    def tail(b, y, bias):
        z = b.op(Op.MAXIMUM, b.op(Op.ADD, y, bias), b.full(0.0, F32))
        return [_transposed(b, z), b.op(Op.NEG, bias)]  # the bias has a second reader, which reads a SLICE of it

    padded, out, ref = _run_both(_sink_graph(tail), [_x()])
    assert padded.constants["bias"].shape == (1000,) and padded.constants["w"].shape == (1000, 1004)
    (add,) = _ops(padded, Op.ADD)
    (maximum,) = _ops(padded, Op.MAXIMUM)
    assert add.outputs[0].type.shape == maximum.outputs[0].type.shape == (64, 1000)
    assert [s.inputs[0] for s in _activation_slices(padded)] == [maximum.outputs[0]]
    assert len(_ops(padded, Op.PAD)) == 1  # x's K pad only: the bias is padded at compile time
    _close(out[0], ref[0])
    np.testing.assert_array_equal(out[1], ref[1])


def test_an_activation_operand_is_padded_with_a_view_and_its_padding_is_never_read() -> None:
    """A residual-like operand with the full N gets a PAD view (zeros), so (y + bias) / r is 0 / 0 = nan in the
    padded column, which the slice drops unread."""

    def tail(b, y, bias, r):
        return [_transposed(b, b.op(Op.DIV, b.op(Op.ADD, y, bias), r))]

    g = _sink_graph(tail, extra={"r": TensorType(F32, (64, 999))})
    r = np.random.default_rng(2).uniform(0.5, 2.0, (64, 999)).astype(np.float32)
    padded, (y,), (y0,) = _run_both(g, [_x(), r])
    (div,) = _ops(padded, Op.DIV)
    src = {o.id: n for n in padded.nodes for o in n.outputs}[div.inputs[1].id]
    assert src.op is Op.PAD and src.inputs[0].id == g.inputs[1].id and div.outputs[0].type.shape == (64, 1000)
    assert np.isfinite(y).all()
    _close(y, y0)


def test_a_chain_to_a_model_output_keeps_n_unpadded() -> None:
    """bias and relu then the output: the output is stored unpadded, so padding N would cost a copy."""

    def tail(b, y, bias):
        return [b.op(Op.MAXIMUM, b.op(Op.ADD, y, bias), b.full(0.0, F32))]

    report = plan_padding(_sink_graph(tail))
    (line,) = report.padded
    assert "K 1001 -> 1004" in line and "N = 999 not padded: the result is a model output through add, maximum" in line
    assert not _activation_slices(report.graph) and report.graph.constants["bias"].shape == (999,)
    only_n = plan_padding(_sink_graph(tail, k=1000))
    (line,) = only_n.declined
    assert "only N = 999 is misaligned" in line and "model output through add, maximum" in line
    assert only_n.graph.constants["bias"].shape == (999,)


def test_integer_ops_stop_the_sink() -> None:
    """A cast to int32 ends the chain: integer division must not meet the zero padding."""

    def tail(b, y, bias, d):
        q = b.op(Op.DIV, b.cast(b.op(Op.ADD, y, bias), DType.int32), d)
        return [_transposed(b, q)]

    g = _sink_graph(tail, extra={"d": TensorType(DType.int32, (64, 999))})
    d = np.random.default_rng(3).integers(1, 5, (64, 999)).astype(np.int32)
    padded, (y,), (y0,) = _run_both(g, [_x() * 50, d])
    (cast,) = _ops(padded, Op.CAST)
    (add,) = _ops(padded, Op.ADD)
    assert add.outputs[0].type.shape == (64, 1000) and cast.inputs[0].type.shape == (64, 999)
    assert not any(p.inputs[0].type.dtype is DType.int32 for p in _ops(padded, Op.PAD))
    # The K-padded float sums may round differently, which can move a truncated quotient by one.
    assert y.dtype == np.int32 and np.abs(y - y0).max() <= 1
