"""The address fence of a launch under Triton's interpreter: every load, store and atomic is checked against the
launch's own argument arrays before any of it happens.

The kernel-source allow-list (``aotc.ir.kernel_source``) stops Python payloads, but a pure-Triton kernel could
still ``tl.store(ptr + offset)`` anywhere in the host process under the interpreter. The fence wraps the
interpreter's native memory module for one launch: each address (of the lanes its mask keeps) must lie inside
one of the launch's argument arrays, and a store or atomic inside one the launch writes. A refusal is an
``AddressFenceError`` naming the kernel and the argument nearest the address. It costs a min/max (and, rarely,
a search) over each access's addresses, a few percent of what the interpreter spends on the access.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from aotc.errors import ExecError


class AddressFenceError(ExecError):
    """A kernel under the interpreter reached for memory outside its launch's argument arrays (or wrote into
    one it only reads); the access was refused before any of it happened."""


class Fence:
    """The memory one launch may touch: its argument arrays, ``[start, end)`` in bytes, each readable and
    possibly writable. Wraps the interpreter's native memory module (``triton.runtime.interpreter._interpreter``,
    through which every load, store and atomic goes) for the launch."""

    def __init__(self, kernel: str, regions: list[tuple[int, int, str, bool]]) -> None:
        self.kernel = kernel
        self.regions = sorted(regions)
        self.starts = np.array([r[0] for r in self.regions], dtype=np.uint64)
        self.ends = np.array([r[1] for r in self.regions], dtype=np.uint64)
        # the argument each pointer array was computed from (``ptr + offset``), by the array's identity: what a
        # refusal names
        self._bases: dict[int, tuple[weakref.ref, str]] = {}

    def around(self, native: Any) -> FencedMemory:
        return FencedMemory(native, self)

    def tracing(self, orig: Any) -> Any:
        """``InterpreterBuilder.create_addptr`` that notes which argument each pointer it makes comes from."""

        def create_addptr(builder: Any, ptr: Any, offset: Any) -> Any:
            out = orig(builder, ptr, offset)
            name = self.base(ptr.data)
            if name is not None and isinstance(out.data, np.ndarray):
                if len(self._bases) > 4096:
                    self._bases = {k: v for k, v in self._bases.items() if v[0]() is not None}
                self._bases[id(out.data)] = (weakref.ref(out.data), name)
            return out

        return create_addptr

    def base(self, ptrs: Any) -> str | None:
        """The argument ``ptrs`` was computed from: noted when it was, else the one its first lane lies in."""
        hit = self._bases.get(id(ptrs))
        if hit is not None and hit[0]() is ptrs:
            return hit[1]
        flat = np.asarray(ptrs).reshape(-1)
        if flat.size == 0:
            return None
        at = int(flat[0])  # a pointer argument splat over a tile starts exactly at its array
        holding = [r for r in self.regions if r[0] <= at < r[1]]
        return max(holding)[2] if holding else None

    def check(self, ptrs: np.ndarray, mask: np.ndarray | None, size: int, write: bool, op: str) -> None:
        addr = ptrs if mask is None else ptrs[np.broadcast_to(mask, ptrs.shape).astype(bool, copy=False)]
        if addr.size == 0:
            return
        lo, hi = int(addr.min()), int(addr.max()) + size
        i = int(np.searchsorted(self.starts, lo, side="right")) - 1
        if i >= 0 and hi <= self.regions[i][1] and (self.regions[i][3] or not write):
            return  # the common case: every lane inside one argument
        addr = addr.reshape(-1).astype(np.uint64, copy=False)
        ok = np.zeros(addr.shape, dtype=bool)
        for start, end, _, writable in self.regions:
            if writable or not write:
                ok |= (addr >= start) & (addr + np.uint64(size) <= end)
        if not ok.all():
            raise self.refusal(ptrs, int(addr[~ok][0]), size, op)

    def refusal(self, ptrs: Any, at: int, size: int, op: str) -> AddressFenceError:
        inside = [r for r in self.regions if r[0] <= at and at + size <= r[1]]
        name = self.base(ptrs)
        if inside and not inside[0][3]:
            where = f"into {inside[0][2]}, which the launch only reads"
        else:
            mine = [r for r in self.regions if r[2] == name]
            if not mine:  # a pointer of unknown origin: the argument nearest below it
                mine = [max((r for r in self.regions if r[0] <= at), default=min(self.regions, default=None))]
            region = mine[0]
            if region is None:
                where = "the launch has no pointer arguments"
            elif at >= region[0]:
                start, end, arg, _ = region
                where = f"{at + size - end} bytes past the end of {arg} ({end - start} bytes)"
            else:
                where = f"{region[0] - at} bytes before {region[2]}"
        through = f" through {name}" if name is not None else ""
        return AddressFenceError(
            f"kernel {self.kernel}: a {op}{through} of {size} bytes at {at:#x} lies outside its launch's argument "
            f"arrays ({where}); the interpreter refused it before it happened"
        )


class FencedMemory:
    """The interpreter's native memory calls, each checked against a ``Fence`` first; anything else passes."""

    def __init__(self, native: Any, fence: Fence) -> None:
        self._native, self._fence = native, fence

    def __getattr__(self, name: str) -> Any:
        return getattr(self._native, name)

    def load(self, ptrs: Any, mask: Any, other: Any, dtype: Any) -> Any:
        self._fence.check(ptrs, mask, np.dtype(dtype).itemsize, False, "load")
        return self._native.load(ptrs, mask, other, dtype)

    def store(self, ptrs: Any, value: Any, mask: Any) -> Any:
        self._fence.check(ptrs, mask, value.dtype.itemsize, True, "store")
        return self._native.store(ptrs, value, mask)

    def atomic_cas(self, ptrs: Any, cmp: Any, val: Any, sem: Any) -> Any:
        self._fence.check(ptrs, None, val.dtype.itemsize, True, "atomic compare-and-swap")
        return self._native.atomic_cas(ptrs, cmp, val, sem)

    def atomic_rmw(self, op: Any, ptrs: Any, val: Any, mask: Any, sem: Any) -> Any:
        self._fence.check(ptrs, mask, val.dtype.itemsize, True, "atomic")
        return self._native.atomic_rmw(op, ptrs, val, mask, sem)
