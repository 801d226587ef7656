"""Triton knobs changed for one block and restored after it.

The ahead-of-time compile (``kernels/aot.py``) and the interpret backend (``runtime/backends/triton_interp.py``)
both switch Triton's knobs around a call; the runtime may not import kernels, so the one helper lives here, below
both. Nothing here imports Triton: the caller hands in its knobs object.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def knob(knobs: Any, name: str, value: Any, env: str | None = None) -> Iterator[None]:
    """``knobs.<name>`` set to ``value`` for a block, through the knobs object's own dict: the knob's setter
    would export it to the environment, where the rest of the process would see it. ``env`` names a variable
    to set as well (``"1"``/``"0"``), for a knob whose value Triton's own cache keys on through the environment."""
    missing = object()
    saved = knobs.__dict__.get(name, missing)
    saved_env = os.environ.get(env) if env else None
    knobs.__dict__[name] = value
    if env:
        os.environ[env] = "1" if value else "0"
    try:
        yield
    finally:
        if saved is missing:
            knobs.__dict__.pop(name, None)
        else:
            knobs.__dict__[name] = saved
        if env:
            if saved_env is None:
                os.environ.pop(env, None)
            else:
                os.environ[env] = saved_env
