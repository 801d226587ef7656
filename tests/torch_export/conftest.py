from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("torch")
# torch_models.py beside the tests, as the onnx tests import their helpers
sys.path.insert(0, os.path.dirname(__file__))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests run only when asked for: ``-m slow`` (or any -m expression) or AOTC_RUN_SLOW=1."""
    if config.option.markexpr or os.environ.get("AOTC_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or AOTC_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords and item.path.is_relative_to(os.path.dirname(__file__)):
            item.add_marker(skip)
