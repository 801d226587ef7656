"""The PyTorch models the torch.export importer is tested on: small random Hugging Face configs (2 layers, hidden
32, vocab 128), torchvision's definitions at 32x32 images, and a hand-written LSTM in the style of PyTorch's fastrnns
custom cells. Each case builds the torch module, the aotc input specs and feeds at two values of each dynamic dim."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch_kit import torch_module, torchvision_module, transformers_module

from aotc import Dim, TensorSpec

VOCAB = 128
BATCH, SEQ = Dim("batch", min=1, max=8), Dim("seq", min=1, max=64)
TEXT = {"input_ids": TensorSpec((BATCH, SEQ), "int64"), "attention_mask": TensorSpec((BATCH, SEQ), "int64")}
SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)


@dataclass(frozen=True)
class Case:
    build: Callable[[], Any]  # -> the torch module, in eval mode
    inputs: dict[str, TensorSpec]
    feeds: Callable[[tuple[int, ...], np.random.Generator], dict[str, np.ndarray]]
    shapes: tuple[tuple[int, ...], ...]  # two values of each dynamic dim
    # Fused attention kernels expected: one per layer (Swin: one per block, the shifted-window blocks included,
    # whose mask is added across a view of the scores' batch dims).
    attention_layers: int = 0
    interpret: bool = False  # small enough to run under the Triton interpreter too (under 1 s; the CNN, 6 s)
    slow: bool = False  # minutes on a 2-core machine: runs with -m slow
    interpret_bug: str = ""  # a known failure under the interpreter: its run is a strict xfail naming it


def text_feeds(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    ids = rng.integers(0, VOCAB, size=shape).astype(np.int64)
    mask = np.ones(shape, np.int64)
    mask[0, shape[1] // 2 :] = 0  # a padded row exercises the attention mask
    return {"input_ids": ids, "attention_mask": mask}


def image_feeds(shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal(shape).astype(np.float32)}


def hf(config: str, model: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        torch, tf = torch_module(), transformers_module()
        torch.manual_seed(0)
        return getattr(tf, model)(getattr(tf, config)(**kwargs)).eval()

    return build


def vit() -> Any:
    torch, tf = torch_module(), transformers_module()
    torch.manual_seed(0)
    cfg = tf.ViTConfig(**{**SMALL, "vocab_size": None}, image_size=32, patch_size=8)
    return tf.ViTModel(cfg, add_pooling_layer=False).eval()


def whisper_encoder() -> Any:
    torch, tf = torch_module(), transformers_module()
    torch.manual_seed(0)
    ids = dict(pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    cfg = tf.WhisperConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        encoder_attention_heads=2,
        decoder_layers=1,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=16,
        max_source_positions=16,
        max_target_positions=16,
        **ids,
    )
    return tf.WhisperModel(cfg).get_encoder().eval()


def vision(name: str) -> Callable[[], Any]:
    def build() -> Any:
        torch = torch_module()
        torch.manual_seed(0)
        m = getattr(torchvision_module().models, name)(num_classes=10).eval()
        for mod in m.modules():  # batch-norm statistics that are not the identity
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.normal_(0, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        return m

    return build


def small_swin() -> Any:
    """torchvision's Swin Transformer (shifted windows, relative position bias, patch merging) at a small size."""
    torch = torch_module()
    swin = torchvision_module().models.swin_transformer
    torch.manual_seed(0)
    return swin.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4], num_classes=10
    ).eval()


def lstm() -> Any:
    """Two stacked layers of a hand-written LSTM cell (torch.matmul, torch.sigmoid, torch.tanh), unrolled over a
    fixed 6 time steps, as in PyTorch's benchmarks/fastrnns/custom_lstms.py."""
    torch = torch_module()
    nn = torch.nn

    class LSTMCell(nn.Module):
        def __init__(self, input_size: int, hidden_size: int) -> None:
            super().__init__()
            self.weight_ih = nn.Parameter(torch.randn(4 * hidden_size, input_size) * 0.3)
            self.weight_hh = nn.Parameter(torch.randn(4 * hidden_size, hidden_size) * 0.3)
            self.bias_ih = nn.Parameter(torch.randn(4 * hidden_size) * 0.1)
            self.bias_hh = nn.Parameter(torch.randn(4 * hidden_size) * 0.1)

        def forward(self, x: Any, state: tuple[Any, Any]) -> tuple[Any, tuple[Any, Any]]:
            hx, cx = state
            gates = (
                torch.matmul(x, self.weight_ih.t()) + self.bias_ih + torch.matmul(hx, self.weight_hh.t()) + self.bias_hh
            )
            ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
            ingate, forgetgate = torch.sigmoid(ingate), torch.sigmoid(forgetgate)
            cellgate, outgate = torch.tanh(cellgate), torch.sigmoid(outgate)
            cy = forgetgate * cx + ingate * cellgate
            hy = outgate * torch.tanh(cy)
            return hy, (hy, cy)

    class LSTM(nn.Module):
        def __init__(self, input_size: int = 8, hidden_size: int = 16, steps: int = 6) -> None:
            super().__init__()
            self.cells = nn.ModuleList([LSTMCell(input_size, hidden_size), LSTMCell(hidden_size, hidden_size)])
            self.hidden_size, self.steps = hidden_size, steps

        def forward(self, x: Any) -> dict[str, Any]:
            layer_in = x.unbind(1)[: self.steps]
            for cell in self.cells:
                h = c = x.new_zeros(x.shape[0], self.hidden_size)
                outs = []
                for t in range(self.steps):
                    out, (h, c) = cell(layer_in[t], (h, c))
                    outs.append(out)
                layer_in = outs
            return {"output": torch.stack(layer_in, 1), "h": h, "c": c}

    torch.manual_seed(0)
    return LSTM().eval()


