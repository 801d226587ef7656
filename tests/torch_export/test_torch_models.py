"""Real PyTorch models, unchanged, through ``aotc.compile(module, inputs)``: torch.export, the ATen table, lowering and
kernels, then the artifact run on the cpu backend (and, for the smallest, under the Triton interpreter) at two
values of each dynamic dim from the one file, against PyTorch eager under ``torch.no_grad()`` with the same weights.

Models with attention show one fused attention kernel per layer. Skipped without torch (``pip install aotc[torch]``);
the Hugging Face models also need transformers, the vision models torchvision.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module
from torch_models import MODELS

import aotc
from aotc.errors import ExecError
from aotc.ir.templates import KernelKind

torch = torch_module()
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def compiled() -> dict[str, tuple[Any, Any]]:
    """(torch module, CompiledModel) by model name, each compiled once per module."""
    return {}


def _get(name: str, cache: dict[str, tuple[Any, Any]]) -> tuple[Any, Any]:
    if name not in cache:
        case = MODELS[name]
        module = case.build()
        cache[name] = (module, aotc.compile(module, case.inputs))
    return cache[name]


def _leaves(out: Any) -> dict[str, np.ndarray]:
    """Eager outputs keyed as aotc names them: a ModelOutput or dict by its keys, a tensor as itself."""
    if isinstance(out, torch.Tensor):
        return {"": out.numpy()}
    return {k: v.numpy() for k, v in out.items() if isinstance(v, torch.Tensor)}


def _check(name: str, module: Any, run: Any, feeds: dict[str, np.ndarray]) -> None:
    with torch.no_grad():
        expected = _leaves(module(**{k: torch.from_numpy(v) for k, v in feeds.items()}))
    got = run(**feeds)
    got = {"": got} if isinstance(got, np.ndarray) else got
    assert set(got) == set(expected), f"{name}: outputs {sorted(got)}, torch gives {sorted(expected)}"
    for key, want in expected.items():
        assert got[key].shape == want.shape and got[key].dtype == want.dtype, (name, key)
        np.testing.assert_allclose(got[key], want, rtol=RTOL, atol=ATOL, err_msg=f"{name} {key} at {feeds.keys()}")


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if c.slow else []) for n, c in MODELS.items()]
)
def test_model_matches_pytorch_eager_at_two_sizes(name: str, compiled: dict[str, tuple[Any, Any]]) -> None:
    case = MODELS[name]
    module, model = _get(name, compiled)
    assert list(model.input_names) == list(case.inputs)  # feeds written for the torch module work unchanged
    rng = np.random.default_rng(0)
    for shape in case.shapes:
        _check(name, module, model, case.feeds(shape, rng))
    if case.attention_layers:
        kinds = [k.kind for k in model.schedule.kernels]
        assert kinds.count(KernelKind.ATTENTION) == case.attention_layers, model.explain()


def _known_bug(case: Any) -> list[Any]:
    return [pytest.mark.xfail(raises=ExecError, reason=case.interpret_bug, strict=True)] if case.interpret_bug else []


@pytest.mark.parametrize("name", [pytest.param(n, marks=_known_bug(c)) for n, c in MODELS.items() if c.interpret])
def test_small_model_matches_under_the_triton_interpreter(name: str, compiled: dict[str, tuple[Any, Any]]) -> None:
    pytest.importorskip("triton")
    case = MODELS[name]
    module, model = _get(name, compiled)
    exe = aotc.load(model.artifact_bytes, device="interpret")
    _check(name, module, exe, case.feeds(case.shapes[0], np.random.default_rng(1)))
