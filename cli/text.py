"""Small text helpers shared by the commands' human-readable output."""

from __future__ import annotations

from collections.abc import Sequence


def format_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


def table(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Left-aligned columns, two spaces apart; ``(none)`` for no rows."""
    if not rows:
        return [indent + "(none)"]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
