"""Buffers a torch module writes become states (issue 29): index_copy_, index_put_, copy_ into a slice and in-place
ops on a buffer translate as state writes; what cannot is refused naming the buffer and the op; Hugging Face GPT-2
and Llama with the static cache of ``transformers.integrations.executorch`` decode as HF's greedy generate.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module, transformers_module

import aotc
from aotc import Dim, TensorSpec
from aotc.errors import UnsupportedError

torch = torch_module()
SEQ = Dim("seq", min=1, max=8)


class Cached(torch.nn.Module):
    def __init__(self, how: str = "index_copy_") -> None:
        super().__init__()
        self.how = how
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("k_cache", torch.zeros(1, 8, 4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x, cache_position):
        k = self.proj(x)
        if self.how == "index_copy_":
            self.k_cache.index_copy_(1, cache_position, k)
        elif self.how == "index_put_":
            self.k_cache[:, cache_position] = k
        elif self.how == "slice":
            self.k_cache[:, : x.shape[1]].copy_(k)
        elif self.how == "accumulate":
            self.k_cache.index_put_((torch.zeros_like(cache_position), cache_position), k[0], accumulate=True)
        elif self.how == "permuted":
            self.k_cache.transpose(1, 2).copy_(k.transpose(1, 2).sum(-1, keepdim=True).expand(1, 4, 8))
        self.steps.add_(1)
        return self.k_cache.sum(1) * 1.0, self.steps + 0


def _specs() -> dict[str, TensorSpec]:
    return {"x": TensorSpec((1, SEQ, 4), "float32"), "cache_position": TensorSpec((SEQ,), "int64")}


@pytest.mark.parametrize("how", ["index_copy_", "index_put_", "slice"])
def test_written_buffers_become_states(how: str) -> None:
    torch.manual_seed(0)
    m = Cached(how).eval()
    twin = Cached(how).eval()
    twin.load_state_dict(m.state_dict())
    c = aotc.compile(m, _specs(), options=aotc.CompileOptions(targets=()))
    assert [s.name for s in c.graph.states] == ["k_cache", "steps"]
    assert c.lowered.constants["k_cache.init"].shape == ()  # a zero cache is stored as one element
    rng = np.random.default_rng(0)
    calls = [(rng.standard_normal((1, 3, 4)).astype(np.float32), np.arange(3))]
    if how != "slice":
        calls.append((rng.standard_normal((1, 2, 4)).astype(np.float32), np.array([5, 3])))
    for device in ("reference", "cpu"):
        s = aotc.load(c.artifact_bytes, device=device).session()
        for x, pos in calls:
            got = s(x=x, cache_position=pos)
            with torch.no_grad():
                want = twin(torch.tensor(x), torch.tensor(pos))
            np.testing.assert_allclose(got[0], want[0].numpy(), rtol=1e-5, atol=1e-6)
            assert int(got[1]) == int(want[1])
        twin.k_cache.zero_()
        twin.steps.zero_()


@pytest.mark.parametrize(
    ("how", "match"),
    [
        ("accumulate", r"index_put_ with accumulate=True into buffer 'k_cache'"),
        ("permuted", r"k_cache"),
    ],
)
def test_writes_aotc_cannot_express_are_refused_naming_the_buffer(how: str, match: str) -> None:
    with pytest.raises(UnsupportedError, match=match):
        aotc.compile(Cached(how).eval(), _specs(), options=aotc.CompileOptions(targets=()))


def test_a_written_input_is_refused() -> None:
    class WritesInput(torch.nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2

    with pytest.raises((UnsupportedError, aotc.TraceError), match="input"):
        aotc.compile(WritesInput(), {"x": TensorSpec((3,), "float32")}, options=aotc.CompileOptions(targets=()))


# -- Hugging Face's static cache ------------------------------------------------------------------------------------

NEW = 64


def _hf(kind: str) -> Any:
    tf = transformers_module()
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = tf.GPT2Config(
            vocab_size=256, n_positions=96, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0
        )
        return tf.GPT2LMHeadModel(cfg).eval()
    cfg = tf.LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=96,
        bos_token_id=0,
        eos_token_id=0,
    )
    return tf.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def hf_case(request: Any) -> dict[str, Any]:
    transformers_module()
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    hf = _hf(request.param)
    hf.generation_config.cache_implementation = "static"
    wrapper = TorchExportableModuleWithStaticCache(hf, batch_size=1, max_cache_len=80)
    seq = torch.export.Dim("seq", min=1, max=80)
    ep = torch.export.export(
        wrapper,
        (),
        {"input_ids": torch.ones((1, 4), dtype=torch.long), "cache_position": torch.arange(4)},
        dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}},
        strict=False,
    )
    compiled = aotc.compile(ep, options=aotc.CompileOptions(targets=()))
    prompt = np.random.default_rng(3).integers(1, 256, (1, 7))
    with torch.no_grad():
        want = hf.generate(
            torch.tensor(prompt),
            attention_mask=torch.ones(prompt.shape, dtype=torch.long),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
        ).numpy()
    return {"compiled": compiled, "prompt": prompt, "want": want}


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_hugging_face_static_cache_decodes_as_hf_generate(hf_case: dict[str, Any], device: str) -> None:
    exe = aotc.load(hf_case["compiled"].artifact_bytes, device=device)
    assert len(exe.state_specs) >= 4  # keys and values of each layer, and the cache's position
    got = aotc.generate(exe, hf_case["prompt"], NEW)
    np.testing.assert_array_equal(got, hf_case["want"])


@pytest.mark.parametrize("new", [2, pytest.param(NEW, marks=pytest.mark.slow)])
def test_hugging_face_static_cache_on_the_interpreted_kernels(hf_case: dict[str, Any], new: int) -> None:
    exe = aotc.load(hf_case["compiled"].artifact_bytes, device="interpret")
    got = aotc.generate(exe, hf_case["prompt"], new)
    np.testing.assert_array_equal(got, hf_case["want"][:, : hf_case["prompt"].shape[1] + new])


@pytest.mark.parametrize("new", [2, pytest.param(NEW, marks=pytest.mark.slow)])
def test_hugging_face_static_cache_on_cuda_on_the_fake_driver(hf_case: dict[str, Any], new: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))  # the fake driver's modules
    cuda_sessions = importlib.import_module("test_cuda_sessions")

    _, exe = cuda_sessions._exe(hf_case["compiled"])
    with exe:
        got = aotc.generate(exe.session(), hf_case["prompt"], new)
    np.testing.assert_array_equal(got, hf_case["want"][:, : hf_case["prompt"].shape[1] + new])
