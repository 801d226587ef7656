"""The address fence of a launch under Triton's interpreter: every load, store and atomic is checked against the
argument its pointer was derived from before any of it happens.

The kernel-source allow-list (``aotc.ir.kernel_source``) stops Python payloads, but a pure-Triton kernel could
still ``tl.store(ptr + offset)`` anywhere in the host process under the interpreter, or read past one argument
into the next (a raised gather bound, a loosened mask: arguments often lie side by side in one arena or mapping).
So the fence traces each pointer to the argument it came from: the interpreter turns each pointer argument into a
one-lane pointer (``_implicit_cvt``), and every builder call that makes a pointer from pointers (``ptr + offset``,
splat, broadcast, reshape, ``tl.where`` over pointers, a tensor descriptor's block, ...) hands its operands' origin
on. Each address (of the lanes its mask keeps) must then lie inside that argument, and a store or atomic inside one
the launch writes. A pointer of no traced origin (``int_to_ptr``, one loaded from memory, one a construct the
fence does not know made) is refused outright, never checked against a guess. A refusal is an
``AddressFenceError`` naming the kernel, the argument and, where the address lies in another one, that one.

It costs a dict entry per pointer the kernel makes and a min/max over each access's addresses: a few percent of
what the interpreter spends on the same access.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from aotc.errors import ExecError


class AddressFenceError(ExecError):
    """A kernel under the interpreter reached for memory outside the argument its pointer came from (or wrote
    into one it only reads, or used a pointer of no traced origin); the access was refused before it happened."""


# Builder calls that can make a pointer from pointers (their results take their pointer operands' origin).
# create_int_to_ptr is deliberately absent: a pointer made from an integer has no origin, and is refused.
PROPAGATING = (
    "create_addptr",
    "create_splat",
    "create_unsplat",
    "create_broadcast",
    "create_expand_dims",
    "create_reshape",
    "create_trans",
    "create_cat",
    "create_join",
    "create_split",
    "create_gather",
    "create_bitcast",
    "ternary_op",  # tl.where over pointers (create_select calls it)
)
_PRUNE_AT = 4096


class Fence:
    """The memory one launch may touch: per pointer argument ``[start, end)`` in bytes, its name, and whether
    the launch may write it. ``sources`` are the objects the interpreter turns into those pointer arguments
    (the launch's host tensors, in the same order), by which the fence knows each argument's first pointer."""

    def __init__(self, kernel: str, regions: list[tuple[int, int, str, bool]], sources: Sequence[object] = ()) -> None:
        self.kernel = kernel
        self.regions = list(regions)
        self._source_of = {id(s): i for i, s in enumerate(sources)}
        self._sources = list(sources)  # kept alive, so their ids stay theirs for the launch
        # origin of each pointer array, by the array's identity: the index of its argument, or a tuple of them
        # for a pointer chosen between arguments (tl.where, cat)
        self._origin: dict[int, tuple[weakref.ref, int | tuple[int, ...]]] = {}
        self._prune_at = _PRUNE_AT

    def around(self, native: Any) -> FencedMemory:
        return FencedMemory(native, self)

    # -- tracing ------------------------------------------------------------------------------------------------
    def origin(self, data: Any) -> int | tuple[int, ...] | None:
        hit = self._origin.get(id(data))
        if hit is not None and hit[0]() is data:
            return hit[1]
        return None

    def note(self, data: Any, origin: int | tuple[int, ...]) -> None:
        if not isinstance(data, np.ndarray):
            return
        if len(self._origin) > self._prune_at:  # drop the dead; amortized, as the bound doubles with the living
            self._origin = {k: v for k, v in self._origin.items() if v[0]() is not None}
            self._prune_at = max(_PRUNE_AT, 2 * len(self._origin))
        self._origin[id(data)] = (weakref.ref(data), origin)

    def converting(self, orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """The interpreter's ``_implicit_cvt`` noting which argument each pointer argument it makes is."""

        def cvt(arg: Any) -> Any:
            out = orig(arg)
            i = self._source_of.get(id(arg))
            if i is not None:
                self.note(getattr(getattr(out, "handle", None), "data", None), i)
            return out

        return cvt

    def propagating(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        """A builder call whose pointer results take the origin of its pointer operands."""

        @functools.wraps(orig)
        def call(builder: Any, *args: Any) -> Any:
            out = orig(builder, *args)
            origins: set[int] = set()
            for a in args:
                data = getattr(a, "data", None)
                if data is None:
                    continue
                o = self.origin(data)
                if o is not None:
                    origins.update((o,) if isinstance(o, int) else o)
            if origins:
                merged = next(iter(origins)) if len(origins) == 1 else tuple(sorted(origins))
                for h in out if isinstance(out, tuple) else (out,):
                    self.note(getattr(h, "data", None), merged)
            return out

        return call

    def materializing(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        """``TensorDescHandle.materialize_pointers``: a descriptor's block of pointers comes from its base."""

        @functools.wraps(orig)
        def call(desc: Any, offsets: Any) -> Any:
            ptrs, mask = orig(desc, offsets)
            o = self.origin(desc.base.data)
            if o is not None:
                self.note(ptrs.data, o)
            return ptrs, mask

        return call

    def patches(self, interpreter: Any) -> list[tuple[Any, str, Callable[[Any], Any]]]:
        """``(owner, name, wrap)`` for each of the interpreter's functions the fence wraps for a launch: its memory
        module, its argument conversion and the builder calls that hand a pointer's origin on (those this Triton
        has)."""
        builder = interpreter.InterpreterBuilder
        out: list[tuple[Any, str, Callable[[Any], Any]]] = [
            (interpreter, "_interpreter", self.around),
            (interpreter, "_implicit_cvt", self.converting),
        ]
        out += [(builder, name, self.propagating) for name in PROPAGATING if name in vars(builder)]
        desc = getattr(interpreter, "TensorDescHandle", None)
        if desc is not None and "materialize_pointers" in vars(desc):
            out.append((desc, "materialize_pointers", self.materializing))
        return out

    # -- checking -----------------------------------------------------------------------------------------------
    def check(self, ptrs: np.ndarray, mask: np.ndarray | None, size: int, write: bool, op: str) -> None:
        addr = ptrs if mask is None else ptrs[np.broadcast_to(mask, ptrs.shape).astype(bool, copy=False)]
        if addr.size == 0:
            return
        origin = self.origin(ptrs)
        if origin is None:
            raise AddressFenceError(
                f"kernel {self.kernel}: a {op} through a pointer derived from none of its pointer arguments "
                f"(at {int(addr.reshape(-1)[0]):#x}); the interpreter refused it before it happened"
            )
        if isinstance(origin, int):
            start, end, _, writable = self.regions[origin]
            lo, hi = int(addr.min()), int(addr.max()) + size
            if start <= lo and hi <= end and (writable or not write):
                return  # the common case: every lane inside the argument it came from
            bad = addr.reshape(-1).astype(np.uint64, copy=False)
            ok = (bad >= start) & (bad + np.uint64(size) <= end) if writable or not write else np.zeros(bad.shape, bool)
            raise self.refusal(origin, int(bad[~ok][0]), size, op)
        flat = addr.reshape(-1).astype(np.uint64, copy=False)
        ok = np.zeros(flat.shape, dtype=bool)
        for i in origin:  # a pointer chosen between arguments: each lane inside one of them
            start, end, _, writable = self.regions[i]
            if writable or not write:
                ok |= (flat >= start) & (flat + np.uint64(size) <= end)
        if not ok.all():
            at = int(flat[~ok][0])
            holding = [i for i in origin if self.regions[i][0] <= at < self.regions[i][1]]
            raise self.refusal(holding[0] if holding else origin[0], at, size, op)

    def refusal(self, i: int, at: int, size: int, op: str) -> AddressFenceError:
        start, end, name, writable = self.regions[i]
        if start <= at and at + size <= end and not writable:
            where = f"into {name}, which the launch only reads"
        elif at >= start:
            where = f"{at + size - end} bytes past the end of {name} ({end - start} bytes)"
        else:
            where = f"{start - at} bytes before {name}"
        others = [r[2] for j, r in enumerate(self.regions) if j != i and r[0] <= at < r[1]]
        if others and not where.startswith("into"):
            where += f", inside {others[0]}"
        return AddressFenceError(
            f"kernel {self.kernel}: a {op} through {name} of {size} bytes at {at:#x} lies outside the argument its "
            f"pointer came from ({where}); the interpreter refused it before it happened"
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
