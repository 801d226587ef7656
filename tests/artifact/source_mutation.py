"""Semantic edits of a launch plan, as an attacker who rebuilds a file with the project's own writer makes them:
one edit of one kernel's Triton source (a mask loosened or dropped, an offset widened, a bound raised, a loop run
further, an index swapped, a constant changed) or one launch's grid shrunk, every digest recomputed. The sweep
(test_source_sweep.py) calls each file on every backend; see there for what must hold.

Each edit is located with ``ast`` in the kernel's source and applied as text, so the edited source is what a
person editing the file by hand would write. Every launch that runs the same code is edited alike (the file
stores a code once), so the edit is not refused merely for a code that two launches disagree on.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable

import numpy as np

from aotc.ir.digest import seal
from aotc.ir.graph import Graph
from aotc.ir.schedule import Kernel, Schedule
from aotc.ir.symbolic import add, floordiv

# the kinds of edit, and which of them can leave a file whose answers differ with no check able to tell
KINDS = ("mask", "offset", "bound", "loop", "index", "constant", "grid")
SIGNATURE_ONLY = "constant"  # a value computed differently: only a signature vouches for kernel arithmetic


@dataclasses.dataclass(frozen=True)
class Edit:
    kind: str
    what: str  # for the report: the launch, the line and the change
    schedule: Schedule


def _segments(source: str, fn: ast.FunctionDef) -> list[tuple[str, ast.AST]]:
    """(kind, node) for each place of ``fn`` an edit of a kind can be made."""
    out: list[tuple[str, ast.AST]] = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("load", "store"):
            out.append(("offset", n.args[0]))
            for k in n.keywords:
                if k.arg == "mask":
                    out.append(("mask", k))
        elif isinstance(n, ast.Compare) and len(n.ops) == 1:
            out.append(("bound", n))
        elif isinstance(n, ast.For):
            out.append(("loop", n.iter))
        elif isinstance(n, ast.Constant) and isinstance(n.value, float) and n.value not in (0.0,):
            out.append(("constant", n))
        elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Add)) and isinstance(n.left, ast.Name):
            out.append(("index", n))
    return out


def _text_edit(src: str, node: ast.AST, kind: str, rng: np.random.Generator) -> str | None:
    """The source with ``node`` (of ``kind``) edited, or None where no edit of it applies."""
    seg = ast.get_source_segment(src, node)
    if seg is None:
        return None
    k = int(rng.choice([1, 2, 7, 64, 513, 4096]))
    if kind == "offset":
        new = rng.choice([f"{seg} + {k}", f"{seg} - {k}", f"({seg}) * 2", f"({seg}) + {k} * 0"])
    elif kind == "mask":
        value = ast.get_source_segment(src, node.value)  # type: ignore[attr-defined]
        parts = value.split(" & ") if value else []
        choices = [f"mask=({value}) | True", "mask=None"]  # every lane kept; the mask dropped
        if len(parts) > 1:
            drop = int(rng.integers(len(parts)))
            choices.append("mask=" + " & ".join(p for j, p in enumerate(parts) if j != drop))
        new = rng.choice(choices)
    elif kind == "bound":
        op = type(node.ops[0])  # type: ignore[attr-defined]
        right = ast.get_source_segment(src, node.comparators[0])  # type: ignore[attr-defined]
        left = ast.get_source_segment(src, node.left)  # type: ignore[attr-defined]
        flip = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "=="}.get(op)
        choices = [f"{left} {_op(op)} ({right}) + {k}"]
        choices.append(f"{left} {_op(op)} ({right}) - {k}")
        if flip:
            choices.append(f"{left} {flip} {right}")
        new = rng.choice(choices)
    elif kind == "loop":
        args = node.args  # type: ignore[attr-defined]
        stop = ast.get_source_segment(src, args[1] if len(args) > 1 else args[0])
        new = seg.replace(stop, f"({stop}) + {k}", 1) if stop else None
    elif kind == "index":
        left = node.left.id  # type: ignore[attr-defined]
        names = sorted({n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name) and n.id != left})
        other = names[int(rng.integers(len(names)))] if names else None
        new = seg.replace(left, other, 1) if other else None
    elif kind == "constant":
        new = repr(float(node.value) * float(rng.choice([1.1, -1.0, 2.0, 0.5])))  # type: ignore[attr-defined]
    else:
        return None
    return None if new is None else _replace(src, node, str(new))


def _op(op: type) -> str:
    return {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}[op]


def _replace(src: str, node: ast.AST, new: str) -> str:
    lines = src.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    a = starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]  # codegen writes ASCII
    b = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
    return src[:a] + new + src[b:]


def _with_code(s: Schedule, name: str, source: str) -> Schedule:
    kernels = tuple(dataclasses.replace(k, source=source) if k.name == name else k for k in s.kernels)
    return dataclasses.replace(s, kernels=kernels)


def _shrunk(k: Kernel, rng: np.random.Generator) -> Kernel | None:
    d = int(np.argmax([0 if isinstance(g, int) and g <= 1 else 1 for g in k.grid]))
    g = k.grid[d]
    if isinstance(g, int) and g <= 1:
        return None
    new = rng.choice(["minus1", "half", "one"])
    grid = list(k.grid)
    grid[d] = add(g, -1) if new == "minus1" else floordiv(g, 2) if new == "half" else 1
    return dataclasses.replace(k, grid=tuple(grid))


def mutate(graph: Graph, s: Schedule, rng: np.random.Generator, kind: str | None = None) -> Edit | None:
    """One edit of ``s`` (of a ``kind`` drawn when not given), resealed against ``graph``; None where the drawn
    place admits no edit of its kind (the caller draws again)."""
    kind = kind or str(rng.choice(KINDS))
    i = int(rng.integers(len(s.kernels)))
    k = s.kernels[i]
    if kind == "grid":
        shrunk = _shrunk(k, rng)
        if shrunk is None:
            return None
        kernels = list(s.kernels)
        kernels[i] = shrunk
        edited = dataclasses.replace(s, kernels=tuple(kernels))
        what = f"launch {i} ({k.name}) grid {k.grid} -> {shrunk.grid}"
    else:
        tree = ast.parse(k.source)
        (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        places = [node for c, node in _segments(k.source, fn) if c == kind]
        if not places:
            return None
        node = places[int(rng.integers(len(places)))]
        new = _text_edit(k.source, node, kind, rng)
        if new is None or new == k.source:
            return None
        try:
            ast.parse(new)
        except SyntaxError:
            return None
        edited = _with_code(s, k.name, new)
        line = node.lineno - fn.lineno  # type: ignore[attr-defined]
        what = f"{k.name} body line {line}: {kind}: {ast.get_source_segment(k.source, node)!r} edited"
    resealed = dataclasses.replace(edited, kernels=tuple(seal(graph, x) for x in edited.kernels))
    return Edit(kind, what, resealed)


def draw(graph: Graph, s: Schedule, rng: np.random.Generator, tries: int = 50) -> Edit:
    for _ in range(tries):
        e = mutate(graph, s, rng)
        if e is not None:
            return e
    raise AssertionError("no edit applies to this plan")


Mutator = Callable[[Graph, Schedule, np.random.Generator], Edit]
