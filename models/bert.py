"""A BERT-style encoder whose state-dict keys match Hugging Face ``BertModel`` exactly.

Inputs: ``input_ids`` (batch, seq) int64 and ``attention_mask`` (batch, seq) int64 with
1 = real token, 0 = padding. Every token has token type 0 (single-segment input),
as when HF's ``token_type_ids`` is left out. Layers are post-LN like the original
BERT; attention is written out by hand (``softmax(q k^T / sqrt(d) + mask) v``), the
way HF's eager attention computes it. Returns a dict with ``last_hidden_state``
(batch, seq, hidden) and ``pooler_output`` (batch, hidden).

A real checkpoint loads unchanged: ``model.load_state_dict(weights)`` where
``weights`` holds numpy arrays read from HF's ``model.safetensors`` with the
``bert.`` prefix (if any) removed (and ``embeddings.position_ids``, a buffer older
checkpoints store, dropped); build the model with the checkpoint's config
(``BertEncoder(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512)``).
"""

from __future__ import annotations

import math
import zlib

import numpy as np

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn

# Added to the scores of padded keys; original BERT's value: exp(-10000) is exactly 0 in float32,
# and unlike finfo.min it cannot overflow when a kernel adds it to another large score.
MASK_VALUE = -10000.0


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, hidden: int, max_positions: int, type_vocab: int, eps: float) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        # token type 0 for every position: row 0 of the token-type table
        x = self.word_embeddings(input_ids) + self.position_embeddings(aotc.arange(t))
        return self.LayerNorm(x + self.token_type_embeddings.weight[0])


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def forward(self, x, mask_bias):
        b, t, d = x.shape
        hd = d // self.heads

        def split_heads(y):
            return y.reshape(b, t, self.heads, hd).permute(0, 2, 1, 3)

        q, k, v = split_heads(self.query(x)), split_heads(self.key(x)), split_heads(self.value(x))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)) + mask_bias
        probs = F.softmax(scores, dim=-1)
        return (probs @ v).permute(0, 2, 1, 3).reshape(b, t, d)


class BertSelfOutput(nn.Module):
    """Projection + residual + post-LN; HF names it ``attention.output``."""

    def __init__(self, d_in: int, hidden: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, eps: float) -> None:
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)
        self.output = BertSelfOutput(hidden, hidden, eps)

    def forward(self, x, mask_bias):
        return self.output(self.self(x, mask_bias), x)


class BertIntermediate(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, intermediate)

    def forward(self, x):
        return F.gelu(self.dense(x))  # BERT's "gelu" is the exact erf form


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float) -> None:
        super().__init__()
        self.attention = BertAttention(hidden, heads, eps)
        self.intermediate = BertIntermediate(hidden, intermediate)
        self.output = BertSelfOutput(intermediate, hidden, eps)

    def forward(self, x, mask_bias):
        x = self.attention(x, mask_bias)
        return self.output(self.intermediate(x), x)


class BertEncoderStack(nn.Module):
    """HF's ``encoder``: only holds ``layer.N``."""

    def __init__(self, n_layers: int, hidden: int, heads: int, intermediate: int, eps: float) -> None:
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(hidden, heads, intermediate, eps) for _ in range(n_layers)])

    def forward(self, x, mask_bias):
        for layer in self.layer:
            x = layer(x, mask_bias)
        return x


class BertPooler(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, x):
        return aotc.tanh(self.dense(x[:, 0]))


class BertEncoder(nn.Module):
    def __init__(
        self,
        vocab_size: int = 512,
        hidden_size: int = 64,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 4,
        intermediate_size: int = 256,
        max_position_embeddings: int = 128,
        type_vocab_size: int = 2,
        layer_norm_eps: float = 1e-12,
    ) -> None:
        super().__init__()
        if hidden_size % num_attention_heads:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of heads {num_attention_heads}")
        eps = layer_norm_eps
        self.embeddings = BertEmbeddings(vocab_size, hidden_size, max_position_embeddings, type_vocab_size, eps)
        self.encoder = BertEncoderStack(num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, eps)
        self.pooler = BertPooler(hidden_size)

    def forward(self, input_ids, attention_mask):
        # (batch, 1, 1, seq) additive bias: 0 where attended, MASK_VALUE on padding
        keep = attention_mask[:, None, None, :].float()
        mask_bias = (1.0 - keep) * MASK_VALUE
        x = self.encoder(self.embeddings(input_ids), mask_bias)
        return {"last_hidden_state": x, "pooler_output": self.pooler(x)}


def random_weights(model: nn.Module, seed: int) -> dict[str, np.ndarray]:
    """Variance-preserving normal(0, 1/fan_in) matrices, noisy LayerNorms and biases (so every
    parameter visibly matters in tests); seeded per key so it does not depend on key order."""
    out = {}
    for name, value in model.state_dict().items():
        shape = tuple(value.shape)
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        if len(shape) == 2:
            arr = rng.normal(0.0, 1.0 / np.sqrt(shape[1]), shape)
        elif name.endswith("LayerNorm.weight"):
            arr = 1.0 + 0.1 * rng.normal(size=shape)
        else:
            arr = 0.05 * rng.normal(size=shape)
        out[name] = arr.astype(np.float32)
    return out


def build(seed: int = 0, **config: float) -> tuple[BertEncoder, dict[str, TensorSpec]]:
    """``config`` takes BertEncoder's keyword arguments (HF ``BertConfig`` names)."""
    model = BertEncoder(**config)
    model.load_state_dict(random_weights(model, seed))
    batch = Dim("batch", min=1, max=64)
    seq = Dim("seq", min=1, max=config.get("max_position_embeddings", 128))
    spec = TensorSpec((batch, seq), "int64")
    return model, {"input_ids": spec, "attention_mask": spec}
