"""Every kernel the kernel tests run under the interpreter is fenced to the offsets its Extents claim
(aotc/kernels/reach.py): a load or store the compile-time derivation missed fails the test that made it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aotc.runtime.backends import triton_interp


@pytest.fixture(autouse=True)
def _extents_checked(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(triton_interp, "CHECK_EXTENTS", True)
    yield
