"""The checks of a plan's memory: its arena buffers and its views.

Each buffer's offset is a multiple of 256 for every binding of the symbols (proved with
``ir.symbolic.divisor`` from the symbols' ``multiple_of``); its lifetime covers the launches that write and
read it; it holds exactly its value's bytes, lies inside the arena and overlaps no buffer live at the same
time; the arena ends where its last buffer does (give or take alignment), so a call allocates no more than
its buffers take. Views join storage acyclically, never with an arena buffer, and a view has its base's
bytes. What cannot be proved over the symbols' ranges is left to the runtime (plan_space.py), and
``check_disjoint`` is what it sweeps per shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from aotc.artifact.code_checks import fail
from aotc.artifact.plan_space import Fact, Plan, refuse
from aotc.ir.schedule import ALIGN, Buffer, Size
from aotc.ir.symbolic import add, mul, smax, to_infix
from aotc.ir.symbolic_values import evaluate


def check_buffers(p: Plan) -> set[int]:
    """Each buffer holds an intermediate of the graph, one buffer a value, live within the plan's launches, at
    an offset aligned for every binding; returns the values that have buffers."""
    s, space, what = p.s, p.space, p.what
    fixed = p.consts | p.inputs | p.outputs
    buffered: set[int] = set()
    for j, b in enumerate(s.buffers):
        bw = f"{what} buffer {j}"
        if b.value not in p.dtypes or b.value in fixed:
            raise fail(bw, f"value %{b.value} is not an intermediate of the graph")
        if b.value in buffered:
            raise fail(bw, f"value %{b.value} has two buffers")
        buffered.add(b.value)
        if not 0 <= b.first <= b.last < len(s.kernels):
            raise fail(bw, f"lifetime {b.first}..{b.last} is not within the {len(s.kernels)} launches")
        space.check(b.nbytes, f"{bw} nbytes", nonneg=True)
        space.check(b.offset, f"{bw} offset", nonneg=True)
        if not space.aligned(b.offset):
            raise fail(bw, f"offset {b.offset} is not provably a multiple of {ALIGN}")
    return buffered


def check_views(p: Plan, buffered: set[int]) -> None:
    """Views join a graph output to the storage of another value: acyclic, never an arena buffer's, with
    the same bytes as their base. A state write's output is joined to the value it overwrites, and nothing else
    joins a state's values: every link of every state's chain is a view (so each write lands in the state's own
    storage), and no other view has a state's value for its value."""
    views: set[int] = set()
    for j, v in enumerate(p.s.views):
        vw = f"{p.what} view {j}"
        if v.value in p.chain:
            if p.links.get(v.value) != v.base or v.value in views:
                raise refuse(
                    vw,
                    "state storage",
                    f"value %{v.value} of a state is joined to %{v.base}, not to the value it overwrites",
                )
        elif v.value not in p.outputs or v.value in views or v.value in buffered:
            raise fail(vw, f"value %{v.value} is not a graph output stored once")
        if v.base not in p.dtypes:
            raise fail(vw, f"base %{v.base} is not a value of the graph")
        views.add(v.value)
        p.roots[v.value] = v.base
    for j, v in enumerate(p.s.views):
        vw = f"{p.what} view {j}"
        root, path = v.value, {v.value}
        while root in p.roots:
            root = p.roots[root]
            if root in path:
                raise refuse(vw, "views", f"views form a cycle through value %{root}")
            path.add(root)
        if root in buffered:
            raise refuse(vw, "views", f"value %{v.value} would share the arena buffer of value %{root}")
        a, b = p.nbytes(v.value), p.nbytes(v.base)
        p.space.at_most(a, b, p.facts, vw, "views", f"value %{v.value} has at most the bytes of its base %{v.base}")
        p.space.at_most(b, a, p.facts, vw, "views", f"base %{v.base} has at most the bytes of value %{v.value}")
    missing = sorted(set(p.links) - views)
    if missing:
        raise refuse(
            p.what, "state storage", f"the state write of value %{missing[0]} is not joined to the state it overwrites"
        )
    for vid in list(p.roots):  # path-compress, so root() is one lookup
        r = vid
        while r in p.roots:
            r = p.roots[r]
        p.roots[vid] = r


