"""Suite-wide settings: every compile in the tests verifies the graph after each lowering stage, and tests marked
slow run only when asked for."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("AOTC_VERIFY_STAGES", "1")
# Compiles schedule and generate kernels but build no cubins: the tests that check the ahead-of-time
# compile ask for their targets themselves (a cold compile costs seconds per kernel).
os.environ.setdefault("AOTC_TARGETS", "none")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests run only when asked for: ``-m slow`` (or any -m expression) or AOTC_RUN_SLOW=1."""
    if config.option.markexpr or os.environ.get("AOTC_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or AOTC_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
