"""The PyTorch models the torch.export importer is tested on (their modules: tests/torch_zoo.py). Each case builds
the torch module, the aotc input specs and feeds at two values of each dynamic dim."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch_zoo import TEXT_MODELS, VOCAB, lstm, small_swin, vision, vit, whisper_encoder

from aotc import Dim, TensorSpec

BATCH, SEQ = Dim("batch", min=1, max=8), Dim("seq", min=1, max=64)
TEXT = {"input_ids": TensorSpec((BATCH, SEQ), "int64"), "attention_mask": TensorSpec((BATCH, SEQ), "int64")}


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


def _text(build: Callable[[], Any], layers: int = 2, interpret: bool = False) -> Case:
    return Case(build, TEXT, text_feeds, ((2, 7), (3, 16)), layers, interpret)


def _image(name: str, attention: int = 0, slow: bool = False, interpret: bool = False) -> Case:
    spec = {"x": TensorSpec((BATCH, 3, 32, 32))}
    return Case(vision(name), spec, image_feeds, ((2, 3, 32, 32), (3, 3, 32, 32)), attention, interpret, slow)


# the text encoders small enough to run under the Triton interpreter too
_INTERPRETED = ("bert", "gpt2", "llama", "t5_encoder")

MODELS: dict[str, Case] = {
    **{name: _text(build, interpret=name in _INTERPRETED) for name, build in TEXT_MODELS.items()},
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
