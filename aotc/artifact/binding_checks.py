"""The checks of a bound plan's launches (schema 6, and every plan the writer writes), each launch and each
arch launch of it:

- its digest: ``aotc.ir.digest.launch_digest`` of the nodes it fuses (ops, attrs, types, how they connect), the
  graph's symbols, its code, args, grid, checks and extents, recomputed from the graph; a graph edited under
  kernels that do not follow it is refused;
- its extents (``Extents``, derived from the code's index math when it was generated): with what the launch
  passes substituted for its size args, constexprs and grid, each of those lies in the interval the extents
  assume, each fact they rest on holds, and each pointer's smallest element offset is >= 0 and its largest
  below its value's element count (a flag arg's: below ``flags``). A size arg swapped for another dim, a
  changed block size or a grid past the tiles its program ids decode into is refused here.
"""

from __future__ import annotations

from aotc.artifact.code_checks import fail
from aotc.artifact.launch_checks import LaunchNodes
from aotc.artifact.plan_space import Plan, Space, refuse
from aotc.errors import ShapeError
from aotc.ir.digest import DIGEST_BYTES, launch_digest
from aotc.ir.schedule import GRID_NAMES, ArgKind, Extents, Kernel, Size
from aotc.ir.symbolic import SymExpr, add, mul, smax, smin, to_infix
from aotc.ir.symbolic_values import reduce_quotients, substitute

_BUFFER, _SIZE = ArgKind.BUFFER, ArgKind.SIZE  # enum lookups, once
_HEX = frozenset("0123456789abcdef")


def check_binding(p: Plan, i: int, k: Kernel, nodes: LaunchNodes, what: str) -> None:
    """The launch's digest (and each arch launch's) is that of its nodes and code, and its extents
    stay inside what it passes them."""
    for kernel, kw in ((k, what), *((v.kernel, f"{what} arch launch {v.arch!r}") for v in k.arch_launches)):
        d = kernel.digest
        if not isinstance(d, str) or len(d) != 2 * DIGEST_BYTES or not _HEX.issuperset(d):
            raise fail(kw, f"digest {str(d)[:40]!r} is not {2 * DIGEST_BYTES} lowercase hex digits")
        if not isinstance(kernel.extents, Extents):
            raise fail(kw, "it has no extents")
        try:
            want = launch_digest(p.graph, kernel, nodes.nodes, p.digests)
        except (TypeError, ValueError) as e:
            raise fail(kw, f"its digest cannot be computed: {e}") from None
        if d != want:
            raise refuse(
                kw,
                "digest",
                f"its digest {d} is not {want}, that of the nodes it computes and its code: the graph or the "
                "launch changed after the compiler bound them",
            )
        check_extents(p, i, kernel, kw)


