"""In-place writes into fresh tensors, run by the Translator as torch's functionalization would run them.

A tensor that inplace.py's plan names (a local root) is followed: the Translator keeps its latest value and a
version that each write bumps. Every view of it (slices, selects, aliases that keep the dtype) records the path
from the root (its ``chain``) and the version it was read at; a write through a view is the op's functional twin
applied to the view's current value, written back into the root through each step of the chain in reverse
(``slice_scatter``, ``select_scatter``), and a view read after a write is read again from the latest value, so it
shows the write, as torch's view of the same memory would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aotc.frontend import elementwise as ew
from aotc.frontend.tensor import Tensor
from aotc.torch_export import ops_layout as L

# a step of a chain: (the view op, its arguments after the tensor), each read as the op and written back as its
# scatter; an alias that keeps the dtype is read and written as the tensor itself
Step = tuple[str, tuple[Any, ...]]
_READ = {"aten.slice.Tensor": L.slice_, "aten.select.int": L.select}
_SCATTER = {"aten.slice.Tensor": L.slice_scatter, "aten.select.int": L.select_scatter}


class Followed:
    """A fresh tensor the program writes in place: its latest value, and how many writes made it."""

    __slots__ = ("latest", "version")

    def __init__(self, value: Tensor) -> None:
        self.latest = value
        self.version = 0


def read(cx: Any, root: Followed, chain: Sequence[Step]) -> Tensor:
    """The view at ``chain`` of the root's latest value."""
    x = root.latest
    for name, args in chain:
        if name in _READ:
            x = _READ[name](cx, x, *args)
    return x


def write_back(cx: Any, root: Followed, chain: Sequence[Step], value: Tensor) -> None:
    """``value`` written at ``chain`` into the root (the views' scatters, innermost first)."""
    bases = [root.latest]
    for name, args in chain[:-1]:
        bases.append(_READ[name](cx, bases[-1], *args) if name in _READ else bases[-1])
    for (name, args), base in zip(reversed(chain), reversed(bases)):
        if name in _SCATTER:
            value = _SCATTER[name](cx, base, value, *args)
    root.latest = value if value.dtype is root.latest.dtype else ew.cast(value, root.latest.dtype)
    root.version += 1
