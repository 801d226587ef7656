"""Each address of a kernel bounded from its source as stored, at one launch's names (its size args, constexprs
and grid, all known for a shape), and held to the extents the reader proved inside the launch's values.

``Extents`` are derived by the compiler from its own record of the index math and stored beside the source;
the reader proves them inside each value (``binding_checks``), but a file whose source was edited (a loosened
mask, a raised gather bound, a widened offset) with its digests recomputed keeps extents that no longer
describe its code. So before the first launch at a shape every load, store and atomic of the source
(``source_program``) is bounded at that shape by interval arithmetic, and each must lie inside its
pointer's extents: an address outside them, or one that cannot be bounded, refuses the launch.

The arithmetic is in ``source_intervals`` (and ``tile_decode``), the region of a tensor descriptor's loads and stores
in ``source_descriptors``; what the source may hold in ``source_program``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping

from aotc.artifact.source_descriptors import descriptor_bounds
from aotc.artifact.source_intervals import Interval, Shape, Unbounded
from aotc.artifact.source_program import Access, parse_program
from aotc.errors import ArtifactError, ShapeError
from aotc.ir.schedule import GRID_NAMES, ArgKind, Kernel
from aotc.ir.symbolic_values import evaluate

INT32_MAX = 2**31 - 1


def launch_names(k: Kernel, env: Mapping[str, int]) -> tuple[dict[str, int], tuple[int, int, int]]:
    """What launch ``k`` passes for its size args and constexprs, and its grid, at the symbols' ``env``."""
    names = {a.name: evaluate(a.size, env) for a in k.args if a.kind is ArgKind.SIZE}
    names.update(k.constexprs)
    grid = tuple(evaluate(g, env) for g in k.grid)
    return names, grid  # type: ignore[return-value]


def check_source(k: Kernel, env: Mapping[str, int], what: str) -> None:
    """Raise ArtifactError unless every address of ``k``'s source lies, at ``env`` (the symbols' binding),
    inside the extents its pointer's value was proved to hold, and every store and atomic goes through an arg
    the launch writes."""
    if k.extents is None:
        return
    try:
        names, grid = launch_names(k, env)
    except ShapeError as e:
        raise ArtifactError(f"{what}: its names cannot be evaluated at {dict(env)}: {e}") from None
    check_launch(k, names, grid, what)


def check_launch(k: Kernel, names: Mapping[str, int], grid: tuple[int, int, int], what: str) -> None:
    """``check_source`` at what the launch passes (``launch_names``), for a caller that has it already."""
    x = k.extents
    if x is None:
        return
    prog = parse_program(k.source, k.name)
    where = dict(names, **dict(zip(GRID_NAMES, grid)))
    index = {a.name: j for j, a in enumerate(k.args)}
    if any(g <= 0 for g in grid):
        return  # no program runs: nothing is touched
    shape = Shape(prog, names, grid, {a.name: a.type for a in k.args})
    for acc in prog.accesses:
        for pointer, (lo, hi) in _bounds(shape, acc, what):
            j = index.get(pointer)
            if j is None or k.args[j].kind is ArgKind.SIZE:
                raise ArtifactError(f"{what}: line {acc.line} addresses {pointer!r}, which is no pointer arg")
            arg = k.args[j]
            if acc.op != "load" and arg.kind is ArgKind.BUFFER and arg.value not in k.outputs:
                raise ArtifactError(
                    f"{what}: line {acc.line} ({acc.text[:100]!r}) writes through {pointer}, which the launch only "
                    "reads; the kernel's source does not match its plan, so the launch is refused"
                )
            slo, shi = evaluate(x.lows[j], where), evaluate(x.highs[j], where)
            if lo < slo or hi > shi:
                raise ArtifactError(
                    f"{what}: line {acc.line} ({acc.text[:100]!r}) reaches offsets {_num(lo)}..{_num(hi)} of "
                    f"{pointer} at {where}, outside {slo}..{shi}, the extents the reader proved inside its value; "
                    "the kernel's source does not match its extents, so the launch is refused"
                )
    if shape.peak > INT32_MAX and not any(a.type == "i64" for a in k.args) and "int64" not in k.source:
        raise ArtifactError(
            f"{what}: its index math reaches {int(shape.peak)} at {where}, past int32, the type it is computed in "
            "(no int64 arg or cast): the offsets it computes would wrap, so the launch is refused"
        )


def _bounds(shape: Shape, acc: Access, what: str) -> list[tuple[str, Interval]]:
    out = []
    depth = sys.getrecursionlimit()
    # A kernel of many gathers (a grid sample's taps, the ids of one feeding the next) nests its index math deeper than
    # the default 1000 frames let the interval walk go; 5000 still leaves the C stack room for it.
    sys.setrecursionlimit(max(depth, 5000))
    try:
        if acc.descriptor:  # the box is clipped to the descriptor: its region is what it can touch
            return descriptor_bounds(shape, acc.pointer)
        ctx = shape.literals(acc.mask)
        for pointer, (c, terms), lits in shape.pointers(acc.pointer, ctx):
            if not shape.feasible(lits):
                continue  # its mask keeps no lane
            iv = shape.combine(c, terms, lits)
            if iv[0] <= iv[1]:
                if math.isinf(iv[0]) or math.isinf(iv[1]):
                    raise Unbounded("its offset reads a value the index math does not bound")
                out.append((pointer, iv))
    except (Unbounded, RecursionError) as e:
        raise ArtifactError(
            f"{what}: line {acc.line} ({acc.text[:100]!r}): {e}; the reader cannot bound what it touches, so the "
            "launch is refused"
        ) from None
    finally:
        sys.setrecursionlimit(depth)
    return out


def _num(v: float) -> str:
    return str(int(v)) if not math.isinf(v) else str(v)