def check_extents(p: Plan, i: int, k: Kernel, what: str) -> None:
    """What the launch passes for its code's names lies in the intervals its extents assume, the facts they rest
    on hold, and each pointer's offsets stay inside its value (a flag arg's inside the schedule's flags)."""
    x: Extents = k.extents  # type: ignore[assignment]
    if len(x.lows) != len(k.args) or len(x.highs) != len(k.args):
        raise fail(what, f"its extents give {len(x.lows)}/{len(x.highs)} offsets for its {len(k.args)} args")
    env: dict[str, Size] = {a.name: a.size for a in k.args if a.kind is _SIZE}
    env.update(k.constexprs)
    for name, g in zip(GRID_NAMES, k.grid):
        if name in env:
            raise fail(what, f"a size arg or constexpr is named {name!r}, which its extents call the grid")
        env[name] = g
    targets = tuple(
        (p.values[a.value].type if a.kind is _BUFFER else p.s.flags) if a.kind is not _SIZE else None for a in k.args
    )
    key = (id(x), *map(id, env.values()), *map(id, targets), *env)
    seen = p.proved_extents.get(key)
    if seen is not None and seen[0] is x:
        return  # another launch of the same code, passed the same objects, proved with nothing left per shape
    known = len(p.facts)
    space, where = p.space, {"launch": i, "code": k.name}
    if [n for n, _, _ in x.ranges] != list(env):
        raise refuse(
            what,
            "extent",
            f"its extents assume names {[n for n, _, _ in x.ranges][:12]}, not those it passes {list(env)[:12]}",
        )
    for name, lo, hi in x.ranges:
        e = env[name]
        elo, ehi = space.check(e, f"{what} {name}")
        if lo <= elo and ehi <= hi:
            continue
        claim = lambda name=name, e=e, lo=lo, hi=hi: (  # noqa: E731
            f"{name} = {to_infix(e)} is in [{lo}, {hi}], where the code's extents were derived"
        )
        space.require(add(e, -lo), p.facts, what, "extent", claim, **where)
        space.require(add(hi, mul(e, -1)), p.facts, what, "extent", claim, **where)
    for r in x.requires:
        claim = lambda r=r: f"{to_infix(r)} >= 0, which its index math rests on"  # noqa: E731
        space.require(_substituted(p, r, env, key, what), p.facts, what, "extent", claim, **where)
    for a, lo, hi, target in zip(k.args, x.lows, x.highs, targets):
        if a.kind is _SIZE or (lo == 0 and hi == -1):
            if a.kind is _SIZE and (lo, hi) != (0, -1):
                raise fail(what, f"its extents give size arg {a.name} offsets {lo}..{hi}")
            continue
        top = p.numel(a.value) if a.kind is _BUFFER else target
        into = f"value %{a.value}" if a.kind is _BUFFER else "the flags"
        least, most = _substituted(p, lo, env, key, what), _substituted(p, hi, env, key, what)
        claim = lambda a=a, lo=least: f"arg {a.name} reaches offset {to_infix(lo)} >= 0"  # noqa: E731
        space.require(least, p.facts, what, "extent", claim, **where)
        claim = lambda a=a, hi=most, top=top, into=into: (  # noqa: E731
            f"arg {a.name} reaches offset {to_infix(hi)} < the {to_infix(top)} elements of {into}"
        )
        space.require(add(add(top, -1), mul(most, -1)), p.facts, what, "extent", claim, **where)
    if len(p.facts) == known:
        p.proved_extents[key] = (x, tuple(env.values()), targets)  # keeps every key object alive


def _settled(space: Space, e: Size) -> Size:
    """``e`` with each min and max whose arguments' order is proved over the ranges replaced by the one it picks
    (``max(batch - 1, 0)`` is ``batch - 1`` for batch >= 1), which interval bounds cannot see."""
    if isinstance(e, int) or not any(a.kind in ("min", "max") for m, _ in e.terms for a in m):
        return e
    out: Size = e.const
    for mono, c in e.terms:
        term: Size = c
        for a in mono:
            if a.kind in ("min", "max"):
                x, y = (_settled(space, v) for v in a.args)
                if space.proved(add(x, mul(y, -1))):
                    f = x if a.kind == "max" else y
                elif space.proved(add(y, mul(x, -1))):
                    f = y if a.kind == "max" else x
                else:
                    f = smax(x, y) if a.kind == "max" else smin(x, y)
            else:
                f = SymExpr((((a,), 1),))
            term = mul(term, f)
        out = add(out, term)
    return out


def _substituted(p: Plan, e: Size, env: dict[str, Size], key: tuple, what: str) -> Size:
    """``e`` over the code's names with what the launch passes for them, checked sound over the symbols."""
    if isinstance(e, int):
        return e
    k2 = (id(e), key)
    hit = p.substituted.get(k2)
    if hit is not None and hit[0] is e:
        return hit[1]
    try:
        out = reduce_quotients(substitute(e, env))
        p.space.check(out, f"{what} extents")
        out = _settled(p.space, out)
    except ShapeError as err:
        raise fail(what, f"its extents cannot be evaluated: {err}") from None
    p.substituted[k2] = (e, out, tuple(env.values()))
    return out
