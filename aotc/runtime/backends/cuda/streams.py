"""Independent branches of a schedule on separate streams: which launches depend on which (by the memory they
touch, for one shape's concrete arena offsets), and a greedy assignment of launches to a few streams with the
event waits that keep every dependency. A schedule that is one chain stays on one stream with no events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# One memory access: (space, lo, hi). Space 0 is the call's slot (arena offsets); every other storage group
# (an input, a weight, an output) is its own space, keyed by its root value id + 1.
Access = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class StreamPlan:
    count: int  # streams a call uses; 1: everything in order on the slot's main stream
    stream_of: tuple[int, ...]  # per launch
    waits: tuple[tuple[int, ...], ...]  # per launch: launches on other streams it must wait for
    records: frozenset[int]  # launches after which an event is recorded (waited for, or an aux stream's tail)
    tails: tuple[int, ...]  # the last launch of each auxiliary stream (1..count-1), joined back at the end


SEQUENTIAL = StreamPlan(1, (), (), frozenset(), ())


def _overlap(a: Access, b: Access) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def dependencies(accesses: Sequence[tuple[Sequence[Access], Sequence[Access]]]) -> list[set[int]]:
    """For each launch, the earlier launches it must follow: read-after-write, write-after-read and
    write-after-write on overlapping memory."""
    deps: list[set[int]] = []
    history: list[tuple[Access, int, bool]] = []  # every access so far: (access, launch, is_write)
    for i, (reads, writes) in enumerate(accesses):
        mine = set()
        for acc, j, was_write in history:
            if any(_overlap(acc, w) for w in writes) or (was_write and any(_overlap(acc, r) for r in reads)):
                mine.add(j)
        deps.append(mine)
        history.extend((r, i, False) for r in reads)
        history.extend((w, i, True) for w in writes)
    return deps


def plan_streams(accesses: Sequence[tuple[Sequence[Access], Sequence[Access]]], max_streams: int) -> StreamPlan:
    n = len(accesses)
    if max_streams <= 1 or n < 2:
        return SEQUENTIAL
    deps = dependencies(accesses)
    ancestors: list[int] = []  # bitsets
    for i in range(n):
        bits = 0
        for j in deps[i]:
            bits |= ancestors[j] | (1 << j)
        ancestors.append(bits)
    # Only direct dependencies need a wait: drop those another dependency already implies.
    direct = [{j for j in deps[i] if not any(ancestors[k] >> j & 1 for k in deps[i] if k != j)} for i in range(n)]
    tail: list[int] = []
    stream_of: list[int] = []
    waits: list[tuple[int, ...]] = []
    for i in range(n):
        choice = next((s for s, t in enumerate(tail) if t in direct[i]), None)  # continue a chain
        if choice is None:  # a stream whose queued work this launch follows anyway
            choice = next((s for s, t in enumerate(tail) if ancestors[i] >> t & 1), None)
        if choice is None:
            if len(tail) < max_streams:
                choice = len(tail)
                tail.append(i)
            else:
                choice = 0  # no stream free: wait behind stream 0's tail (a false dependency, never a missed one)
        stream_of.append(choice)
        latest: dict[int, int] = {}
        for j in direct[i]:
            s = stream_of[j]
            if s != choice:
                latest[s] = max(latest.get(s, -1), j)  # the latest launch waited for on a stream covers the rest
        waits.append(tuple(sorted(latest.values())))
        tail[choice] = i
    if len(tail) == 1:
        return SEQUENTIAL
    records = frozenset(j for w in waits for j in w) | frozenset(tail[1:])
    return StreamPlan(len(tail), tuple(stream_of), tuple(waits), records, tuple(tail[1:]))
