"""A warning at compile time when an imported model's guards pin a dim declared dynamic to one size or narrow its
range: an ONNX file exported with shapes baked in (``nn.MultiheadAttention`` through torch's TorchScript exporter
reshapes by the traced sequence length, so its guards allow ``seq = 17`` only), or a torch model that slices a
64-row table by ``x.shape[1]``. The artifact is right either way (the runtime refuses every other size), but a user
who declared ``seq`` over [1, 512] learns at compile time, not from the first request of another length.

Each guard is read on its own: the values of the dim for which some values of the guard's other dims satisfy it.
That is a superset of what all the guards together allow, so a dim this calls narrowed is narrowed. Values are
scanned from each end of the dim's range, within SCAN bindings per guard; a guard too wide to scan says nothing.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterator, Sequence
from fractions import Fraction

from aotc.errors import AotcError
from aotc.ir.graph import Guard, Symbol
from aotc.ir.symbolic import SymExpr, add, mul

# At most this many bindings of a guard's dims are evaluated to bound one dim's values.
SCAN = 1 << 14
# A guard's other dims are enumerated only when they have at most this many bindings together.
OTHERS = 256


class PinnedDimWarning(UserWarning):
    """A dim declared dynamic that the model's guards allow at one size only, or over a narrower range."""


def warn_pinned(symbols: Sequence[Symbol], guards: Sequence[Guard], stacklevel: int = 2) -> None:
    """Warn once per dim of ``symbols`` that a guard of ``guards`` pins or narrows, naming the guard and where it
    came from."""
    for s, g, lo, hi in pinned(symbols, guards):
        allowed = f"{s.name} = {lo}" if lo == hi else f"{s.name} in [{lo}, {hi}]"
        what = "pins it to one size" if lo == hi else "narrows it"
        warnings.warn(
            f"dim {s.name!r} is declared dynamic over [{s.min}, {s.max}], but the model's guard {g} {what}: it runs "
            f"only at {allowed}, and every other size is refused when called",
            PinnedDimWarning,
            stacklevel=stacklevel + 1,
        )


def pinned(symbols: Sequence[Symbol], guards: Sequence[Guard]) -> list[tuple[Symbol, Guard, int, int]]:
    """Per dim, the first guard that narrows it and the least and greatest values that guard allows. A guard that
    only makes the dim a multiple of something (``seq % 4 == 0``: a multiple_of) narrows nothing, nor does one that
    excludes only values off that stride (``b % (b // 4) == 0`` beside ``b % 4 == 0`` excludes 1, 2 and 3)."""
    by_name = {s.name: s for s in symbols}
    out = []
    for s in symbols:
        first, last = _aligned(s)
        if first >= last:
            continue  # static already (or empty): nothing to narrow
        found = []
        for g in guards:
            names = _names(g)
            if s.name in names and names <= by_name.keys():
                ends = _ends(s, g, [by_name[n] for n in sorted(names - {s.name})])
                if ends is not None:
                    found.append((g, ends))
        # the stride the guards together keep the dim on: each guard's own, near both ends of the range
        step = s.multiple_of
        for _, ((lo, lo_next), (hi, hi_next)) in found:
            for gap in (lo_next - lo, hi - hi_next):
                step = math.lcm(step, gap) if gap > 0 else step
        for g, ((lo, _), (hi, _)) in found:
            # narrowed where a smaller (greater) value on that stride would lie in the range, but fails
            if lo == hi or lo - step >= s.min or hi + step <= s.max:
                out.append((s, g, lo, hi))
                break
    return out


def _aligned(s: Symbol) -> tuple[int, int]:
    """The least and greatest values of ``s`` its own multiple_of allows."""
    m = s.multiple_of
    return -(-s.min // m) * m, s.max // m * m


def _names(g: Guard) -> frozenset[str]:
    return frozenset().union(*(e.free_symbols() for e in (g.lhs, g.rhs) if isinstance(e, SymExpr)))


def _values(s: Symbol, reverse: bool = False) -> Iterator[int]:
    first, last = _aligned(s)
    return iter(range(last, first - 1, -s.multiple_of) if reverse else range(first, last + 1, s.multiple_of))


def _ends(s: Symbol, g: Guard, others: Sequence[Symbol]) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """From each end of ``s``'s range, the first two values for which some binding of ``others`` satisfies ``g``
    (one value twice where only one passes); None where SCAN evaluations do not find them, where ``others`` have
    too many bindings to enumerate, or where no value passes (the guard's own message says so when called).
    A guard linear in ``s`` alone (``seq <= 512`` over a range of 65536) is solved rather than scanned."""
    if not others:
        solved = _linear_ends(s, g)
        if solved is not None:
            return solved if solved != () else None
    count = 1
    for o in others:
        first, last = _aligned(o)
        count *= max(0, (last - first) // o.multiple_of + 1)
    if count == 0 or count > OTHERS:
        return None
    bindings = list(itertools.product(*(list(_values(o)) for o in others)))
    budget = [SCAN]

    def feasible(v: int) -> bool | None:
        for values in bindings:
            budget[0] -= 1
            if budget[0] < 0:
                return None
            env = dict(zip((o.name for o in others), values), **{s.name: v})
            try:
                if g.holds(env):
                    return True
            except AotcError:  # a divisor of 0 at this binding: not one the guard allows
                continue
        return False

    ends = []
    for reverse in (False, True):
        two: list[int] = []
        for v in _values(s, reverse):
            ok = feasible(v)
            if ok is None:
                return None
            if ok:
                two.append(v)
                if len(two) == 2:
                    break
        if not two:
            return None
        ends.append((two[0], two[-1]))
    return ends[0], ends[1]


def _linear_ends(s: Symbol, g: Guard) -> tuple[tuple[int, int], tuple[int, int]] | tuple[()] | None:
    """``_ends`` of a guard ``a*s + b rel 0`` (``()``: no value passes; None: not such a guard)."""
    diff = add(g.lhs, mul(g.rhs, -1))
    if not isinstance(diff, SymExpr) or len(diff.terms) != 1 or g.rel == "!=":
        return None
    (mono, a), b = diff.terms[0], diff.const
    if len(mono) != 1 or mono[0].kind != "sym" or mono[0].name != s.name or not isinstance(a, int) or a == 0:
        return None
    first, last = _aligned(s)
    lo, hi = first, last
    rel = g.rel if a > 0 else {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "=="}[g.rel]
    bound = Fraction(-b, a)  # a*s + b rel 0  <=>  s rel' -b/a
    if rel in ("<", "<="):
        hi = min(hi, math.floor(bound) - (1 if rel == "<" and bound.denominator == 1 else 0))
    elif rel in (">", ">="):
        lo = max(lo, math.ceil(bound) + (1 if rel == ">" and bound.denominator == 1 else 0))
    else:  # ==
        if bound.denominator != 1:
            return ()
        lo = hi = int(bound)
    m = s.multiple_of
    lo, hi = -(-lo // m) * m, hi // m * m
    if lo > hi or lo > last or hi < first:
        return ()
    return (lo, min(lo + m, hi)), (hi, max(hi - m, lo))
