"""The grouped program-id decode of matmul and conv tiles, bounded by its form (``source_intervals``): a relation
interval arithmetic cannot see. Codegen decodes one program id into a tile's row and column in groups of
``GROUP`` rows (Triton's tutorial 03 order)::

    in_group = GROUP * num_n; first = (pid // in_group) * GROUP; size = min(num_m - first, GROUP)
    pid_m = first + (pid % in_group) % size;  pid_n = (pid % in_group) // size

Interval arithmetic bounds ``pid_n`` only by ``GROUP * num_n - 1``. Within a full group ``size = GROUP`` and the
column is below ``num_n``; in the last, partial group ``pid < num_m * num_n`` makes ``pid % in_group < size *
num_n``: the column is below ``num_n`` there too. The row is below ``num_m`` since ``r % size < size <= num_m -
first``. Each rule checks its premises on the launch's values and gives None where the form or a premise does not
hold, which leaves the plain interval bound.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from aotc.artifact.source_program import SourceProgram, call_name

# a ``source_intervals.Shape`` (not imported: it imports this module)
Shape = Any
Interval = tuple[float, float]


def grouped_column(shape: Shape, node: ast.BinOp, ctx: frozenset) -> Interval | None:
    """``(pid % in_group) // size``, the tile's column: in ``[0, num_n)`` when ``pid < num_m * num_n``."""
    if not isinstance(node.op, ast.FloorDiv):
        return None
    prog = shape.prog
    left = prog.deref(node.left)
    size = _min_of_difference(prog, node.right)
    if size is None or not (isinstance(left, ast.BinOp) and isinstance(left.op, ast.Mod)):
        return None
    num_m, first, group = size
    pid, in_group = left.left, left.right
    gid = _times(prog, first, group, shape)
    if gid is None:
        return None
    gid = prog.deref(gid)
    if not (isinstance(gid, ast.BinOp) and isinstance(gid.op, ast.FloorDiv)):
        return None
    if not (same(prog, gid.left, pid) and same(prog, gid.right, in_group)):
        return None
    values = [shape.interval(x, frozenset()) for x in (num_m, group, in_group)]
    if any(lo != hi or math.isinf(lo) for lo, hi in values):
        return None
    m, g, p = (v[0] for v in values)
    if g < 1 or p % g:
        return None
    n = p // g
    plo, phi = shape.interval(pid, ctx)
    if plo < 0 or phi > m * n - 1:
        return None
    return 0, n - 1


# -- masks ------------------------------------------------------------------------------------------


def grouped_row(shape: Shape, node: ast.expr, ctx: frozenset) -> Interval | None:
    """``first + r % min(num_m - first, group)`` (the tile's row): in ``[first, num_m)`` where the divisor is
    at least 1, since ``r % s < s <= num_m - first``."""
    n = shape.prog.deref(node)
    if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add)):
        return None
    for first, rem in ((n.left, n.right), (n.right, n.left)):
        r = shape.prog.deref(rem)
        if not (isinstance(r, ast.BinOp) and isinstance(r.op, ast.Mod)):
            continue
        size = _min_of_difference(shape.prog, r.right)
        if size is None or not same(shape.prog, size[1], first):
            continue
        slo, _ = shape.interval(r.right, ctx)
        if slo < 1:
            return None
        flo, _ = shape.interval(first, ctx)
        _, mhi = shape.interval(size[0], frozenset())
        return flo, mhi - 1
    return None


def same(prog: SourceProgram, a: ast.expr, b: ast.expr) -> bool:
    """Whether two nodes compute one value: the same assignment, or the same expression of the same names."""
    a, b = prog.deref(a), prog.deref(b)
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, ast.Name):
        return prog.refs.get(id(a), -1) == prog.refs.get(id(b), -2)  # type: ignore[arg-type]
    if isinstance(a, ast.Constant):
        return a.value == b.value  # type: ignore[attr-defined]
    if isinstance(a, ast.BinOp):
        return type(a.op) is type(b.op) and same(prog, a.left, b.left) and same(prog, a.right, b.right)  # type: ignore[attr-defined]
    return False


def _min_of_difference(prog: SourceProgram, node: ast.expr) -> tuple[ast.expr, ast.expr, ast.expr] | None:
    """``(num_m, first, group)`` where ``node`` is ``min(num_m - first, group)``."""
    n = prog.deref(node)
    if not (isinstance(n, ast.Call) and call_name(n) in ("min", "tl.minimum") and len(n.args) == 2):
        return None
    diff = prog.deref(n.args[0])
    if not (isinstance(diff, ast.BinOp) and isinstance(diff.op, ast.Sub)):
        return None
    return diff.left, diff.right, n.args[1]


def _times(prog: SourceProgram, node: ast.expr, factor: ast.expr, shape: Shape) -> ast.expr | None:
    """``x`` where ``node`` is ``x * factor`` or ``factor * x`` (factor compared by value)."""
    n = prog.deref(node)
    if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)):
        return None
    f = shape.interval(factor, frozenset())
    for x, y in ((n.left, n.right), (n.right, n.left)):
        if shape.interval(y, frozenset()) == f and f[0] == f[1]:
            return x
    return None
