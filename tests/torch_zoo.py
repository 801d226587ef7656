"""The PyTorch modules aotc's importers are tested on, built once for both paths (torch.export:
tests/torch_export/torch_models.py; ONNX export: tests/onnx/test_onnx_torch_models.py): small random Hugging Face
configs (2 layers, hidden 32, vocab 128), torchvision's definitions at 32x32 images, and a hand-written LSTM in the
style of PyTorch's fastrnns custom cells. Each builder seeds torch and returns the module in eval mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch_kit import torch_module, torchvision_module, transformers_module

VOCAB = 128
SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)


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


# Hugging Face text encoders called with input_ids and attention_mask, by name.
TEXT_MODELS: dict[str, Callable[[], Any]] = {
    "bert": hf("BertConfig", "BertModel", **SMALL),
    "gpt2": hf(
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
    "llama": hf(
        "LlamaConfig",
        "LlamaModel",
        **{**SMALL, "num_attention_heads": 4},
        num_key_value_heads=2,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    ),
    "distilbert": hf(
        "DistilBertConfig",
        "DistilBertModel",
        vocab_size=VOCAB,
        dim=32,
        n_layers=2,
        n_heads=2,
        hidden_dim=64,
        max_position_embeddings=64,
    ),
    "albert": hf("AlbertConfig", "AlbertModel", embedding_size=16, **SMALL),
    "electra": hf("ElectraConfig", "ElectraModel", embedding_size=16, **SMALL),
    "deberta_v2": hf("DebertaV2Config", "DebertaV2Model", **SMALL),
    "clip_text": hf("CLIPTextConfig", "CLIPTextModel", **SMALL, bos_token_id=0, eos_token_id=2, pad_token_id=1),
    "roberta": hf("RobertaConfig", "RobertaModel", **{**SMALL, "max_position_embeddings": 80}),
    # the relative-position bucket kernel ANDs a constant True (a regression case for pointwise_ops.literal)
    "t5_encoder": hf(
        "T5Config", "T5EncoderModel", vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2
    ),
}
