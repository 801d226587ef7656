"""Every example model in models/ exports to ONNX that passes the full checker, runs in onnxruntime at two
values of each dynamic dim from ONE exported file, and round-trips (export -> import -> compile -> run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import aotc
from aotc.compiler import compile_graph
from aotc.ir.graph import Symbol
from aotc.onnx import import_onnx
from aotc_cli.feeds import build_feeds
from aotc_cli.loader import load_model

ort = pytest.importorskip("onnxruntime")

MODELS = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "models").glob("*.py")
    if p.stem != "__init__" and "self.state(" not in p.read_text()
)
# (a model that keeps state runs in a session: tests/runtime/test_sessions.py, tests/models/test_gpt2_decode.py)


def two_values(s: Symbol) -> tuple[int, int]:
    """Two different legal values of a dynamic dim (respecting its range and multiple_of)."""
    m = s.multiple_of
    first = max(s.min, 2) + (-max(s.min, 2)) % m
    second = min(s.max, first + 5 * m)
    second -= second % m
    assert s.min <= first < second <= s.max, s
    return first, second


def feeds_for(compiled: aotc.CompiledModel, env: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Random inputs at ``env`` as ``aotc run --random`` draws them (ints in [0, 2): valid ids and masks)."""
    feeds, used = build_feeds(compiled.graph, {}, env, random=True, seed=seed)
    assert used == env
    if "attention_mask" in feeds:
        # Every row attends to its first token, as BERT's [CLS] does: a row with every key masked adds -10000
        # to all its scores, which cancels ~4 of float32's 7 digits before the softmax, so two correct
        # implementations (onnxruntime's decomposed softmax, aotc's fused attention) differ by ~1e-3 there.
        feeds["attention_mask"][:, 0] = 1
    return feeds


@pytest.fixture(scope="module", params=MODELS, ids=lambda p: p.stem)
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    model, inputs = load_model(request.param)
    path = tmp_path_factory.mktemp("models") / f"{request.param.stem}.onnx"
    aotc.export_onnx(model, inputs, path)
    compiled = aotc.compile(model, inputs)
    symbols = compiled.graph.symbols
    assert symbols, "every example model has a dynamic dim"
    envs = [{s.name: two_values(s)[i] for s in symbols} for i in (0, 1)]
    return compiled, path, envs


def test_export_passes_full_check(exported) -> None:
    compiled, path, _ = exported
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    params = {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    assert params == {s.name for s in compiled.graph.symbols}


def test_onnxruntime_matches_at_two_values_of_each_dim(exported) -> None:
    compiled, path, envs = exported
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for seed, env in enumerate(envs):
        feeds = feeds_for(compiled, env, seed)
        expected = compiled.run(feeds)
        got = session.run(None, feeds)
        assert len(got) == len(expected)
        for e, g in zip(expected, got):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_round_trip_export_import_compile_run(exported) -> None:
    compiled, path, envs = exported
    back = compile_graph(import_onnx(path))
    assert {s.name: (s.min, s.max) for s in back.graph.symbols} == compiled.graph.ranges
    for seed, env in enumerate(envs):
        feeds = feeds_for(compiled, env, 10 + seed)
        for e, g in zip(compiled.run(feeds), back.run(feeds)):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
