"""How a source file is named in locations (``file:line``) that a trace records and an artifact keeps.

A location names its file relative to the project the file belongs to, never by where the checkout happens to
live or where the compiler was started, so the same model compiled from two checkouts (or from another
directory, by an absolute path) gives byte-identical artifacts:

* a file inside an installed package (under a ``site-packages`` or ``dist-packages`` folder) is named from there:
  ``transformers/models/gpt2/modeling_gpt2.py``;
* else from the nearest folder above it that holds a ``pyproject.toml``, ``setup.py`` or ``.git``:
  ``models/gpt2.py``;
* else by its name alone (its own folder is the project).

Names that are not paths (``<stdin>``, ``<string>``) are kept as they are.
"""

from __future__ import annotations

import functools
import os

_PROJECT_MARKERS = ("pyproject.toml", "setup.py", ".git")
_PACKAGE_DIRS = ("site-packages", "dist-packages")


@functools.cache
def source_path(path: str) -> str:
    """``path`` relative to its project (see the module docstring), with ``/`` separators on every platform."""
    if not path or path.startswith("<"):
        return path
    full = os.path.abspath(path)
    folder = os.path.dirname(full)
    return os.path.relpath(full, _root_of(folder)).replace(os.sep, "/")


@functools.cache
def _root_of(folder: str) -> str:
    parts = folder.split(os.sep)
    for name in _PACKAGE_DIRS:
        if name in parts:
            cut = len(parts) - parts[::-1].index(name)  # the innermost one
            return os.sep.join(parts[:cut]) or os.sep
    here = folder
    while True:
        if any(os.path.exists(os.path.join(here, marker)) for marker in _PROJECT_MARKERS):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return folder
        here = parent
