"""Export: checker-clean files whose dynamic dims really are dynamic in onnxruntime, and exact round trips."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_graphs import CASES, Case, Kit

from aotc.errors import UnsupportedError
from aotc.ir import DType, Guard, Op, sym
from aotc.ir.evaluate import run_graph
from aotc.onnx import export_graph, import_onnx
from aotc.onnx import exporter as exporter_mod
from aotc.onnx._common import EXPORT_OPSET, SYMBOLS_META_KEY

ort = pytest.importorskip("onnxruntime")


def close(expected: np.ndarray, got: np.ndarray, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype, (
        got.dtype,
        got.shape,
        expected.dtype,
        expected.shape,
    )
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(
            got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True
        )


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Case, Path, onnx.ModelProto]:
    case = CASES[request.param]()
    path = tmp_path_factory.mktemp("export") / f"{case.name}.onnx"
    return case, path, export_graph(case.graph, path)


def test_exported_model_passes_full_check(exported: tuple[Case, Path, onnx.ModelProto]) -> None:
    _, path, model = exported
    onnx.checker.check_model(model, full_check=True)
    onnx.checker.check_model(str(path), full_check=True)
    assert [o.version for o in model.opset_import if o.domain == ""] == [EXPORT_OPSET]


def test_symbols_become_dim_params(exported: tuple[Case, Path, onnx.ModelProto]) -> None:
    case, _, model = exported
    for vi, v in zip(model.graph.input, case.graph.inputs):
        dims = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        assert dims == [d.symbol_name if not isinstance(d, int) else d for d in v.type.shape]
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta[SYMBOLS_META_KEY]) == {s.name: [s.min, s.max] for s in case.graph.symbols}


def test_onnxruntime_matches_at_two_values_of_each_dim(exported: tuple[Case, Path, onnx.ModelProto]) -> None:
    case, path, _ = exported
    env_a, env_b = case.envs
    assert all(env_a[s] != env_b[s] for s in env_a), "each dynamic dim takes two values"
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # one session: the same file
    names = [o.name for o in sess.get_outputs()]
    assert names == [k for k, _ in case.graph.output_tree["dict"]]
    for env in case.envs:
        feeds = case.feeds(env)
        expected = run_graph(case.graph, feeds, env)
        got = sess.run(None, dict(zip(case.graph.input_names, feeds)))
        for e, g in zip(expected, got):
            close(e, g)


def test_round_trip_export_import_run(exported: tuple[Case, Path, onnx.ModelProto]) -> None:
    case, path, _ = exported
    back = import_onnx(path)
    assert back.ranges == case.graph.ranges
    assert back.input_names == case.graph.input_names
    for env in case.envs:
        feeds = case.feeds(env, seed=1)
        for e, g in zip(run_graph(case.graph, feeds, env), run_graph(back, feeds, env)):
            close(e, g, rtol=1e-5, atol=1e-6)


def test_ops_onnx_lacks_at_opset_18_are_decomposed(exported: tuple[Case, Path, onnx.ModelProto]) -> None:
    _, _, model = exported
    assert not {n.op_type for n in model.graph.node} & {"Gelu", "Attention", "RMSNormalization"}


def test_export_without_path_returns_the_model(tmp_path: Path) -> None:
    case = CASES["matmuls"]()
    model = export_graph(case.graph)
    assert isinstance(model, onnx.ModelProto) and not list(tmp_path.iterdir())
    assert {"MatMul", "Gemm"} <= {n.op_type for n in model.graph.node}


def test_large_weights_go_to_external_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exporter_mod, "EXTERNAL_DATA_THRESHOLD", 1000)  # stands in for 2 GiB
    case = CASES["mlp_block"]()
    path = tmp_path / "big.onnx"
    export_graph(case.graph, path)
    big = sum(a.nbytes for a in case.graph.constants.values() if a.nbytes >= 1024)  # smaller ones stay inline
    assert (tmp_path / "big.onnx.data").stat().st_size >= big > 0
    onnx.checker.check_model(str(path), full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    env = case.envs[0]
    feeds = case.feeds(env)
    close(run_graph(case.graph, feeds, env)[0], sess.run(None, dict(zip(case.graph.input_names, feeds)))[0])
    close(run_graph(case.graph, feeds, env)[0], run_graph(import_onnx(path), feeds, env)[0], 1e-6, 1e-6)
    with pytest.raises(UnsupportedError, match="needs a path"):
        export_graph(case.graph)


def test_tuple_outputs_guards_and_compound_dims(tmp_path: Path) -> None:
    k = Kit(n=(1, 20))
    n = sym("n")
    x = k.input("x", (n, 3))
    y = k.input("y", (2 * n, 3))
    z = k.op(Op.CONCAT, x, x, axis=0)
    out = k.op(Op.ADD, z, y)
    g = k.graph("g", {"sum": out})
    g = g.replace(
        output_tree={"tuple": [0, {"list": [1]}]}, outputs=(out, out), guards=(Guard(n, "<=", 19, "model.py:3"),)
    )
    model = export_graph(g, tmp_path / "g.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert [o.name for o in model.graph.output] == ["output_0", "output_1.0"]
    assert model.graph.input[1].type.tensor_type.shape.dim[0].dim_param == "2*n"
    meta = {p.key: p.value for p in model.metadata_props}
    assert "n <= 19" in meta["aotc.guards"]
    sess = ort.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    for v in (2, 5):
        xs = [np.ones((v, 3), np.float32), np.arange(6 * v, dtype=np.float32).reshape(2 * v, 3)]
        a, b = sess.run(None, {"x": xs[0], "y": xs[1]})
        close(run_graph(g, xs, {"n": v})[0], a)
        close(a, b)


def test_symbol_only_in_a_compound_dim_cannot_be_computed() -> None:
    k = Kit(n=(1, 20))
    x = k.input("x", (2 * sym("n"),))
    g = k.graph("g", {"y": k.op(Op.IOTA, shape=(sym("n"),), axis=0, dtype=DType.int64)})
    g = g.replace(inputs=(x,), input_names=("x",))
    with pytest.raises(UnsupportedError, match="symbol 'n'"):
        export_graph(g)


def test_half_precision_graph_exports_checker_clean() -> None:
    k = Kit(n=(1, 8))
    x = k.input("x", (sym("n"), 4), DType.float16)
    g = k.graph("h", {"y": k.op(Op.ISINF, k.op(Op.SIN, x)), "z": k.op(Op.SOFTMAX, x, axis=-1)})
    onnx.checker.check_model(export_graph(g), full_check=True)


def test_export_onnx_traces_an_nn_module(tmp_path: Path) -> None:
    import aotc
    import aotc.functional as F
    from aotc import Dim, TensorSpec, nn
    from aotc.frontend.trace import trace

    class Block(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d)
            self.proj = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.proj(F.gelu(self.fc(self.ln(x))))

    rng = np.random.default_rng(0)
    model = Block(8)
    model.load_state_dict({k: rng.standard_normal(v.shape).astype(np.float32) for k, v in model.state_dict().items()})
    inputs = {"x": TensorSpec((Dim("batch", min=1, max=8), Dim("seq", min=1, max=32), 8), "float32")}
    path = tmp_path / "block.onnx"
    model_proto = aotc.export_onnx(model, inputs, path)
    onnx.checker.check_model(model_proto, full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    graph = trace(model, inputs)
    back = import_onnx(path)
    for b, s in ((1, 3), (4, 17)):
        x = rng.standard_normal((b, s, 8)).astype(np.float32)
        (got,) = sess.run(None, {"x": x})
        close(run_graph(graph, [x], {"batch": b, "seq": s})[0], got)
        close(got, run_graph(back, [x], {"batch": b, "seq": s})[0])


def test_export_artifact_uses_its_high_level_graph(tmp_path: Path) -> None:
    from aotc.compiler import compile_graph
    from aotc.onnx import export_artifact

    case = CASES["conv_net"]()
    data = compile_graph(case.graph).artifact_bytes
    model = export_artifact(data, tmp_path / "from_artifact.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert "Conv" in {n.op_type for n in model.graph.node}  # the source graph, not the lowered one
    sess = ort.InferenceSession(str(tmp_path / "from_artifact.onnx"), providers=["CPUExecutionProvider"])
    env = case.envs[1]
    feeds = case.feeds(env)
    for e, g in zip(run_graph(case.graph, feeds, env), sess.run(None, dict(zip(case.graph.input_names, feeds)))):
        close(e, g)
