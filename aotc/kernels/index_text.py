"""Index arithmetic as Triton text: small folding helpers, row-major offsets and reshape dim groups.

An index is a tuple of Triton expressions, one per dim of a value, each a tile broadcastable against
the kernel's iteration space. Plain integer literals are folded here so generated code stays short
(``x1 * 64 + x0``, not ``((x1 * 64) + (0 * 1)) + x0``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from aotc.ir.graph import Graph
from aotc.ir.index import binds_as_one
from aotc.ir.symbolic import evaluate, mul
from aotc.ir.types import Shape, ShapeDim

_ATOM = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$|^-?\d+$")
_NAME = re.compile(r"(?<![.\w])[A-Za-z_]\w*")


def is_name(text: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text))


def names(text: str) -> set[str]:
    """Identifiers in ``text``, attribute names (``x.to``) and keywords of calls left out."""
    return {m.group(0) for m in _NAME.finditer(text) if not text[m.end() :].lstrip().startswith("=")}


def and_terms(mask: str) -> list[str]:
    """The top-level ``&`` operands of ``mask``, outer parentheses removed."""
    mask = mask.strip()
    while mask.startswith("(") and _balanced_call(mask) and _closes_at_end(mask):
        mask = mask[1:-1].strip()
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(mask):
        depth += (ch in "([") - (ch in ")]")
        if ch == "&" and depth == 0:
            terms.append(mask[start:i])
            start = i + 1
    terms.append(mask[start:])
    out: list[str] = []
    for t in terms:
        t = t.strip()
        sub = and_terms(t) if t.startswith("(") and _closes_at_end(t) else [t]
        out += sub
    return out


def _closes_at_end(text: str) -> bool:
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return i == len(text) - 1
    return False


def is_int(text: str) -> bool:
    return bool(re.fullmatch(r"-?\d+", text))


def paren(text: str) -> str:
    """``text`` as one operand: bracketed unless it is a name, a number, a call or subscript, or one group."""
    return text if _ATOM.match(text) or binds_as_one(text) else f"({text})"


def _balanced_call(text: str) -> bool:
    """``f(a, b)`` or ``(a + b)``: one outer bracket pair spanning the text (after a name)."""
    m = re.match(r"^[A-Za-z_][A-Za-z0-9_.]*\(|^\(", text)
    if not m or not text.endswith(")"):
        return False
    depth = 0
    for i, ch in enumerate(text[m.end() - 1 :], start=m.end() - 1):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i != len(text) - 1:
            return False
    return True


def add(a: str, b: str) -> str:
    if is_int(a) and is_int(b):
        return str(int(a) + int(b))
    if a == "0":
        return b
    if b == "0":
        return a
    if is_int(b) and int(b) < 0:
        return f"{a} - {-int(b)}"
    if b.startswith("-"):  # ``-x * 3 + y`` negates its first product only, so ``a - x * 3 + y`` is the same sum
        return f"{a} - {b[1:]}"
    return f"{a} + {b}"


def sub(a: str, b: str) -> str:
    if is_int(a) and is_int(b):
        return str(int(a) - int(b))
    if b == "0":
        return a
    return f"{a} - {paren(b)}"


def mul_(a: str, b: str) -> str:
    if is_int(a) and is_int(b):
        return str(int(a) * int(b))
    if a == "0" or b == "0":
        return "0"
    if a == "1":
        return b
    if b == "1":
        return a
    return f"{paren(a)} * {paren(b)}"


def div(a: str, b: str) -> str:
    if is_int(a) and is_int(b) and int(b) > 0 and int(a) >= 0:
        return str(int(a) // int(b))
    if b == "1" or a == "0":
        return a
    return f"{paren(a)} // {paren(b)}"


def mod(a: str, b: str) -> str:
    if is_int(a) and is_int(b) and int(b) > 0 and int(a) >= 0:
        return str(int(a) % int(b))
    if b == "1" or a == "0":
        return "0"
    return f"{paren(a)} % {paren(b)}"


def is_one(d: ShapeDim) -> bool:
    return isinstance(d, int) and d == 1


def row_major(index: Sequence[str], dims: Sequence[str]) -> str:
    """The row-major linear position of ``index`` in a shape whose dims print as ``dims`` (Horner form)."""
    out = "0"
    for i, d in zip(index, dims):
        out = add(mul_(out, d) if out != "0" else "0", i)
    return out


def unravel(linear: str, dims: Sequence[str]) -> list[str]:
    """Per-dim indices of a row-major ``linear`` position in a shape printing as ``dims``."""
    out: list[str] = []
    stride = "1"
    for k in range(len(dims) - 1, 0, -1):
        out.append(mod(div(linear, stride), dims[k]))
        stride = mul_(stride, dims[k])
    if dims:
        out.append(div(linear, stride))  # the outermost index needs no modulo (nor its size)
    return out[::-1]


def reshape_groups(graph: Graph, src: Shape, dst: Shape) -> list[tuple[range, range]]:
    """Split a reshape into runs of source and destination dims with equal element counts.

    Within a run the linear position is preserved, so only that run needs ``//`` and ``%``; a run of one
    dim on both sides passes its index straight through. Falls back to one run when the symbolic
    products cannot be matched.
    """
    whole = [(range(len(src)), range(len(dst)))]
    hint = {s.name: s.max for s in graph.symbols}  # orders products numerically; equality is symbolic
    groups: list[tuple[range, range]] = []
    i = j = 0
    while i < len(src) and j < len(dst):
        i0, j0 = i, j
        a, b = src[i], dst[j]
        i, j = i + 1, j + 1
        while a != b:
            va, vb = evaluate(a, hint), evaluate(b, hint)
            if va == vb:
                return whole  # equal at the hint but not provably equal
            if va < vb:
                if i >= len(src):
                    return whole
                a, i = mul(a, src[i]), i + 1
            else:
                if j >= len(dst):
                    return whole
                b, j = mul(b, dst[j]), j + 1
        groups.append((range(i0, i), range(j0, j)))
    if not groups:
        return whole
    if i < len(src) or j < len(dst):  # trailing size-1 dims join the last run
        last = groups[-1]
        groups[-1] = (range(last[0].start, len(src)), range(last[1].start, len(dst)))
    return groups


def rename(text: str, mapping: Mapping[str, str]) -> str:
    """``text`` with every name in ``mapping`` (whole identifiers, not attributes) replaced at once."""
    if not mapping:
        return text
    pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, mapping)) + r")(?!\w)")
    return pattern.sub(lambda m: mapping[m.group(1)], text)
