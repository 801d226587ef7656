"""Split-K: a small-output, long-K matmul becomes S float32 partial products and a sum; the split graph is the
same math, the rule splits only where it pays, and every near miss says why. Also MATMUL's out_dtype attr."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.artifact.reader import read_artifact
from aotc.artifact.writer import write_artifact
from aotc.errors import ShapeError
from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType
from aotc.ir.evaluate import run_graph
from aotc.ir.graph import Graph, Symbol
from aotc.ir.ops import OPS, Op
from aotc.ir.symbolic import sym
from aotc.ir.types import Attrs, TensorType
from aotc.ir.verify import verify
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import explain_lowering, stages
from aotc.lowering.splitk import SplitPlan, explain_split_k, plan_split_k, split_decision, split_k
from aotc_cli.main import cli
from tests.graph_kit import const, make_graph

F32, BF16 = DType.float32, DType.bfloat16


def _options(**kw: object) -> CompileOptions:
    # Lowering only: the kernels of the split graph are checked in tests/kernel_layer/test_splitk_interpret.py.
    return dataclasses.replace(CompileOptions.from_env(), kernels=False, **kw)


class Proj(nn.Module):
    """A decode-step projection: Linear (bias) + GELU on a [batch, seq, K] input."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.fc = nn.Linear(k, n)

    def forward(self, x):
        return F.gelu(self.fc(x))


def _proj(k: int, n: int) -> Proj:
    m = Proj(k, n)
    rng = np.random.default_rng(0)
    m.load_state_dict(
        {key: (rng.standard_normal(v.shape) * 0.05).astype(np.float32) for key, v in m.state_dict().items()}
    )
    return m


def _ops(graph: Graph, op: Op) -> list:
    return [n for n in graph.nodes if n.op is op]


def _close(y: np.ndarray, ref: np.ndarray) -> None:
    """float32 agreement up to summation order (errors scale with the output's magnitude)."""
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


# -- whole compiles on the cpu backend --------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_decode_projection_is_split_and_the_same_math(precision: str) -> None:
    model = _proj(2048, 64)
    inputs = {"x": TensorSpec((Dim("batch", min=1, max=2), 3, 2048), "float32")}
    split = aotc.compile(model, inputs, options=_options(precision=precision))
    plain = aotc.compile(model, inputs, options=_options(precision=precision, split_k=False))
    (mm,) = _ops(split.lowered, Op.MATMUL)
    assert mm.outputs[0].type == TensorType(F32, (8, 3 * sym("batch"), 64))  # S = 8 slices of 256
    assert mm.attrs.get("out_dtype") == ("float32" if precision == "bf16" else None)
    (red,) = _ops(split.lowered, Op.REDUCE_SUM)
    assert red.attrs["axes"] == (0,) and red.outputs[0].type == TensorType(F32, (sym("batch"), 3, 64))
    (mm0,) = _ops(plain.lowered, Op.MATMUL)
    assert mm0.outputs[0].type.shape == (sym("batch"), 3, 64) and not _ops(plain.lowered, Op.REDUCE_SUM)
    for batch in (1, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 2048)).astype(np.float32)
        y, y0 = split(x=x), plain(x=x)
        assert y.shape == y0.shape == (batch, 3, 64) and y.dtype == y0.dtype == np.float32
        if precision == "fp32":
            _close(y, y0)
        else:
            # Both round the float32 sum to bf16 once; the summation order may move that by one ulp (2^-7).
            np.testing.assert_allclose(y, y0, rtol=2.0**-7, atol=2.0**-7 * float(np.abs(y0).max()))


def test_split_k_option_env_and_stage() -> None:
    assert CompileOptions().split_k is True
    names = [name for name, _ in stages(CompileOptions())]
    assert names.index("split_k") == names.index("matmul_padding") + 1
    assert "split_k" not in [name for name, _ in stages(CompileOptions(split_k=False))]
    assert CompileOptions().key() != CompileOptions(split_k=False).key()


def test_env_turns_split_k_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOTC_NO_SPLIT_K", "1")
    assert CompileOptions.from_env().split_k is False
    monkeypatch.setenv("AOTC_NO_SPLIT_K", "0")
    assert CompileOptions.from_env().split_k is True


def test_explain_lowering_says_how_it_split() -> None:
    model = _proj(2048, 64)
    inputs = {"x": TensorSpec((Dim("batch", min=1, max=2), 3, 2048), "float32")}
    compiled = aotc.compile(model, inputs, options=_options())
    lines = [s for s in explain_lowering(compiled.graph, compiled.options) if "split-K" in s]
    assert len(lines) == 1 and lines[0].startswith("split-K: matmul") and "2048 in 8 slices of 256" in lines[0]
    assert "lowering:" in compiled.explain() and "split-K: matmul" in compiled.explain()


