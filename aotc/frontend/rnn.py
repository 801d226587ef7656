"""``nn.LSTM`` with torch's parameter names and gate order, unrolled over a static number of time steps."""

from __future__ import annotations

import math
from typing import Any

from aotc.frontend import functional as F
from aotc.frontend import functions as fn
from aotc.frontend.context import trace_error
from aotc.frontend.module import Module, ModuleError, Parameter, init_uniform
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import dtype_of


class LSTM(Module):
    """torch.nn.LSTM: ``weight_ih_l{k}`` (4H, in), ``weight_hh_l{k}`` (4H, H), ``bias_ih_l{k}``,
    ``bias_hh_l{k}``, with ``_reverse`` for the backward direction; gates i, f, g, o.

    ``forward(input, (h0, c0)=None)`` returns ``(output, (h_n, c_n))``. The time axis must be static.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        for what, v in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ModuleError(f"LSTM {what} must be a positive int, got {v!r}")
        if proj_size:
            raise ModuleError("LSTM proj_size is not supported")
        if not 0.0 <= dropout <= 1.0:
            raise ModuleError(f"LSTM dropout must be in [0, 1], got {dropout}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.bidirectional = bias, batch_first, bidirectional
        self.dropout = dropout  # between layers in training only; inference ignores it
        bound = 1.0 / math.sqrt(hidden_size)
        h4 = 4 * hidden_size
        for layer in range(num_layers):
            n_in = input_size if layer == 0 else hidden_size * self.num_directions
            for sfx in self._suffixes():
                self._add(f"weight_ih_l{layer}{sfx}", (h4, n_in), bound, dtype)
                self._add(f"weight_hh_l{layer}{sfx}", (h4, hidden_size), bound, dtype)
                if bias:
                    self._add(f"bias_ih_l{layer}{sfx}", (h4,), bound, dtype)
                    self._add(f"bias_hh_l{layer}{sfx}", (h4,), bound, dtype)

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self) -> tuple[str, ...]:
        return ("", "_reverse") if self.bidirectional else ("",)

    def _add(self, name: str, shape: tuple[int, ...], bound: float, dtype: Any) -> None:
        arr = init_uniform(shape, bound)
        self.register_parameter(name, Parameter(arr if dtype is None else arr.astype(dtype_of(dtype).np)))

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if input.ndim not in (2, 3):
            raise trace_error(f"LSTM expects input of rank 2 (unbatched) or 3, got {input.ndim}")
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else input.transpose(0, 1) if self.batch_first else input
        steps, batch = x.shape[0], x.shape[1]
        if not isinstance(steps, int):
            raise trace_error(
                f"LSTM unrolls over time, so the sequence length must be static; got the dynamic dim {steps}"
            )
        if steps == 0:
            raise trace_error("LSTM needs at least one time step")
        n_state = self.num_layers * self.num_directions
        if hx is None:
            h0 = c0 = fn.zeros(n_state, batch, self.hidden_size, dtype=x.dtype)
        else:
            h0, c0 = hx
            if unbatched:
                h0, c0 = h0.unsqueeze(1), c0.unsqueeze(1)
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for d, sfx in enumerate(self._suffixes()):
                k = layer * self.num_directions + d
                out, h, c = self._direction(x, h0[k], c0[k], f"l{layer}{sfx}", reverse=d == 1)
                outs.append(out)
                h_n.append(h)
                c_n.append(c)
            x = outs[0] if len(outs) == 1 else fn.cat(outs, dim=2)
        hs, cs = fn.stack(h_n, 0), fn.stack(c_n, 0)
        if unbatched:
            return x.squeeze(1), (hs.squeeze(1), cs.squeeze(1))
        return (x.transpose(0, 1) if self.batch_first else x), (hs, cs)

    def _direction(self, x: Tensor, h: Tensor, c: Tensor, key: str, reverse: bool) -> tuple[Tensor, Tensor, Tensor]:
        """One direction of one layer over a time-major (steps, batch, features) input."""
        w_ih, w_hh = getattr(self, f"weight_ih_{key}"), getattr(self, f"weight_hh_{key}")
        b_ih = getattr(self, f"bias_ih_{key}") if self.bias else None
        b_hh = getattr(self, f"bias_hh_{key}") if self.bias else None
        # the input projection of every step at once: one matmul instead of `steps` small ones
        gates_in = F.linear(x, w_ih, b_ih)
        steps = x.shape[0]
        outs: list[Tensor] = [None] * steps  # type: ignore[list-item]
        for t in reversed(range(steps)) if reverse else range(steps):
            gates = gates_in[t] + F.linear(h, w_hh, b_hh)
            i, f, g, o = gates.chunk(4, dim=1)
            c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
            h = F.sigmoid(o) * F.tanh(c)
            outs[t] = h
        return fn.stack(outs, 0), h, c

    def extra_repr(self) -> str:
        extra = ", batch_first=True" if self.batch_first else ""
        extra += ", bidirectional=True" if self.bidirectional else ""
        return f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}{extra}"