def check_arena(p: Plan) -> tuple[Buffer, ...]:
    """Each buffer holds its value's bytes, inside the arena, apart from the buffers live with it; returns the
    buffers to sweep per shape (``check_disjoint``) when that could not be proved, else ``()``.

    Buffers at the same offset must never be live together. Distinct offsets are proved apart in a chain: in
    order, each buffer ends before the next offset and the last ones end inside the arena, so no two buffers
    at different offsets overlap, whatever their lifetimes."""
    s, space, facts, what = p.s, p.space, p.facts, p.what
    at: dict[Size, list[int]] = {}
    for j, b in enumerate(s.buffers):
        bw = f"{what} buffer {j}"
        need = p.nbytes(b.value)
        if b.nbytes != need:
            extra = add(b.nbytes, mul(need, -1))
            if not space.proved(extra):
                for env, nbytes, v in zip(space.bindings(), space.at(b.nbytes), space.at(need)):
                    if nbytes < v:
                        raise refuse(bw, "buffer size", f"at {dict(env)} it holds {nbytes} bytes for a {v}-byte value")
                facts.append(
                    Fact(bw, "buffer size", f"nbytes >= the {to_infix(need)} bytes of value %{b.value}", extra)
                )
        space.at_most(b.nbytes, need, facts, bw, "buffer size", lambda v=b.value: f"nbytes <= the bytes of value %{v}")
        space.require(b.nbytes, facts, bw, "buffer size", "nbytes >= 0")
        space.require(b.offset, facts, bw, "buffer offset", "offset >= 0")
        at.setdefault(b.offset, []).append(j)
    for js in at.values():
        end, holder = -1, -1
        for first, last, j in sorted((s.buffers[j].first, s.buffers[j].last, j) for j in js):
            if first <= end:
                raise fail(what, f"buffers {holder} and {j} are live together and overlap at {dict(space.at_max)}")
            if last > end:
                end, holder = last, j
    order = sorted(at, key=space.at)
    ends = [order[n + 1] if n + 1 < len(order) else s.arena_bytes for n in range(len(order))]
    proved = all(
        space.proved(add(nxt, mul(add(o, nbytes), -1)))
        for o, nxt in zip(order, ends)
        for nbytes in dict.fromkeys(s.buffers[j].nbytes for j in at[o])
    )
    # and no larger than its buffers need, so a call allocates no more than they take (plus alignment)
    if proved and order:  # the last offset's buffers end last
        top: Size = add(order[-1], _largest(s.buffers[j].nbytes for j in at[order[-1]]))
    else:
        top = _largest(add(b.offset, b.nbytes) for b in s.buffers)
    space.at_most(s.arena_bytes, add(top, ALIGN - 1), facts, what, "arena", "arena_bytes <= the end of its buffers")
    if proved:
        return ()
    for env in space.bindings():
        check_disjoint(s.buffers, env, evaluate(s.arena_bytes, env), what)
    return tuple(s.buffers)


def _largest(xs: Iterable[Size]) -> Size:
    out: Size | None = None
    for x in dict.fromkeys(xs):
        out = x if out is None else smax(out, x)
    return 0 if out is None else out


def check_disjoint(buffers: Sequence[Buffer], env: Mapping[str, int], arena: int, what: str) -> None:
    """At one binding: each buffer lies inside the ``arena``-byte arena and buffers whose lifetimes overlap
    do not overlap in memory."""
    spans = []
    for j, b in enumerate(buffers):
        nbytes, offset = evaluate(b.nbytes, env), evaluate(b.offset, env)
        if nbytes < 0 or offset < 0 or offset + nbytes > arena:
            raise fail(
                f"{what} buffer {j}", f"at {dict(env)} it holds {nbytes} bytes at {offset} in a {arena}-byte arena"
            )
        spans.append((offset, offset + nbytes, b.first, b.last, j))
    spans.sort()
    for x in range(len(spans)):
        _, a1, af, al, aj = spans[x]
        for y in range(x + 1, len(spans)):
            b0, _, bf, bl, bj = spans[y]
            if b0 >= a1:
                break
            if af <= bl and bf <= al:
                raise fail(what, f"buffers {aj} and {bj} are live together and overlap at {dict(env)}")


def check_lifetimes(p: Plan, first: Mapping[int, int], last: Mapping[int, int]) -> None:
    """Each buffer's lifetime covers the launches that write and read its value (``first``: the first launch
    writing each value; ``last``: the last reading or writing it)."""
    for j, b in enumerate(p.s.buffers):
        if b.value not in first:
            raise refuse(f"{p.what} buffer {j}", "buffer lifetime", f"no launch writes its value %{b.value}")
        if b.first > first[b.value] or b.last < last[b.value]:
            raise refuse(
                f"{p.what} buffer {j}",
                "buffer lifetime",
                f"lifetime {b.first}..{b.last} does not cover launches {first[b.value]}..{last[b.value]}, "
                f"which write and read value %{b.value}",
            )
