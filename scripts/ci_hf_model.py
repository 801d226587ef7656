"""A Hugging Face model file, as a user writes one for ``aotc compile``: MPNet from a small random config (no
download), dynamic batch and sequence. CI compiles it in a fresh venv holding only ``pip install -e
'.[torch]'`` and transformers, so an extra that breaks transformers (a torchvision that does not load beside the
CPU torch, which transformers imports when it is installed) fails there rather than on a user's first try."""

from __future__ import annotations

import torch
import transformers

import aotc


def build():
    torch.manual_seed(0)
    config = transformers.MPNetConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=66,
    )
    model = transformers.MPNetModel(config).eval()
    batch, seq = aotc.Dim("batch", min=1, max=8), aotc.Dim("seq", min=2, max=64)
    return model, {"input_ids": aotc.TensorSpec((batch, seq), "int64")}
