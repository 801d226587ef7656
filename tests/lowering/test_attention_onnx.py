"""Transformers exported from PyTorch to ONNX (Hugging Face configs, 2 layers) get one SDPA node per layer
from the attention pass, and compute what the decomposed graph computes on the cpu backend, padded and
fully padded sequences included. The exports are the ONNX tests' (tests/onnx/test_onnx_torch_models.py):
torch's SDPA written as MatMul/Mul(sqrt scale on q and k)/Add(where(mask, 0, -inf))/Softmax/
where(isnan(p), 0, p)/MatMul, and DeBERTa's eager masked_fill(finfo.min) with [B*H] <-> [B, H] reshapes."""

from __future__ import annotations

import numpy as np
import pytest
from torch_kit import torch_module, transformers_module

from aotc.ir import Op
from aotc.ir.evaluate import GraphRunner
from aotc.lowering.attention import decompose_keeping_attention, explain_attention
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower

torch_models = pytest.importorskip("tests.onnx.test_onnx_torch_models")
onnx_import = pytest.importorskip("aotc.onnx")

FAST = ("bert", "gpt2", "deberta_v2")
SLOW = ("distilbert", "albert", "electra", "clip_text", "roberta", "t5_encoder")


def _feeds(rng: np.random.Generator, batch: int, seq: int) -> list[np.ndarray]:
    ids = rng.integers(0, torch_models.VOCAB, size=(batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq // 2 :] = 0  # a padded sequence
    mask[-1, :] = 0  # a fully padded one: rows with no allowed key
    return [ids, mask]


def _check(name: str, exports: dict[str, bytes]) -> None:
    torch_module()
    transformers_module()
    case = torch_models.MODELS[name]
    if name not in exports:
        exports[name] = case.build()
    graph = onnx_import.import_onnx(exports[name], dict(case.dims))
    assert explain_attention(decompose_keeping_attention(graph)) == []
    fused = lower(graph, CompileOptions(fuse_attention=True, verify_each_stage=True))
    plain = lower(graph, CompileOptions(verify_each_stage=True, fuse_attention=False))
    assert sum(n.op is Op.SDPA for n in fused.nodes) == 2  # one per layer
    assert sum(n.op is Op.REDUCE_MAX for n in fused.nodes) < sum(n.op is Op.REDUCE_MAX for n in plain.nodes)
    feeds = _feeds(np.random.default_rng(0), 3, 9)
    env = {"batch": 3, "seq": 9}
    with np.errstate(all="ignore"):
        got = GraphRunner(fused).run(feeds, env)
        want = GraphRunner(plain).run(feeds, env)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("name", FAST)
def test_exported_transformer_gets_sdpa(name: str, exports: dict[str, bytes]) -> None:
    _check(name, exports)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_exported_transformer_gets_sdpa_slow(name: str, exports: dict[str, bytes]) -> None:
    _check(name, exports)


@pytest.fixture(scope="module")
def exports() -> dict[str, bytes]:
    return {}
