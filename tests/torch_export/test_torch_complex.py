"""Complex tensors through the torch importer, carried as their two float parts: Llama 4's rotary embedding
(``torch.polar``, ``view_as_complex(q) * freqs``, ``view_as_real``), FNet's Fourier mixing, a complex buffer,
complex division and casts match eager; a complex op aotc does not carry, a complex output and an unused buffer aotc cannot hold are
each handled at the model's line."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec

torch = torch_module()
nn = torch.nn
F32 = np.float32
HERE = "test_torch_complex.py"
BATCH = Dim("batch", min=1, max=4)
SEQ = Dim("seq", min=1, max=16)


def _check(module: Any, specs: dict[str, TensorSpec], *feeds: dict[str, np.ndarray]) -> None:
    model = aotc.compile(module, specs)
    for f in feeds:
        with torch.no_grad():
            want = module(**{k: torch.from_numpy(v) for k, v in f.items()}).numpy()
        got = model(**f)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class LlamaRotary(nn.Module):
    """Llama 4's text rotary embedding and its application to q, as transformers writes them."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)

    def forward(self, q: Any) -> Any:
        pos = torch.arange(q.shape[1], dtype=torch.float32)[None, :]
        freqs = (self.inv_freq[None, :, None] @ pos[:, None, :]).transpose(1, 2)
        freqs_cis = torch.polar(torch.ones_like(freqs), freqs).to(q.device) * 1.0
        q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(q_ * freqs_cis[:, :, None, :]).flatten(3).type_as(q)


def test_llamas_rotary_embedding_matches_eager() -> None:
    rng = np.random.default_rng(0)
    specs = {"q": TensorSpec((BATCH, SEQ, 2, 8))}
    _check(LlamaRotary(), specs, *({"q": rng.standard_normal((b, s, 2, 8)).astype(F32)} for b, s in ((1, 3), (4, 16))))


class ComplexBuffer(nn.Module):
    """Llama 4's vision rotary keeps its frequencies as a complex buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("freqs", torch.polar(torch.rand(4), torch.arange(4.0)), persistent=False)

    def forward(self, x: Any) -> Any:
        c = torch.complex(x[..., 0], x[..., 1])
        mixed = (c * self.freqs + 1.5) / (self.freqs.conj() - 2j)
        return torch.cat(
            [torch.view_as_real(mixed).flatten(-2), mixed.abs(), x.to(torch.complex64).real.flatten(-2)], -1
        )


def test_a_complex_buffer_division_and_casts_match_eager() -> None:
    rng = np.random.default_rng(1)
    specs = {"x": TensorSpec((BATCH, 4, 2))}
    _check(ComplexBuffer(), specs, *({"x": rng.standard_normal((b, 4, 2)).astype(F32)} for b in (1, 3)))


class FourierMixing(nn.Module):
    """FNet's token mixing, and the one-sided and inverse transforms with torch's other normalizations."""

    def forward(self, x: Any) -> Any:
        mixed = torch.fft.fftn(x, dim=(1, 2)).real
        half = torch.fft.rfft(x, norm="ortho").abs()
        along_seq = torch.fft.rfft(x, dim=1).abs()  # one-sided over the dynamic dim: seq // 2 + 1 frequencies
        mixed = mixed + along_seq.sum(1, keepdim=True)
        spectrum = torch.fft.fft(x, dim=1, norm="forward")
        back = torch.fft.ifft(spectrum * 1j, dim=1, norm="forward").real  # -x: the sign of each direction tells
        return torch.cat([mixed, half, spectrum.imag, back], -1)


def test_fnets_fourier_mixing_matches_eager_over_a_dynamic_sequence() -> None:
    rng = np.random.default_rng(3)
    specs = {"x": TensorSpec((BATCH, Dim("seq", min=2, max=16), 6))}  # torch's rfft over seq needs seq >= 2
    sizes = ((1, 2), (2, 5), (3, 16))
    _check(FourierMixing(), specs, *({"x": rng.standard_normal((b, s, 6)).astype(F32)} for b, s in sizes))


def test_a_complex_op_aotc_does_not_carry_is_refused_at_the_models_line() -> None:
    class Chirp(nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.sin(torch.polar(torch.ones_like(x), x)).real

    with pytest.raises(aotc.UnsupportedError) as info:
        aotc.compile(Chirp(), {"x": TensorSpec((BATCH, 8))})
    msg = str(info.value)
    assert re.match(rf".*{HERE}:\d+: aten\.sin\.default on a complex tensor is not supported by aotc \(", msg), msg
    assert "view_as_real" in msg  # it names what aotc does carry


def test_a_complex_output_is_refused_naming_the_way_out() -> None:
    class Rotate(nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.polar(torch.ones_like(x), x)

    with pytest.raises(aotc.UnsupportedError, match=r"output 0 is a complex tensor: .*view_as_real"):
        aotc.compile(Rotate(), {"x": TensorSpec((BATCH, 8))})


def test_a_buffer_no_node_reads_is_not_stored() -> None:
    class TextOnly(nn.Module):  # Llama 4 given input_ids: the vision tower's complex buffer is read by no node
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("vision_freqs", torch.polar(torch.ones(8), torch.arange(8.0)), persistent=False)
            self.proj = nn.Linear(8, 8)

        def forward(self, x: Any) -> Any:
            return self.proj(x)

    module = TextOnly().eval()
    rng = np.random.default_rng(2)
    _check(module, {"x": TensorSpec((BATCH, 8))}, {"x": rng.standard_normal((2, 8)).astype(F32)})
    names = aotc.compile(module, {"x": TensorSpec((BATCH, 8))}).graph.constants
    assert not any("vision_freqs" in n for n in names), sorted(names)
