"""torch, transformers and torchvision for the tests (and benchmarks) that need them, skipped when missing.

The one place that works around the test extra's torchvision: PyPI's torchvision 0.28 wheel is a CUDA build,
whose C ops (``torchvision::nms`` and the rest) don't load next to the CPU torch 2.13 wheel, so its import fails
registering their fake kernels (``operator torchvision::nms does not exist``). The models never use those ops, so
registration is made a no-op while torchvision imports. With a torchvision whose ops load, nothing is patched.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from typing import Any


def _import(name: str, skip: bool) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices of third-party packages are not aotc's
        if skip:
            import pytest

            return pytest.importorskip(name)
        return importlib.import_module(name)


def torch_module(skip: bool = True) -> Any:
    return _import("torch", skip)


def torchvision_module(required: bool = True, skip: bool = True) -> Any:
    """torchvision, imported once (see the module docstring); None when it is not installed and not required."""
    torch = torch_module(skip)
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    if importlib.util.find_spec("torchvision") is None:
        if required and skip:
            import pytest

            pytest.skip("torchvision is not installed")
        if required:
            raise ImportError("torchvision is not installed")
        return None
    try:
        return _import("torchvision", skip=False)
    except RuntimeError as e:
        if "does not exist" not in str(e):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the half-imported package
    original = torch.library.register_fake
    torch.library.register_fake = lambda *args, **kwargs: lambda fn=None: fn
    try:
        return _import("torchvision", skip=False)
    finally:
        torch.library.register_fake = original


def transformers_module(skip: bool = True) -> Any:
    """transformers imports torchvision when it is installed, so torchvision is imported first."""
    torchvision_module(required=False, skip=skip)
    return _import("transformers", skip)