def _text(build: Callable[[], Any], layers: int = 2, interpret: bool = False) -> Case:
    return Case(build, TEXT, text_feeds, ((2, 7), (3, 16)), layers, interpret)


def _image(name: str, attention: int = 0, slow: bool = False, interpret: bool = False) -> Case:
    spec = {"x": TensorSpec((BATCH, 3, 32, 32))}
    return Case(vision(name), spec, image_feeds, ((2, 3, 32, 32), (3, 3, 32, 32)), attention, interpret, slow)


MODELS: dict[str, Case] = {
    "bert": _text(hf("BertConfig", "BertModel", **SMALL), interpret=True),
    "gpt2": _text(
        hf(
            "GPT2Config",
            "GPT2Model",
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=0,
            use_cache=False,
        ),
        interpret=True,
    ),
    "llama": _text(
        hf(
            "LlamaConfig",
            "LlamaModel",
            **{**SMALL, "num_attention_heads": 4},
            num_key_value_heads=2,
            use_cache=False,
            bos_token_id=0,
            eos_token_id=0,
        ),
        interpret=True,
    ),
    "distilbert": _text(
        hf(
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
    "albert": _text(hf("AlbertConfig", "AlbertModel", embedding_size=16, **SMALL)),
    "electra": _text(hf("ElectraConfig", "ElectraModel", embedding_size=16, **SMALL)),
    "deberta_v2": _text(hf("DebertaV2Config", "DebertaV2Model", **SMALL)),
    "clip_text": _text(hf("CLIPTextConfig", "CLIPTextModel", **SMALL, bos_token_id=0, eos_token_id=2, pad_token_id=1)),
    "roberta": _text(hf("RobertaConfig", "RobertaModel", **{**SMALL, "max_position_embeddings": 80})),
    # the relative-position bucket kernel ANDs a constant True (a regression case for pointwise_ops.literal)
    "t5_encoder": _text(
        hf("T5Config", "T5EncoderModel", vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2),
        interpret=True,
    ),
    "vit": Case(
        vit,
        {"pixel_values": TensorSpec((BATCH, 3, 32, 32))},
        lambda shape, rng: {"pixel_values": rng.standard_normal(shape).astype(np.float32)},
        ((2, 3, 32, 32), (3, 3, 32, 32)),
        2,
        interpret=True,
    ),
    "whisper_encoder": Case(
        whisper_encoder,
        {"input_features": TensorSpec((BATCH, 16, 32))},
        lambda shape, rng: {"input_features": rng.standard_normal(shape).astype(np.float32)},
        ((2, 16, 32), (3, 16, 32)),
        2,
        interpret=True,
    ),
    "resnet18": _image("resnet18"),
    "mobilenet_v3_small": _image("mobilenet_v3_small", interpret=True),
    "efficientnet_b0": _image("efficientnet_b0"),
    "convnext_tiny": _image("convnext_tiny"),
    "swin_small_config": Case(
        small_swin,
        {"x": TensorSpec((BATCH, 3, 32, 32))},
        image_feeds,
        ((2, 3, 32, 32), (3, 3, 32, 32)),
        4,
        interpret=True,
    ),
    "swin_t": _image("swin_t", attention=12, slow=True),
    "lstm": Case(
        lstm,
        {"x": TensorSpec((BATCH, 6, 8))},
        lambda shape, rng: {"x": rng.standard_normal(shape).astype(np.float32)},
        ((2, 6, 8), (5, 6, 8)),
        interpret=True,
    ),
}