MODEL_FILE = """
import numpy as np
from aotc import Dim, TensorSpec, nn

model = nn.Linear(2048, 16)
model.load_state_dict({"weight": np.ones((16, 2048), np.float32), "bias": np.zeros(16, np.float32)})
inputs = {"x": TensorSpec((Dim("batch", min=1, max=4), 2048), "float32")}
"""


def test_no_split_k_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOTC_NO_KERNELS", "1")
    src = tmp_path / "proj.py"
    src.write_text(MODEL_FILE)
    reduces = {}
    for flags in ((), ("--no-split-k",)):
        result = CliRunner().invoke(cli, ["compile", str(src), "-o", str(tmp_path / "p.aotc"), *flags])
        assert result.exit_code == 0, result.output
        art = read_artifact(tmp_path / "p.aotc")
        assert art.meta["options"]["split_k"] is not bool(flags)
        reduces[flags] = len(_ops(art.variants[0].graph, Op.REDUCE_SUM))
    assert reduces == {(): 1, ("--no-split-k",): 0}


# -- the pass alone, on small graphs ---------------------------------------------------------------


def _linear(rows: int | str, k: int | str, n: int, *, dtype: DType = F32, hi: int = 8, epilogue: bool = True) -> Graph:
    """x[rows, k] @ w^T (+ bias, tanh); a str is a symbolic dim in [1, hi]."""
    rng = np.random.default_rng(0)
    w = None if isinstance(k, str) else (rng.standard_normal((n, k)) * 0.05).astype(dtype.np)
    bias = rng.standard_normal(n).astype(dtype.np) if dtype.is_float else rng.integers(-3, 4, n).astype(dtype.np)
    symbols = tuple(Symbol(d, 1, hi) for d in (rows, k) if isinstance(d, str))
    dim = {d: sym(d) for d in (rows, k) if isinstance(d, str)}
    r, kk = dim.get(rows, rows), dim.get(k, k)

    def body(b, x, *rest):
        wt = rest[0] if rest else b.permute(const(b, "w", w), (1, 0))
        y = b.op(Op.MATMUL, x, wt)
        if epilogue:
            y = b.op(Op.ADD, y, const(b, "bias", bias))
            y = b.op(Op.TANH, y) if dtype.is_float else y
        return [y]

    inputs = {"x": TensorType(dtype, (r, kk))}
    constants = {"bias": bias} if epilogue else {}
    if w is None:
        inputs["w"] = TensorType(dtype, (kk, n))
    else:
        constants["w"] = w
    return make_graph(inputs, body, symbols=symbols, constants=constants)


