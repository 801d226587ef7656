"""The cpu backend on onnxruntime equals the numpy references: every example model at two values of each dynamic
dim, a bfloat16 compile (run in float32), real ONNX models, and one Executable called from many threads."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_light import LIGHT, with_random_weights
from ort_kit import executable

import aotc
from aotc.artifact.reader import read_artifact
from aotc.ir.graph import Symbol
from aotc.lowering.options import CompileOptions
from aotc.onnx import import_onnx
from aotc.onnx.runtime_model import runtime_onnx
from aotc_cli.feeds import build_feeds
from aotc_cli.loader import load_model

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(
    p for p in (ROOT / "models").glob("*.py") if p.stem != "__init__" and "self.state(" not in p.read_text()
)
# (a model that keeps state runs in a session: tests/runtime/test_sessions.py, tests/models/test_gpt2_decode.py)
# Scheduling kernels adds nothing here: both paths run without them.
OPTIONS = CompileOptions(kernels=False, targets=())


def two_values(s: Symbol) -> tuple[int, int]:
    """Two different legal values of a dynamic dim (its range and multiple_of), as the ONNX export tests pick."""
    m = s.multiple_of
    first = max(s.min, 2) + (-max(s.min, 2)) % m
    second = min(s.max, first + 5 * m)
    return first, second - second % m


def feeds_at(compiled: aotc.CompiledModel, env: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    feeds, _ = build_feeds(compiled.graph, {}, env, random=True, seed=seed)
    if "attention_mask" in feeds:
        feeds["attention_mask"][:, 0] = 1  # every row attends to one token (see test_onnx_example_models.py)
    return feeds


def assert_paths_agree(compiled: aotc.CompiledModel, rtol: float, atol: float) -> None:
    artifact = read_artifact(compiled.artifact_bytes)
    fast, reference = executable(artifact, "onnxruntime"), executable(artifact, "reference")
    assert fast.device == "cpu" and reference.device == "reference"
    symbols = compiled.graph.symbols
    for i in (0, 1):
        env = {s.name: two_values(s)[i] for s in symbols}
        feeds = feeds_at(compiled, env, seed=i)
        for got, want in zip(fast.run(feeds), reference.run(feeds), strict=True):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.fixture(scope="module", params=MODELS, ids=lambda p: p.stem)
def example(request: pytest.FixtureRequest) -> aotc.CompiledModel:
    model, inputs = load_model(request.param)
    return aotc.compile(model, inputs, options=OPTIONS)


def test_example_model_equals_the_references_at_two_values_of_each_dim(example) -> None:
    assert example.graph.symbols, "every example model has a dynamic dim"
    assert example.onnx_note.startswith("onnx: stored (")
    assert_paths_agree(example, rtol=1e-4, atol=1e-5)  # the ONNX export tests' tolerance against onnxruntime


def test_a_bfloat16_artifact_runs_in_float32() -> None:
    model, inputs = load_model(ROOT / "models" / "gpt2.py")
    compiled = aotc.compile(model, inputs, options=OPTIONS, precision="bf16")
    made = runtime_onnx(read_artifact(compiled.artifact_bytes).source)
    assert "float32 (widened from bfloat16)" in made.note
    # The references round activations to bfloat16 before each contraction; onnxruntime keeps them in float32.
    assert_paths_agree(compiled, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_onnx_model_equals_the_references(name: str) -> None:
    from aotc.compiler import compile_graph

    graph = import_onnx(with_random_weights(onnx.load(LIGHT / f"light_{name}.onnx"), seed=0))
    compiled = compile_graph(graph, options=OPTIONS)
    artifact = read_artifact(compiled.artifact_bytes)
    (name_in,) = compiled.graph.input_names
    shape = tuple(compiled.graph.inputs[0].type.shape)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = executable(artifact, "onnxruntime").run({name_in: x})
    want = executable(artifact, "reference").run({name_in: x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * float(np.abs(w).max()))  # test_onnx_models.py's


def test_one_executable_serves_many_threads(example) -> None:
    artifact = read_artifact(example.artifact_bytes)
    fast, reference = executable(artifact, "onnxruntime", threads=1), executable(artifact, "reference")
    symbols = example.graph.symbols
    cases = [feeds_at(example, {s.name: two_values(s)[i % 2] for s in symbols}, seed=i) for i in range(8)]
    wants = [reference.run(f) for f in cases]
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for j in range(10):
                i = (k + j) % len(cases)
                for got, want in zip(fast.run(cases[i]), wants[i], strict=True):
                    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
