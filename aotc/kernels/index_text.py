"""Index arithmetic as Triton text: symbolic index expressions printed (``to_triton``), small folding helpers,
row-major offsets and reshape dim groups.

An index is a tuple of Triton expressions, one per dim of a value, each a tile broadcastable against
the kernel's iteration space. Plain integer literals are folded here so generated code stays short
(``x1 * 64 + x0``, not ``((x1 * 64) + (0 * 1)) + x0``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from aotc.errors import ShapeError
from aotc.ir.graph import Graph
from aotc.ir.index import INDEX_PREFIX, IndexSpace
from aotc.ir.symbolic import Atom, SymExpr, mul
from aotc.ir.symbolic_values import evaluate
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


_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$|^[0-9]+$")


def to_triton(
    e: int | SymExpr,
    names: Mapping[str, str],
    space: IndexSpace | None = None,
    held: Mapping[int | SymExpr, str] | None = None,
    wide: bool = False,
) -> str:
    """Python/Triton source text for e; ``names`` maps every symbol and index variable to its Triton text.

    Triton's integer ``//`` and ``%`` truncate toward zero (C semantics), which equals floor division only
    for a non-negative numerator; the divisor is always positive. Index math has non-negative numerators,
    so they print as plain ``//`` and ``%``. Given ``space``, a numerator it cannot prove non-negative
    prints in a form that is exact for either sign.

    ``held`` maps expressions a kernel variable already holds (a dim index unravelled once) to its name, which
    prints in their place. ``wide`` makes every term compute in int64: its first variable is cast, so an
    offset into a buffer of more than 2**31 elements cannot wrap.
    """
    return _Printer(names, space, held or {}, wide).expr(e)


class _Printer:
    def __init__(
        self, names: Mapping[str, str], space: IndexSpace | None, held: Mapping[int | SymExpr, str], wide: bool
    ) -> None:
        self.names, self.space, self.held, self.wide = names, space, held, wide

    def expr(self, e: int | SymExpr) -> str:
        if isinstance(e, int):
            return str(e)
        name = self.held.get(e)
        if name is not None:
            return f"{name}.to(tl.int64)" if self.wide else name
        parts = [(c < 0, self.term(mono, abs(c))) for mono, c in e.terms]
        if e.const:
            parts.append((e.const < 0, str(abs(e.const))))
        lead = next((k for k, (neg, _) in enumerate(parts) if not neg), 0)  # ``x - 1``, not ``-1 + x``
        parts.insert(0, parts.pop(lead))
        neg, body = parts[0]
        out = ("-" + (body if binds_as_one(body) or " * " in body else f"({body})")) if neg else body
        for neg, body in parts[1:]:
            out += f" - {body}" if neg else f" + {body}"
        return out

    def term(self, mono: tuple[Atom, ...], c: int) -> str:
        """``x * y * c``: variables first, then the coefficient, as index math is written by hand."""
        factors = [self.factor(a, alone=len(mono) == 1 and c == 1) for a in mono]
        if self.wide and (mono[0].kind == "sym" or _lone(mono[0]) in self.held):
            factors[0] = f"{factors[0]}.to(tl.int64)"
        if c != 1:
            factors.append(str(c))
        return " * ".join(factors)

    def factor(self, a: Atom, alone: bool) -> str:
        name = self.held.get(_lone(a))
        if name is not None:
            return name
        if a.kind == "sym":
            try:
                text = self.names[a.name]
            except KeyError:
                what = "index variable" if a.name.startswith(INDEX_PREFIX) else "symbol"
                raise ShapeError(f"to_triton: {what} {a.name!r} has no name in the kernel") from None
            return text if binds_as_one(text) else f"({text})"
        if a.kind in ("min", "max"):
            x, y = (self.expr(v) for v in a.args)
            return f"tl.{a.kind}imum({x}, {y})"
        body = self.divmod(a)
        return body if alone else f"({body})"

    def operand(self, e: int | SymExpr) -> str:
        if isinstance(e, int):
            return str(e) if e >= 0 else f"({e})"
        text = self.expr(e)
        return text if binds_as_one(text) else f"({text})"

    def divmod(self, a: Atom) -> str:
        num, d = (self.operand(v) for v in a.args)
        op = "//" if a.kind == "fdiv" else "%"
        if self.space is None or self.space.nonneg(a.args[0]):
            return f"{num} {op} {d}"
        # floor mod from the truncating one: (n % d + d) % d; then n - that is a multiple of d, exact to divide
        fmod = f"({num} % {d} + {d}) % {d}"
        return fmod if a.kind == "mod" else f"({num} - ({fmod})) // {d}"


def _lone(a: Atom) -> SymExpr:
    return SymExpr((((a,), 1),))


def binds_as_one(text: str) -> bool:
    """Whether ``text`` binds as one operand: a name, a number, a call or subscript, or one bracketed group."""
    if _SIMPLE.match(text):
        return True
    depth = 0
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and not (ch.isalnum() or ch in "_."):
            return False
    return depth == 0 and bool(text)