def _feeds(g: Graph, env: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [tuple(d if isinstance(d, int) else env[d.symbol_name] for d in v.type.shape) for v in g.inputs]
    return [rng.standard_normal(s).astype(v.type.dtype.np) for s, v in zip(shapes, g.inputs)]


@pytest.mark.parametrize("rows", [1, 5, "batch"])
def test_pass_is_the_same_math(rows: int | str) -> None:
    g = _linear(rows, 4096, 48)
    out = split_k(g)
    verify(out, stage="split_k", primitive_only=True)
    (mm,) = _ops(out, Op.MATMUL)
    assert mm.inputs[1].type.shape == (16, 256, 48)  # the largest S: 16 slices of 256
    for n in (1, 3, 8) if rows == "batch" else (rows,):
        env = {"batch": n} if rows == "batch" else {}
        feeds = _feeds(g, env, seed=n)
        (y,), (y0,) = run_graph(out, feeds, env), run_graph(g, feeds, env)
        _close(y, y0)


def test_batched_activation_rows_fold_and_come_back() -> None:
    """a[batch, seq, K] with both dims dynamic: the rows fold into R = batch * seq, the sum is at [batch, seq, N]."""

    def body(b, x):
        return [b.op(Op.MATMUL, x, b.permute(const(b, "w", w), (1, 0)))]

    w = (np.random.default_rng(0).standard_normal((32, 2048)) * 0.05).astype(np.float32)
    batch, seq = sym("batch"), sym("seq")
    g = make_graph(
        {"x": TensorType(F32, (batch, seq, 2048))},
        body,
        symbols=(Symbol("batch", 1, 2), Symbol("seq", 1, 4)),
        constants={"w": w},
    )
    out = split_k(g)
    (mm,) = _ops(out, Op.MATMUL)
    assert mm.inputs[0].type.shape == (8, batch * seq, 256)
    assert _ops(out, Op.REDUCE_SUM)[0].outputs[0].type.shape == (batch, seq, 32)
    for env in ({"batch": 1, "seq": 1}, {"batch": 2, "seq": 3}):
        feeds = _feeds(g, env)
        _close(run_graph(out, feeds, env)[0], run_graph(g, feeds, env)[0])


def test_bf16_partials_stay_float32_and_round_once() -> None:
    g = _linear(4, 2048, 32, dtype=BF16, epilogue=False)
    out = split_k(g)
    (mm,) = _ops(out, Op.MATMUL)
    assert mm.attrs["out_dtype"] == "float32" and mm.outputs[0].type.dtype is F32
    (cast,) = _ops(out, Op.CAST)
    assert cast.inputs[0].type.dtype is F32 and cast.outputs[0].type == g.outputs[0].type
    feeds = _feeds(g, {})
    (y,), (y0,) = run_graph(out, feeds, {}), run_graph(g, feeds, {})
    assert y.dtype == y0.dtype and y.dtype.name == "bfloat16"
    exact = feeds[0].astype(np.float64) @ g.constants["w"].astype(np.float64).T
    # each is the float32 sum rounded to bf16 once: within one bf16 ulp of the exact product
    for r in (y, y0):
        np.testing.assert_allclose(r.astype(np.float64), exact, rtol=2.0**-8, atol=1e-3 * float(np.abs(exact).max()))


def test_decode_size_square_weight_is_split_four_ways() -> None:
    """x[batch <= 8, 4096] @ W[4096, 4096]: 32 tiles of 16x128 on 108 SMs; S = 4 gives 128 programs."""
    g = _square()
    decision = split_decision(g, _ops(g, Op.MATMUL)[0])
    assert isinstance(decision, SplitPlan) and decision.slices == 4
    assert "32 tiles of 16x128" in decision.why and "128 programs on 108 SMs" in decision.why


def _square() -> Graph:
    def body(b, x, w):
        return [b.op(Op.MATMUL, x, w)]

    x, w = TensorType(BF16, (sym("batch"), 4096)), TensorType(BF16, (4096, 4096))
    return make_graph({"x": x, "w": w}, body, symbols=(Symbol("batch", 1, 8),))


def _declined(g: Graph, **kw: int) -> str:
    report = plan_split_k(g, **kw)
    assert report.graph is g and not report.split
    (line,) = report.declined
    assert report.lines == [f"not split-K: {line}"]
    return line


def test_declines_many_rows() -> None:
    line = _declined(_linear(8192, 4096, 128))
    assert "64 output tiles of 128x128 (R <= 8192 rows, N <= 128) fill half of 108 SMs already" in line


def test_declines_rows_at_their_upper_bound() -> None:
    """The artifact serves batch up to 4096, so the rule sizes the rows there (8 rows split, see above)."""
    line = _declined(_linear("batch", 4096, 64, hi=4096))
    assert "K = 4096 < 4 x 4096 rows" in line


def test_declines_short_k_silently() -> None:
    g = _linear(4, 512, 64)
    assert plan_split_k(g).graph is g and explain_split_k(g) == []  # far from the rule: no line
    assert split_decision(g, _ops(g, Op.MATMUL)[0]) == "K = 512 < 1024: too short to split"


def test_declines_k_short_against_the_rows() -> None:
    line = _declined(_linear(512, 1024, 16))  # 8 tiles of 64x16, but 1024 < 4 * 512
    assert "K = 1024 < 4 x 512 rows" in line


def test_declines_symbolic_k() -> None:
    line = _declined(_linear(4, "k", 64, hi=4096))
    assert "K = k is symbolic (up to 4096): only a static K is split" in line


def test_declines_integer_matmul() -> None:
    line = _declined(_linear(4, 2048, 64, dtype=DType.int32))
    assert "int32 matmul: only float matmuls are split" in line


def test_declines_batched_b() -> None:
    def body(b, x, y):
        return [b.op(Op.MATMUL, x, y)]

    g = make_graph({"x": TensorType(F32, (2, 4, 2048)), "y": TensorType(F32, (2, 2048, 64))}, body)
    assert "has batch dims: only a [K, N] operand is split" in _declined(g)


def test_declines_when_partials_outweigh_the_weight() -> None:
    """bf16 [128, 1024] @ [1024, 128]: even S = 2 writes and reads 256 KiB of partials for a 256 KiB weight."""
    line = _declined(_linear(128, 1024, 128, dtype=BF16, epilogue=False))
    assert "partial sums (256.0 KiB written and read for S = 2) are more than half the weight's 256.0 KiB" in line


def test_declines_k_without_a_long_enough_slice() -> None:
    line = _declined(_linear(4, 1025, 64))  # odd K: no S divides it
    assert "K = 1025 has no even split into 2..16 (a power of two) slices of at least 256" in line


def test_thresholds_are_parameters() -> None:
    g = _linear(4, 512, 64)
    mm = _ops(g, Op.MATMUL)[0]
    assert isinstance(split_decision(g, mm), str)
    plan = split_decision(g, mm, min_k=512)
    assert isinstance(plan, SplitPlan) and plan.slices == 2  # 2 slices of 256
    g = _linear(256, 4096, 64)  # 4 tiles of 64x64
    mm = _ops(g, Op.MATMUL)[0]
    plan = split_decision(g, mm)
    assert isinstance(plan, SplitPlan) and plan.slices == 4  # 8 would write 2 MiB of partials for a 1 MiB weight
    assert "4 output tiles of 64x64 (R <= 256 rows, N <= 64) fill half of 8 SMs already" in split_decision(g, mm, sms=8)


# -- MATMUL's out_dtype attr --------------------------------------------------------------------


def _matmul_types(dtype: DType) -> list[TensorType]:
    return [TensorType(dtype, (3, 5)), TensorType(dtype, (5, 2))]


@pytest.mark.parametrize("dtype", [F32, DType.float16, BF16])
def test_out_dtype_infer_and_reference(dtype: DType) -> None:
    d = OPS[Op.MATMUL]
    b = Builder()
    (out,) = d.infer(_matmul_types(dtype), Attrs(out_dtype="float32"), b.ctx)
    assert out == TensorType(F32, (3, 2))
    assert d.infer(_matmul_types(dtype), Attrs(), b.ctx)[0].dtype is dtype
    rng = np.random.default_rng(0)
    a, w = (rng.standard_normal(t.shape).astype(dtype.np) for t in _matmul_types(dtype))
    (y,) = d.ref([a, w], Attrs(out_dtype="float32"))
    (y0,) = d.ref([a, w], Attrs())
    want = a.astype(np.float32) @ w.astype(np.float32)
    assert y.dtype == np.float32 and y0.dtype == dtype.np
    np.testing.assert_allclose(y, want, rtol=1e-6)  # not rounded to the inputs' dtype
    np.testing.assert_array_equal(y0, want.astype(dtype.np))


@pytest.mark.parametrize(
    ("dtype", "value", "message"),
    [
        (F32, "float16", "must be 'float32' (or absent), got 'float16'"),
        (BF16, DType.float32, "must be 'float32' (or absent), got aotc.float32"),
        (F32, 1, "must be 'float32' (or absent), got 1"),
        (DType.int32, "float32", "applies to float inputs, got int32"),
    ],
)
def test_out_dtype_errors_name_the_value(dtype: DType, value: object, message: str) -> None:
    b = Builder()
    x, w = (b.new_value(t) for t in _matmul_types(dtype))
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        b.op(Op.MATMUL, x, w, out_dtype=value)


def test_out_dtype_survives_the_artifact() -> None:
    g = split_k(_linear(4, 2048, 32, dtype=BF16))
    art = read_artifact(write_artifact([g]))
    (mm,) = _ops(art.variants[0].graph, Op.MATMUL)
    assert mm.attrs["out_dtype"] == "float32" and mm.outputs[0].type.dtype is F32
    feeds = _feeds(g, {})
    np.testing.assert_array_equal(run_graph(art.variants[0].graph, feeds, {})[0], run_graph(g, feeds, {})[0])


def test_out_dtype_exports_to_onnx(tmp_path: Path) -> None:
    """ONNX MatMul returns its inputs' type: the export multiplies float32 copies of the fp16 inputs."""
    ort = pytest.importorskip("onnxruntime")
    import aotc.onnx

    g = split_k(_linear(4, 2048, 32, dtype=DType.float16, epilogue=False))
    path = tmp_path / "split.onnx"
    aotc.onnx.export_graph(g, path)
    feeds = _feeds(g, {})
    (y,) = ort.InferenceSession(str(path)).run(None, {"x": feeds[0]})
    (want,) = run_graph(g, feeds, {})
    assert y.dtype == want.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=2.0**-10, atol=1e-3)
