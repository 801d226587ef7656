"""A GPT-2-style decoder that keeps its key/value cache across calls: prefill a prompt, then one token per call.

The model of ``gpt2.py`` with a static cache: every attention layer declares two states (``self.state``), keys and
values of shape (batch, heads, max_seq, head_dim), zero at the start of a session. A call takes ``input_ids``
(batch, seq) and ``cache_position`` (seq,): the positions those tokens take in the sequence. It writes their keys
and values into the caches at those positions (``index_copy_``, in place) and attends over the whole cache, masked
to the positions up to each token's own, so one compiled file serves both phases:

- prefill: the prompt of any length ``seq`` at positions ``0 .. seq-1``;
- decode: one token (``seq`` = 1) at the next position.

The forward returns the logits, shape (batch, seq, vocab). A position outside ``[0, max_seq)`` is refused at the
call (ExecError) with the cache untouched. Run it through a session, which owns the caches::

    exe = aotc.load("gpt2_decode.aotc", device="cpu")
    tokens = aotc.generate(exe, prompt_ids, max_new_tokens=64, eos_token_id=50256)

State-dict keys match Hugging Face ``GPT2Model`` as in ``gpt2.py`` (``wte.weight``, ``h.0.attn.c_attn.weight``, ...):
a ``GPT2LMHeadModel`` checkpoint loads once its keys lose their ``transformer.`` prefix (``hf_state_dict``).
"""

from __future__ import annotations

import zlib

import numpy as np

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn


class Conv1D(nn.Module):
    """HF GPT-2's linear layer: ``x @ weight + bias`` with ``weight`` stored as (in, out)."""

    def __init__(self, n_out: int, n_in: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(np.zeros((n_in, n_out), np.float32))
        self.bias = nn.Parameter(np.zeros((n_out,), np.float32))

    def forward(self, x):
        return x @ self.weight + self.bias


class CachedSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, max_seq: int, batch: Dim) -> None:
        super().__init__()
        self.n_head = n_head
        hd = d_model // n_head
        self.c_attn = Conv1D(3 * d_model, d_model)
        self.c_proj = Conv1D(d_model, d_model)
        self.k_cache = self.state("k_cache", (batch, n_head, max_seq, hd), "float32")
        self.v_cache = self.state("v_cache", (batch, n_head, max_seq, hd), "float32")

    def forward(self, x, cache_position, mask):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        hd = d // self.n_head
        q = q.reshape(b, t, self.n_head, hd).transpose(1, 2)
        k = k.reshape(b, t, self.n_head, hd).transpose(1, 2)
        v = v.reshape(b, t, self.n_head, hd).transpose(1, 2)
        self.k_cache.index_copy_(2, cache_position, k)
        self.v_cache.index_copy_(2, cache_position, v)
        y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(4 * d_model, d_model)
        self.c_proj = Conv1D(d_model, 4 * d_model)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, eps: float, max_seq: int, batch: Dim) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model, eps=eps)
        self.attn = CachedSelfAttention(d_model, n_head, max_seq, batch)
        self.ln_2 = nn.LayerNorm(d_model, eps=eps)
        self.mlp = MLP(d_model)

    def forward(self, x, cache_position, mask):
        x = x + self.attn(self.ln_1(x), cache_position, mask)
        return x + self.mlp(self.ln_2(x))


class GPT2Decoder(nn.Module):
    def __init__(
        self,
        vocab_size: int = 512,
        n_positions: int = 128,
        d_model: int = 64,
        n_layer: int = 2,
        n_head: int = 4,
        eps: float = 1e-5,
        max_seq: int | None = None,
        max_batch: int = 8,
    ) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model {d_model} is not a multiple of n_head {n_head}")
        self.max_seq = max_seq or n_positions
        if self.max_seq > n_positions:
            raise ValueError(f"max_seq {self.max_seq} exceeds the {n_positions} positions the model embeds")
        self.batch = Dim("batch", min=1, max=max_batch)
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(n_positions, d_model)
        self.h = nn.ModuleList([Block(d_model, n_head, eps, self.max_seq, self.batch) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model, eps=eps)

    def forward(self, input_ids, cache_position):
        x = self.wte(input_ids) + self.wpe(cache_position)
        # token i sees the cache up to its own position: (seq, max_seq), True where attention is allowed
        mask = aotc.arange(self.max_seq)[None, :] <= cache_position[:, None]
        for block in self.h:
            x = block(x, cache_position, mask)
        return self.ln_f(x) @ self.wte.weight.T  # the lm head is tied to the token embedding


def inputs_of(model: GPT2Decoder) -> dict[str, TensorSpec]:
    seq = Dim("seq", min=1, max=model.max_seq)
    return {
        "input_ids": TensorSpec((model.batch, seq), "int64"),
        "cache_position": TensorSpec((seq,), "int64"),
    }


def hf_state_dict(hf_model) -> dict[str, np.ndarray]:
    """A Hugging Face ``GPT2LMHeadModel``'s (or ``GPT2Model``'s) weights under this model's keys."""
    out = {}
    for key, value in hf_model.state_dict().items():
        key = key.removeprefix("transformer.")
        if key == "lm_head.weight" or key.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # the head is tied to wte; the causal-mask buffers are not weights
        out[key] = value.detach().float().numpy()
    return out


def random_weights(model: nn.Module, seed: int) -> dict[str, np.ndarray]:
    """As gpt2.py's: normal(0, 1/fan_in) matrices, noisy norms and biases, seeded per key."""
    out = {}
    for name, value in model.state_dict().items():
        shape = tuple(value.shape)
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        if len(shape) == 2:
            fan_in = shape[1] if name in ("wte.weight", "wpe.weight") else shape[0]
            arr = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
        elif name.endswith(("ln_1.weight", "ln_2.weight")) or name == "ln_f.weight":
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
    max_seq: int | None = None,
    max_batch: int = 8,
    seed: int = 0,
) -> tuple[GPT2Decoder, dict[str, TensorSpec]]:
    model = GPT2Decoder(vocab_size, n_positions, d_model, n_layer, n_head, max_seq=max_seq, max_batch=max_batch)
    model.load_state_dict(random_weights(model, seed))
    return model, inputs_of(model)
