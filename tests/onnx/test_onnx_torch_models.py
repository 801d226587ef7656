"""Real architectures exported by ``torch.onnx.export`` compile with aotc and match onnxruntime.

Each model is built from a small, randomly initialised Hugging Face config (2 layers, hidden 32, vocab 128) or
torchvision definition, exported once per session with dynamic batch and sequence (Swin-T: batch, height and
width) by the TorchScript-based exporter (``dynamo=False``: it needs nothing beyond torch, so it works offline),
imported with ``aotc.onnx.import_onnx``, compiled to an artifact and run on the cpu backend at two shapes from
the one file. Outputs must match onnxruntime's to rtol 1e-4, atol 1e-5 (float32 throughout; the observed
difference is about 1e-6) and come back under the ONNX output names. Swin-T shows one fused attention kernel
per block, its shifted-window blocks included.

Skipped when torch or transformers (or, for Swin-T, torchvision) is not installed.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module, torchvision_module, transformers_module

from aotc.compiler import compile_graph
from aotc.ir.schedule import KernelKind
from aotc.onnx import import_onnx

ort = pytest.importorskip("onnxruntime")
RTOL, ATOL = 1e-4, 1e-5
VOCAB = 128
TEXT_DIMS = {"batch": (1, 8), "seq": (1, 64)}
TEXT_SHAPES = ((2, 7), (3, 16))


def export(module: Any, args: tuple, names: list[str], dynamic: dict[str, dict[int, str]]) -> bytes:
    torch = torch_module()
    f = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            args,
            f,
            dynamo=False,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=dynamic,
            opset_version=17,
        )
    return f.getvalue()


def encoder(model: Any, names: tuple[str, ...]) -> Any:
    """A transformers model called with keyword inputs, returning ``last_hidden_state``, as a torch module."""
    torch = torch_module()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *xs: Any) -> Any:
            return self.model(**dict(zip(names, xs))).last_hidden_state

    return Encoder()


def text_model(config: str, model: str, **kwargs: Any) -> Callable[[], bytes]:
    def build() -> bytes:
        torch, tf = torch_module(), transformers_module()
        torch.manual_seed(0)
        cfg = getattr(tf, config)(**kwargs)
        m = getattr(tf, model)(cfg)
        names = ("input_ids", "attention_mask")
        ids = torch.randint(0, VOCAB, (2, 5))
        mask = torch.ones(2, 5, dtype=torch.int64)
        dyn = {n: {0: "batch", 1: "seq"} for n in (*names, "last_hidden_state")}
        return export(encoder(m, names), (ids, mask), list(names), dyn)

    return build


SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)


def vit() -> bytes:
    torch, tf = torch_module(), transformers_module()
    torch.manual_seed(0)
    cfg = tf.ViTConfig(**{**SMALL, "vocab_size": None}, image_size=32, patch_size=8)
    m = tf.ViTModel(cfg, add_pooling_layer=False)
    dyn = {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}}
    return export(encoder(m, ("pixel_values",)), (torch.randn(2, 3, 32, 32),), ["pixel_values"], dyn)


def swin_t() -> bytes:
    """torchvision's Swin Transformer (shifted windows, patch merging) at a small size; the output is the
    normalised feature map before pooling, so every position is compared."""
    torch = torch_module()
    swin = torchvision_module().models.swin_transformer
    torch.manual_seed(0)
    m = swin.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4], stochastic_depth_prob=0.0
    )
    features = torch.nn.Sequential(m.features, m.norm)
    dyn = {"pixel_values": {0: "batch", 2: "height", 3: "width"}, "last_hidden_state": {0: "batch", 1: "h", 2: "w"}}
    return export(features, (torch.randn(2, 3, 32, 32),), ["pixel_values"], dyn)


@dataclass(frozen=True)
class Case:
    build: Callable[[], bytes]
    kind: str = "text"  # text: input_ids + attention_mask over (batch, seq); image: pixel_values
    dims: tuple[tuple[str, tuple[int, int]], ...] = tuple(TEXT_DIMS.items())
    shapes: tuple[tuple[int, ...], ...] = TEXT_SHAPES
    attention: int = 0  # fused attention kernels expected (0: not checked)


MODELS: dict[str, Case] = {
    "bert": Case(text_model("BertConfig", "BertModel", **SMALL)),
    "distilbert": Case(
        text_model(
            "DistilBertConfig",
            "DistilBertModel",
            vocab_size=VOCAB,
            dim=32,
            n_layers=2,
            n_heads=2,
            hidden_dim=64,
            max_position_embeddings=64,
        )
    ),
    "albert": Case(text_model("AlbertConfig", "AlbertModel", embedding_size=16, **SMALL)),
    "electra": Case(text_model("ElectraConfig", "ElectraModel", embedding_size=16, **SMALL)),
    "deberta_v2": Case(text_model("DebertaV2Config", "DebertaV2Model", **SMALL)),
    "clip_text": Case(
        text_model("CLIPTextConfig", "CLIPTextModel", **SMALL, bos_token_id=0, eos_token_id=2, pad_token_id=1)
    ),
    "roberta": Case(text_model("RobertaConfig", "RobertaModel", **{**SMALL, "max_position_embeddings": 80})),
    "gpt2": Case(
        text_model(
            "GPT2Config",
            "GPT2Model",
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=0,
        )
    ),
    "t5_encoder": Case(
        text_model(
            "T5Config", "T5EncoderModel", vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2
        )
    ),
    "vit": Case(vit, "image", (("batch", (1, 8)),), ((2, 3, 32, 32), (1, 3, 32, 32))),
    "swin_t": Case(
        swin_t,
        "image",
        (("batch", (1, 8)), ("height", (16, 64)), ("width", (16, 64))),
        ((2, 3, 32, 32), (1, 3, 48, 40)),
        attention=4,  # one per block: the shifted-window mask is added across a view of the scores' batch dims
    ),
}


@pytest.fixture(scope="session")
def exports() -> dict[str, bytes]:
    """Exported ONNX files by model name, each exported once per session."""
    return {}


def feeds(case: Case, shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    if case.kind == "image":
        return {"pixel_values": rng.standard_normal(shape).astype(np.float32)}
    ids = rng.integers(0, VOCAB, size=shape).astype(np.int64)
    mask = np.ones(shape, np.int64)
    mask[0, shape[1] // 2 :] = 0  # a padded row exercises the attention mask
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("name", list(MODELS))
def test_exported_model_matches_onnxruntime_at_two_shapes(name: str, exports: dict[str, bytes]) -> None:
    case = MODELS[name]
    if name not in exports:
        exports[name] = case.build()
    blob = exports[name]
    compiled = compile_graph(import_onnx(blob, dims=dict(case.dims)))
    if case.attention:
        kinds = [k.kind for k in compiled.schedule.kernels]
        assert kinds.count(KernelKind.ATTENTION) == case.attention, compiled.explain()
    session = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for shape in case.shapes:
        inputs = feeds(case, shape, rng)
        (expected,) = session.run(None, inputs)
        (out,) = compiled.run(inputs)
        keyed = compiled(**inputs)  # the call form gives outputs under their ONNX names
        assert list(keyed) == ["last_hidden_state"]
        np.testing.assert_array_equal(keyed["last_hidden_state"], out)
        assert out.shape == expected.shape and out.dtype == expected.dtype
        np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL, err_msg=f"{name} at input shape {shape}")
