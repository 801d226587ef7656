"""A GPT-2-style decoder with dynamic batch and sequence length.

Token + position embeddings, pre-LN blocks (causal self-attention through
``F.scaled_dot_product_attention(is_causal=True)``, GELU(tanh) MLP), a final
LayerNorm and an lm head tied to the token embedding. The forward returns the
logits, shape (batch, seq, vocab).

State-dict keys and shapes match Hugging Face ``GPT2Model`` (``wte.weight``,
``wpe.weight``, ``h.0.ln_1.weight``, ``h.0.attn.c_attn.weight``, ``h.0.mlp.c_fc.weight``,
``ln_f.weight``, ...). HF GPT-2 uses ``Conv1D`` layers, linear layers whose weight is
stored transposed relative to ``nn.Linear``, as (in, out); ``Conv1D`` below does the
same, so an HF checkpoint loads as it is (drop the ``h.N.attn.bias`` /
``attn.masked_bias`` causal-mask buffers that older checkpoints carry, and the
``transformer.`` prefix of ``GPT2LMHeadModel`` files).
"""

from __future__ import annotations

import zlib

import numpy as np

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn


class Conv1D(nn.Module):
    """HF GPT-2's linear layer: ``x @ weight + bias`` with ``weight`` stored as (in, out)."""

    def __init__(self, n_out: int, n_in: int) -> None:  # HF's argument order: (nf, nx)
        super().__init__()
        self.weight = nn.Parameter(np.zeros((n_in, n_out), np.float32))
        self.bias = nn.Parameter(np.zeros((n_out,), np.float32))

    def forward(self, x):
        return x @ self.weight + self.bias


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = Conv1D(3 * d_model, d_model)
        self.c_proj = Conv1D(d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        hd = d // self.n_head
        q = q.reshape(b, t, self.n_head, hd).transpose(1, 2)
        k = k.reshape(b, t, self.n_head, hd).transpose(1, 2)
        v = v.reshape(b, t, self.n_head, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(4 * d_model, d_model)
        self.c_proj = Conv1D(d_model, 4 * d_model)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, eps: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model, eps=eps)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln_2 = nn.LayerNorm(d_model, eps=eps)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(
        self,
        vocab_size: int = 512,
        n_positions: int = 128,
        d_model: int = 64,
        n_layer: int = 2,
        n_head: int = 4,
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model {d_model} is not a multiple of n_head {n_head}")
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(n_positions, d_model)
        self.h = nn.ModuleList([Block(d_model, n_head, eps) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model, eps=eps)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(aotc.arange(t))
        for block in self.h:
            x = block(x)
        # the lm head is tied to the token embedding, as in GPT-2
        return self.ln_f(x) @ self.wte.weight.T


def random_weights(model: nn.Module, seed: int) -> dict[str, np.ndarray]:
    """Variance-preserving normal(0, 1/fan_in) matrices (Conv1D weights are (in, out); embeddings
    get std 1/sqrt(d), so the tied head's logits are not all ~0) and noisy norms and biases so every
    parameter visibly matters in tests; seeded per key so it does not depend on key order."""
    out = {}
    for name, value in model.state_dict().items():
        shape = tuple(value.shape)
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        if len(shape) == 2:
            fan_in = shape[1] if name in ("wte.weight", "wpe.weight") else shape[0]
            arr = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
        elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            arr = 1.0 + 0.1 * rng.normal(size=shape)
        else:
            arr = 0.05 * rng.normal(size=shape)
        out[name] = arr.astype(np.float32)
    return out


def build(
    vocab_size: int = 512,
    n_positions: int = 128,
    d_model: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    seed: int = 0,
) -> tuple[GPT2, dict[str, TensorSpec]]:
    model = GPT2(vocab_size, n_positions, d_model, n_layer, n_head)
    model.load_state_dict(random_weights(model, seed))
    batch = Dim("batch", min=1, max=64)
    seq = Dim("seq", min=1, max=n_positions)
    return model, {"input_ids": TensorSpec((batch, seq), "int64")}
