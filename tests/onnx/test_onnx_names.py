"""ONNX input and output names survive import, compile, the artifact and the CLI exactly as the file spells them,
so feeds written for onnxruntime (``{"gpu_0/data_0": x}``) work unchanged; names no caller could use (empty,
repeated, with control characters) are refused with a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper
from test_onnx_import import model_of

import aotc
from aotc.compiler import compile_graph
from aotc.errors import GuardError, ModelError
from aotc.onnx import import_onnx

ort = pytest.importorskip("onnxruntime")
F = TensorProto.FLOAT
DATA, SCALE = "gpu_0/data_0", "scale:0"
PROB, PLAIN = "gpu_0/softmax_1", "plain"


def odd_names_model() -> onnx.ModelProto:
    """prob = softmax(data * scale), plain = -data; inputs and one output named like Caffe2/TF exports."""
    nodes = [
        helper.make_node("Mul", [DATA, SCALE], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], [PROB], axis=-1),
        helper.make_node("Neg", [DATA], [PLAIN]),
    ]
    inputs = [helper.make_tensor_value_info(DATA, F, ["batch", 4]), helper.make_tensor_value_info(SCALE, F, [1])]
    outputs = [helper.make_tensor_value_info(PROB, F, None), helper.make_tensor_value_info(PLAIN, F, None)]
    return model_of(nodes, inputs, outputs)


def feeds(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {DATA: rng.standard_normal((batch, 4)).astype(np.float32), SCALE: np.array([1.5], np.float32)}


@pytest.fixture(scope="module")
def compiled() -> aotc.CompiledModel:
    return compile_graph(import_onnx(odd_names_model()))


def test_import_keeps_input_and_output_names_exactly() -> None:
    graph = import_onnx(odd_names_model())
    assert graph.input_names == (DATA, SCALE)
    assert graph.output_tree == {"dict": [[PROB, 0], [PLAIN, 1]]}


def test_run_takes_onnxruntime_feeds_and_matches_it(compiled: aotc.CompiledModel) -> None:
    session = ort.InferenceSession(odd_names_model().SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = feeds(batch, seed=batch)
        got = compiled.run(x)
        expected = session.run(None, x)
        assert [o.name for o in session.get_outputs()] == [PROB, PLAIN]
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)


def test_call_by_exact_names_returns_outputs_under_onnx_names(compiled: aotc.CompiledModel) -> None:
    x = feeds(2)
    out = compiled(**x)  # ** passes any string key, identifier or not
    assert list(out) == [PROB, PLAIN]
    np.testing.assert_array_equal(out[PLAIN], -x[DATA])
    positional = compiled(x[DATA], x[SCALE])
    np.testing.assert_array_equal(positional[PROB], out[PROB])


def test_a_mangled_name_is_refused_naming_the_real_ones(compiled: aotc.CompiledModel) -> None:
    x = feeds(2)
    with pytest.raises(GuardError, match=r"unknown input\(s\) 'gpu_0_data_0'.*gpu_0/data_0"):
        compiled.run({"gpu_0_data_0": x[DATA], SCALE: x[SCALE]})


def test_keyword_call_works_for_identifier_names() -> None:
    nodes = [helper.make_node("Add", ["input_ids", "bias.1"], ["logits"])]
    inputs = [helper.make_tensor_value_info(n, F, [2]) for n in ("input_ids", "bias.1")]
    exe = compile_graph(import_onnx(model_of(nodes, inputs, [helper.make_tensor_value_info("logits", F, None)])))
    a, b = np.ones(2, np.float32), np.arange(2, dtype=np.float32)
    out = exe(a, **{"bias.1": b})  # the first by position, the other by its name
    np.testing.assert_array_equal(out["logits"], a + b)
    np.testing.assert_array_equal(exe(input_ids=a, **{"bias.1": b})["logits"], a + b)


def test_artifact_round_trip_keeps_the_names(compiled: aotc.CompiledModel, tmp_path: Path) -> None:
    path = tmp_path / "names.aotc"
    compiled.save(path)
    exe = aotc.load(path, device="reference")  # what compiled.run runs: the file must compute it bit for bit
    assert exe.input_names == (DATA, SCALE)
    assert exe.output_tree == {"dict": [[PROB, 0], [PLAIN, 1]]}
    x = feeds(3)
    for g, e in zip(exe.run(x), compiled.run(x)):
        np.testing.assert_array_equal(g, e)
    assert list(exe(**x)) == [PROB, PLAIN]


def test_cli_run_feeds_inputs_by_exact_name(compiled: aotc.CompiledModel, tmp_path: Path) -> None:
    from aotc_cli.main import cli

    path = tmp_path / "names.aotc"
    compiled.save(path)
    x = feeds(2)
    files = []
    for i, (name, arr) in enumerate(x.items()):
        np.save(tmp_path / f"in{i}.npy", arr)
        files += ["--input", f"{name}={tmp_path / f'in{i}.npy'}"]
    out = tmp_path / "out.npz"
    result = CliRunner().invoke(cli, ["run", str(path), *files, "--device", "reference", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert DATA in result.output and PROB in result.output
    with np.load(out) as saved:
        np.testing.assert_allclose(saved[PROB], compiled.run(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("inputs", "outputs", "match"),
    [
        (["", "b"], ["y"], "graph input name '' must be a non-empty"),
        (["a\nb", "b"], ["y"], r"graph input name 'a\\nb' must be .*printable"),
        (["a", "b"], ["y\x00"], r"graph output name 'y\\x00' must be .*printable"),
        (["a", "b"], ["y", "y"], "graph output name 'y' is used twice"),
    ],
)
def test_unusable_names_are_refused(inputs: list[str], outputs: list[str], match: str) -> None:
    nodes = [helper.make_node("Add", inputs, [outputs[0]])]
    ins = [helper.make_tensor_value_info(n, F, [2]) for n in inputs]
    outs = [helper.make_tensor_value_info(n, F, None) for n in outputs]
    with pytest.raises(ModelError, match=match):
        import_onnx(model_of(nodes, ins, outs))


def test_repeated_input_name_is_refused() -> None:
    nodes = [helper.make_node("Add", ["a", "a"], ["y"])]
    ins = [helper.make_tensor_value_info("a", F, [2]), helper.make_tensor_value_info("a", F, [2])]
    with pytest.raises(ModelError, match="graph input name 'a' is used twice"):
        import_onnx(model_of(nodes, ins, [helper.make_tensor_value_info("y", F, None)]))
