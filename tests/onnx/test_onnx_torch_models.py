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
from torch_kit import torch_module
from torch_zoo import TEXT_MODELS, VOCAB, small_swin, vit

from aotc.compiler import compile_graph
from aotc.ir.templates import KernelKind
from aotc.onnx import import_onnx

ort = pytest.importorskip("onnxruntime")
RTOL, ATOL = 1e-4, 1e-5
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


def text_model(name: str) -> Callable[[], bytes]:
    """The ONNX export of the zoo's text encoder ``name`` (tests/torch_zoo.py)."""

    def build() -> bytes:
        torch = torch_module()
        names = ("input_ids", "attention_mask")
        ids = torch.randint(0, VOCAB, (2, 5))
        mask = torch.ones(2, 5, dtype=torch.int64)
        dyn = {n: {0: "batch", 1: "seq"} for n in (*names, "last_hidden_state")}
        return export(encoder(TEXT_MODELS[name](), names), (ids, mask), list(names), dyn)

    return build


def vit_export() -> bytes:
    dyn = {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}}
    return export(encoder(vit(), ("pixel_values",)), (torch_module().randn(2, 3, 32, 32),), ["pixel_values"], dyn)


def swin_export() -> bytes:
    """The zoo's small Swin Transformer (shifted windows, patch merging); the output is the normalised feature map
    before pooling, so every position is compared."""
    torch = torch_module()
    m = small_swin()
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


# the zoo's text encoders the ONNX path is tested on
TEXT = ("bert", "distilbert", "albert", "electra", "deberta_v2", "clip_text", "roberta", "gpt2", "t5_encoder")

MODELS: dict[str, Case] = {
    **{name: Case(text_model(name)) for name in TEXT},
    "vit": Case(vit_export, "image", (("batch", (1, 8)),), ((2, 3, 32, 32), (1, 3, 32, 32))),
    "swin_t": Case(
        swin_export,
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


def test_a_guard_pinning_a_declared_dynamic_dim_is_a_warning_at_import() -> None:
    """nn.MultiheadAttention through the TorchScript exporter reshapes by the traced sequence length (17): the
    file runs at seq = 17 only. The import says so, naming the dim, the guard and the node it came from."""
    from aotc.frontend.pinned import PinnedDimWarning

    torch = torch_module()

    class Attend(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x: Any) -> Any:
            return self.mha(x, x, x, need_weights=False)[0]

    torch.manual_seed(0)
    f = io.BytesIO()
    with warnings.catch_warnings():  # with grad enabled: under no_grad torch takes its fused path, not exportable
        warnings.simplefilter("ignore")
        torch.onnx.export(Attend().eval(), (torch.randn(2, 17, 16),), f, dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch", 1: "seq"}}, opset_version=17)  # fmt: skip
    data = f.getvalue()
    with pytest.warns(PinnedDimWarning) as warned:
        graph = import_onnx(data, dims={"batch": (1, 8), "seq": (1, 64)})
    (w,) = warned
    text = str(w.message)
    assert "dim 'seq' is declared dynamic over [1, 64]" in text and "pins it to one size" in text, text
    assert "it runs only at seq = 17" in text and "(from onnx node '/mha/Reshape" in text, text
    assert [(s.name, s.min, s.max) for s in graph.symbols] == [("batch", 1, 8), ("seq", 1, 64)]
