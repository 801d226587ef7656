"""``nn.MultiheadAttention`` with torch's parameter names (``in_proj_weight``, ``out_proj.weight``, ...)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aotc.frontend import functional as F
from aotc.frontend.context import trace_error
from aotc.frontend.elementwise import as_tensor
from aotc.frontend.functions import ones, triu
from aotc.frontend.layers import Linear
from aotc.frontend.module import Module, ModuleError, Parameter, init_uniform
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import DType


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention for equal query/key/value widths (no ``kdim``/``vdim``/``add_bias_kv``).

    Masks follow torch: a bool ``attn_mask`` or ``key_padding_mask`` is True where attention is
    *not* allowed; a float mask is added to the scores. Returns ``(output, weights)``; weights are
    None when ``need_weights=False`` (which lets the attention run as one fused op).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim <= 0:
            raise ModuleError(f"MultiheadAttention embed_dim must be a positive int, got {embed_dim!r}")
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads <= 0 or embed_dim % num_heads:
            raise ModuleError(f"MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or vdim not in (None, embed_dim):
            raise ModuleError("MultiheadAttention with add_bias_kv, add_zero_attn or other kdim/vdim is not supported")
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.head_dim = embed_dim // num_heads
        # xavier_uniform_ on (3E, E), as torch initializes in_proj_weight
        self.in_proj_weight = Parameter(init_uniform((3 * embed_dim, embed_dim), math.sqrt(6.0 / (4 * embed_dim))))
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, np.float32)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if self.out_proj.bias is not None:
            self.out_proj.bias.data[:] = 0
        if dtype is not None:
            self.to(dtype)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Any = None,
        need_weights: bool = True,
        attn_mask: Any = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        unbatched = query.ndim == 2
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise trace_error("MultiheadAttention expects query, key and value of rank 3 (or 2, unbatched)")
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        e, h, hd = self.embed_dim, self.num_heads, self.head_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        q, k, v = (
            F.linear(t, w[i * e : (i + 1) * e], None if b is None else b[i * e : (i + 1) * e])
            for i, t in enumerate((query, key, value))
        )
        lq, n, s = q.shape[0], q.shape[1], k.shape[0]
        # (L, N, E) -> (N, heads, L, head_dim)
        q, k, v = (t.reshape(t.shape[0], n, h, hd).permute(1, 2, 0, 3) for t in (q, k, v))
        bias = self._mask_bias(attn_mask, key_padding_mask, is_causal, q, n, lq, s)
        if need_weights:
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            probs = F.softmax(scores if bias is None else scores + bias, dim=-1)
            out = probs @ v
            weights = probs.mean(1) if average_attn_weights else probs
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            weights = None
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(lq, n, e))
        if unbatched:
            return out.squeeze(1), (None if weights is None else weights.squeeze(0))
        return (out.transpose(0, 1) if self.batch_first else out), weights

    def _mask_bias(
        self, attn_mask: Any, key_padding_mask: Any, is_causal: bool, q: Tensor, n: Any, lq: Any, s: Any
    ) -> Tensor | None:
        """One additive (N or 1, heads or 1, L, S) bias from torch's mask conventions."""
        terms = []
        if attn_mask is None and is_causal:
            attn_mask = triu(ones(lq, s, dtype=DType.bool), 1)
        for mask, shape in ((attn_mask, None), (key_padding_mask, (n, 1, 1, s))):
            if mask is None:
                continue
            m = as_tensor(mask, q._t())
            if m.dtype is DType.bool:
                m = m.float().masked_fill(m, -math.inf).to(q.dtype)
            else:
                m = m.to(q.dtype)
            if shape is not None:
                m = m.reshape(shape)
            elif m.ndim == 3:  # (N * heads, L, S)
                m = m.reshape(n, self.num_heads, lq, s)
            terms.append(m)
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]
