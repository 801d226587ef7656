"""Matmul padding: the padded graph is the same math, pads only where the alignment rule and the cost rule say,
stores each padded weight once, and explains every decision."""

from __future__ import annotations

import dataclasses

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
    # Lowering only: these tests check graphs and cpu results, not generated kernels.
    return dataclasses.replace(CompileOptions.from_env(), kernels=False, **kw)


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


def _linear_graph(m: int | str, k: int, n: int, *, output_direct: bool = False, dtype: DType = F32) -> Graph:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, k)) * 0.1).astype(dtype.np)
    symbols = (Symbol("m", 1, 512),) if isinstance(m, str) else ()
    rows = sym(m) if isinstance(m, str) else m

    def body(b, x):
        y = b.op(Op.MATMUL, x, b.permute(const(b, "w", w), (1, 0)))
        return [y] if output_direct else [b.op(Op.ADD, y, y)]

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
        return [b.op(Op.ADD, y, y), emb]

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
        return [b.op(Op.NEG, b.op(Op.MATMUL, x, y))]

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
