"""Releasing GPU resources: ``release_all`` runs every release step even when one fails."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def release_all(steps: Iterable[Callable[[], object]]) -> None:
    """Run every release step even when an earlier one failed, then raise the first error: one failed free
    must not leak the rest, and the first error is the cause (the later ones are usually its echoes)."""
    first: Exception | None = None
    for step in steps:
        try:
            step()
        except Exception as e:
            if first is None:
                first = e
    if first is not None:
        raise first
