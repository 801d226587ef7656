"""Interval arithmetic over a kernel's source at one launch's names (``Shape``), for ``source_bounds``.

The arithmetic is over integers, with every name's value known: an expression is a linear form over atoms
(program ids, ``tl.arange`` lanes, loop counters, loaded data, quotients, remainders, selects and products),
each bounded on its own, so a name read twice (``x * seq - x``) is bounded once. A mask's comparisons bound the
names they compare (``offs < n`` bounds ``offs`` wherever the mask keeps a lane), and ``tl.where(c, a, b)`` is
bounded as ``a`` where ``c`` holds and ``b`` where it does not, so a gather's clamp (``tl.where(bad, 0, idx)``
with ``bad = (idx < 0) | (idx >= n)``) bounds what it selects. Floor division and remainder are bounded for floor
(the interpreter) and truncating (the GPU) semantics alike; a divisor that may be 0 or negative leaves its
quotient unbounded. Loaded data, reductions, dots and math are unbounded values: an address that reads one with
no mask or clamp bounding it cannot be bounded. The grouped tile decode is bounded by its form (``tile_decode``).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence

from aotc.artifact.source_program import SourceProgram, call_name, is_broadcast
from aotc.artifact.tile_decode import grouped_column, grouped_row

INF = math.inf
Interval = tuple[float, float]  # inclusive; lo > hi: empty
Lin = tuple[float, dict]  # constant, {atom key: coefficient}
EMPTY: Interval = (1, 0)
WHOLE: Interval = (-INF, INF)
_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_FOLDED = frozenset({"tl.cdiv", "min", "max", "tl.minimum", "tl.maximum"})
_FLIP = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


_UNSEEN = object()


class Unbounded(Exception):
    """An address the source does not bound (data, a carried value, a division by what may be 0)."""


def _floordiv(a: float, b: float) -> float:
    if math.isinf(a) or math.isinf(b):
        return a / b if not (math.isinf(a) and math.isinf(b)) else -INF
    return a // b


class Shape:
    """One kernel's source evaluated at one launch's names."""

    def __init__(
        self, prog: SourceProgram, names: Mapping[str, int], grid: Sequence[int], types: Mapping[str, str] = {}
    ) -> None:
        self.prog, self.names, self.grid, self.types = prog, names, tuple(grid), types
        self._memo: dict[tuple, Interval] = {}
        self._consts: dict[int, float | None] = {}
        self._lins: dict[int, Lin] = {}
        self.peak = 0.0  # the largest magnitude any bounded index value reached (int32 overflow: source_bounds)

    # -- linear forms ------------------------------------------------------------------------------------
    def lin(self, node: ast.expr) -> Lin:
        """``node`` as a constant plus atoms with coefficients (callers copy, never change, what it gives)."""
        hit = self._lins.get(id(node))
        if hit is None:
            hit = self._lins[id(node)] = self._lin(node)
        return hit

    def _lin(self, node: ast.expr) -> Lin:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                return int(node.value), {}
            if isinstance(node.value, (int, float)):
                return node.value, {}
            raise Unbounded(f"a constant {node.value!r}")
        if isinstance(node, ast.Subscript):
            return self.lin(node.value) if _broadcast(node) else (0, {("node", id(node), node): 1})
        if isinstance(node, ast.Name):
            d = self.prog.def_of(node)
            if d is None:
                raise Unbounded(f"name {node.id!r} is not assigned")
            if d.kind == "param":
                if d.name in self.names:
                    return self.names[d.name], {}
                return 0, {("def", self.prog.refs[id(node)], None): 1}
            index = self.prog.refs[id(node)]
            if d.kind == "expr":
                folded = self._consts.get(index, _UNSEEN)
                if folded is _UNSEEN:
                    c, terms = self.lin(d.node)  # type: ignore[arg-type]
                    folded = self._consts[index] = None if terms else c
                if folded is not None:  # a constant (a tile count, a row stride): folded so products stay linear
                    return folded, {}
            return 0, {("def", index, None): 1}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            c, t = self.lin(node.operand)
            return (-c, {k: -v for k, v in t.items()}) if isinstance(node.op, ast.USub) else (c, t)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            (c1, t1), (c2, t2) = self.lin(node.left), self.lin(node.right)
            s = 1 if isinstance(node.op, ast.Add) else -1
            out = dict(t1)
            for k, v in t2.items():
                out[k] = out.get(k, 0) + s * v
            return c1 + s * c2, {k: v for k, v in out.items() if v}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            (c1, t1), (c2, t2) = self.lin(node.left), self.lin(node.right)
            if not t1:
                return c1 * c2, {k: c1 * v for k, v in t2.items() if c1 * v}
            if not t2:
                return c1 * c2, {k: c2 * v for k, v in t1.items() if c2 * v}
        if isinstance(node, ast.Call):
            name = call_name(node)
            if name == ".to" or name == "tl.cast":
                inner = node.func.value if name == ".to" else node.args[0]  # type: ignore[attr-defined]
                return self.lin(inner)
            if name in ("tl.zeros_like", "tl.zeros"):
                return 0, {}
            if name == "tl.full" and len(node.args) >= 2:
                return self.lin(node.args[1])
            if name in ("int",) and len(node.args) == 1:
                return self.lin(node.args[0])
            if name == "tl.num_programs":
                return self.grid[self._axis(node)], {}
        folded = self._constant(node)
        if folded is not None:
            return folded, {}
        return 0, {("node", id(node), node): 1}

    def _constant(self, node: ast.expr) -> float | None:
        """The value of a quotient, remainder, ``tl.cdiv``, ``min`` or ``max`` of constants, else None."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Call) and call_name(node) in _FOLDED and len(node.args) == 2:
            parts = list(node.args)
        else:
            return None
        values = []
        for part in parts:
            c, t = self.lin(part)
            if t:
                return None
            values.append(c)
        lo, hi = self.atom(node, frozenset())
        return lo if lo == hi and not math.isinf(lo) else None

    def _axis(self, node: ast.Call) -> int:
        if len(node.args) != 1:
            raise Unbounded("a program id with no axis")
        c, t = self.lin(node.args[0])
        if t or c not in (0, 1, 2):
            raise Unbounded("a program id of an axis that is not 0, 1 or 2")
        return int(c)

    def interval(self, node: ast.expr, ctx: frozenset) -> Interval:
        c, terms = self.lin(node)
        return self.combine(c, terms, ctx)

    def combine(self, c: float, terms: Mapping, ctx: frozenset) -> Interval:
        lo = hi = c
        for key, coef in terms.items():
            alo, ahi = self.atom_key(key, ctx)
            if alo > ahi:
                return EMPTY
            a, b = coef * alo if alo else 0, coef * ahi if ahi else 0
            lo, hi = lo + min(a, b), hi + max(a, b)
            self._peak(lo, hi)
        return lo, hi

    def _peak(self, lo: float, hi: float) -> None:
        for v in (lo, hi):
            if not math.isinf(v) and abs(v) > self.peak:
                self.peak = abs(v)

    # -- atoms ------------------------------------------------------------------------------------------
    def atom_key(self, key: tuple, ctx: frozenset) -> Interval:
        memo = (key[0], key[1], ctx)
        hit = self._memo.get(memo)
        if hit is None:
            self._memo[memo] = WHOLE  # a cycle (a name whose mask mentions itself) counts as unbounded
            if key[0] == "def":
                base = self._def(key[1], ctx)
            else:
                base = self.atom(key[2], ctx)
            hit = self._memo[memo] = self.refine(key, base, ctx)
            self._peak(*hit)
        return hit

    def _def(self, index: int, ctx: frozenset) -> Interval:
        d = self.prog.defs[index]
        if d.kind == "expr":
            grouped = grouped_row(self, d.node, ctx)  # type: ignore[arg-type]
            return grouped if grouped is not None else self.interval(d.node, ctx)  # type: ignore[arg-type]
        if d.kind == "loop":
            return self._loop(*d.args)
        return WHOLE  # a carried value or an unknown parameter

    def _loop(self, start: ast.expr, stop: ast.expr, step: ast.expr) -> Interval:
        slo, shi = self.interval(start, frozenset())
        _, ehi = self.interval(stop, frozenset())
        c, t = self.lin(step)
        if t or c <= 0 or c != int(c):
            raise Unbounded("a loop whose step is not a positive constant")
        if ehi <= slo:
            return EMPTY  # the loop never runs
        if slo == shi and not math.isinf(ehi):
            return slo, slo + c * ((ehi - 1 - slo) // c)
        return slo, ehi - 1

    def atom(self, node: ast.expr, ctx: frozenset) -> Interval:
        """Bounds of a node that is no linear form of others."""
        if isinstance(node, ast.Compare):
            return 0, 1
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
            # masks (0 or 1) combine to a mask; integers' bits are bounded only when both sides are not negative
            return _bits(node.op, self.interval(node.left, ctx), self.interval(node.right, ctx))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return WHOLE
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)):
                special = grouped_column(self, node, ctx)
                if special is not None:
                    return special
                n, d = self.interval(node.left, ctx), self.interval(node.right, ctx)
                return _quotient(n, d) if isinstance(node.op, ast.FloorDiv) else _remainder(n, d)
            if isinstance(node.op, ast.Mult):
                return _product(self.interval(node.left, ctx), self.interval(node.right, ctx))
            return WHOLE
        if isinstance(node, ast.Call):
            return self._call(node, ctx)
        return WHOLE

    def _call(self, node: ast.Call, ctx: frozenset) -> Interval:
        name = call_name(node)
        if name == "tl.arange" and len(node.args) == 2:
            (a, ta), (b, tb) = self.lin(node.args[0]), self.lin(node.args[1])
            if ta or tb:
                raise Unbounded("a tl.arange of non-constant bounds")
            return a, b - 1
        if name == "tl.program_id":
            return 0, self.grid[self._axis(node)] - 1
        if name == "tl.cdiv" and len(node.args) == 2:
            n, d = self.interval(node.args[0], ctx), self.interval(node.args[1], ctx)
            return _quotient((n[0] + d[0] - 1, n[1] + d[1] - 1), d)
        if name in ("min", "max", "tl.minimum", "tl.maximum") and len(node.args) >= 2:
            parts = [self.interval(a, ctx) for a in node.args[:2]]
            f = min if name in ("min", "tl.minimum") else max
            return f(p[0] for p in parts), f(p[1] for p in parts)
        if name == "tl.where" and len(node.args) == 3:
            cond, a, b = node.args
            out = EMPTY
            for branch, lits in ((a, self.literals(cond, True)), (b, self.literals(cond, False))):
                if not self.feasible(ctx | lits):
                    continue  # a branch no lane takes
                iv = self.interval(branch, ctx | lits)
                if iv[0] <= iv[1]:
                    out = iv if out[0] > out[1] else (min(out[0], iv[0]), max(out[1], iv[1]))
            return out
        return WHOLE  # loaded data, reductions, dots, math: a value the index math does not bound

    def literals(self, node: ast.expr | None, holds: bool = True) -> frozenset:
        """The comparisons ``node`` (a mask, or a condition where it ``holds`` or not) makes true, each as a
        linear form ``L`` with ``L <= 0``; what it makes true that is no such comparison is left out (which
        only widens the bounds)."""
        out: set = set()
        if node is not None:
            self._literals(node, holds, out, 0)
        return frozenset(out)

    def _literals(self, node: ast.expr, holds: bool, out: set, depth: int) -> None:
        if depth > 64:
            return
        if isinstance(node, ast.Subscript) and _broadcast(node):
            return self._literals(node.value, holds, out, depth + 1)
        if isinstance(node, ast.Name):
            d = self.prog.def_of(node)
            if d is not None and d.kind == "expr":
                self._literals(d.node, holds, out, depth + 1)  # type: ignore[arg-type]
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
            if isinstance(node.op, ast.BitAnd) == holds:  # a & b holds, or a | b fails: both sides do
                self._literals(node.left, holds, out, depth + 1)
                self._literals(node.right, holds, out, depth + 1)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
            if isinstance(node.op, ast.Invert) and not self._mask(node.operand):
                return  # ~x of an integer is nonzero wherever x is not -1: it negates no comparison
            return self._literals(node.operand, not holds, out, depth + 1)
        if isinstance(node, ast.Call) and call_name(node) == ".to":
            return self._literals(node.func.value, holds, out, depth + 1)  # type: ignore[attr-defined]
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            return
        op, left, right = _CMP.get(type(node.ops[0])), node.left, node.comparators[0]
        if op is None:
            return
        if op in ("==", "!=") and self._boolean(left) and _is_const(right, 0):  # ``bad == 0``: not bad
            return self._literals(left, holds != (op == "=="), out, depth + 1)
        if not holds:
            op = _FLIP[op]
        try:
            (c1, t1), (c2, t2) = self.lin(left), self.lin(right)
        except Unbounded:
            return
        diff = dict(t1)
        for k, v in t2.items():
            diff[k] = diff.get(k, 0) - v
        c = c1 - c2
        diff = {k: v for k, v in diff.items() if v}
        forms = {"<": [(c + 1, diff)], "<=": [(c, diff)], ">": [(-c + 1, _neg(diff))], ">=": [(-c, _neg(diff))]}
        forms["=="] = forms["<="] + forms[">="]
        for fc, ft in forms.get(op, []):
            out.add((fc, tuple(sorted(ft.items(), key=lambda kv: (kv[0][0], kv[0][1])))))

    def _boolean(self, node: ast.expr) -> bool:
        n = self.prog.deref(node)
        return isinstance(n, ast.Compare) or (isinstance(n, ast.BinOp) and isinstance(n.op, (ast.BitAnd, ast.BitOr)))

    def _mask(self, node: ast.expr, depth: int = 0) -> bool:
        """Whether ``node`` is a comparison or &, |, ^, ~ of comparisons only: a mask, which ``~`` negates."""
        n = self.prog.deref(node)
        if isinstance(n, ast.Compare):
            return True
        if depth > 64:
            return False
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Invert):
            return self._mask(n.operand, depth + 1)
        return (
            isinstance(n, ast.BinOp)
            and isinstance(n.op, (ast.BitAnd, ast.BitOr, ast.BitXor))
            and (self._mask(n.left, depth + 1) and self._mask(n.right, depth + 1))
        )

    def feasible(self, ctx: frozenset) -> bool:
        """False where the literals of ``ctx`` keep no lane: one is a false constant (a pad's tap at a fixed
        position outside its input) or leaves an atom it bounds no value (``offs < 0``)."""
        for c, items in ctx:
            if not items:
                if c > 0:
                    return False
                continue
            for key, _ in items:
                lo, hi = self.atom_key(key, ctx)
                if lo > hi:
                    return False
        return True

    def refine(self, key: tuple, base: Interval, ctx: frozenset) -> Interval:
        """``base`` narrowed by each literal of ``ctx`` that bounds atom ``key``."""
        lo, hi = base
        ident = (key[0], key[1])
        for c, items in ctx:
            coef = next((v for k, v in items if (k[0], k[1]) == ident), 0)
            if not coef:
                continue
            rest = {k: v for k, v in items if (k[0], k[1]) != ident}
            rlo, _ = self.combine(c, rest, frozenset())
            if math.isinf(rlo):
                continue
            if coef > 0:
                hi = min(hi, math.floor(-rlo / coef))
            else:
                lo = max(lo, math.ceil(rlo / -coef))
        return lo, hi

    # -- accesses ---------------------------------------------------------------------------------------
    def pointers(self, node: ast.expr, ctx: frozenset, depth: int = 0) -> list[tuple[str, Lin, frozenset]]:
        """The pointer args ``node`` addresses, each with its offset and the literals where it does."""
        if depth > 64:
            raise Unbounded("a pointer built through too many names")
        if isinstance(node, ast.Subscript) and _broadcast(node):
            return self.pointers(node.value, ctx, depth + 1)
        if isinstance(node, ast.Name):
            d = self.prog.def_of(node)
            if d is not None and d.kind == "param" and d.name not in self.names:
                return [(d.name, (0, {}), ctx)]
            if d is not None and d.kind == "expr":
                return self.pointers(d.node, ctx, depth + 1)  # type: ignore[arg-type]
            raise Unbounded(f"a pointer {node.id!r} carried across loop iterations or never assigned")
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            why: Unbounded | None = None
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if side is node.right and isinstance(node.op, ast.Sub):
                    continue
                try:
                    found = self.pointers(side, ctx, depth + 1)
                except Unbounded as e:
                    why = why if why is not None and "no pointer arg" not in str(why) else e
                    continue
                c, t = self.lin(other)
                s = 1 if isinstance(node.op, ast.Add) else -1
                return [(p, _add(off, (s * c, {k: s * v for k, v in t.items()})), lits) for p, off, lits in found]
            raise why if why is not None else Unbounded("a pointer expression with no pointer arg")
        if isinstance(node, ast.Call) and call_name(node) == "tl.where" and len(node.args) == 3:
            cond, a, b = node.args
            return self.pointers(a, ctx | self.literals(cond, True), depth + 1) + self.pointers(
                b, ctx | self.literals(cond, False), depth + 1
            )
        if isinstance(node, ast.Call) and call_name(node) == ".to" and _bitcast_to(node) is not None:
            found = self.pointers(node.func.value, ctx, depth + 1)  # type: ignore[attr-defined]
            width = _bitcast_to(node)
            for p, _, _ in found:  # the same address; offsets after it count in the new type's elements
                if _WIDTHS.get(self.types.get(p, "").lstrip("*")) != width:
                    raise Unbounded(f"a bitcast of {p} to elements of another size")
            return found
        raise Unbounded("a pointer expression with no pointer arg")


# bytes per element of the Triton types a pointer arg may have, and of the dtypes a pointer may be bitcast to
_WIDTHS = {"fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i1": 1, "u8": 1}
_DTYPE_WIDTHS = {"int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "float32": 4, "float16": 2}


def _bitcast_to(node: ast.Call) -> int | None:
    """The element size of ``p.to(tl.pointer_type(tl.T), bitcast=True)``, else None."""
    if not node.args or not any(k.arg == "bitcast" for k in node.keywords):
        return None
    target = node.args[0]
    if not (isinstance(target, ast.Call) and call_name(target) == "tl.pointer_type" and len(target.args) == 1):
        return None
    t = target.args[0]
    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "tl":
        return _DTYPE_WIDTHS.get(t.attr)
    return None


def _bits(op: ast.operator, a: Interval, b: Interval) -> Interval:
    """Bounds of ``a & b`` or ``a | b`` over integers: an and of a value in [0, h] is in [0, h], an or of values
    in [0, h] is below the next power of two above h; a side that may be negative bounds nothing."""
    if a[0] > a[1] or b[0] > b[1]:
        return EMPTY
    if isinstance(op, ast.BitAnd):
        his = [iv[1] for iv in (a, b) if iv[0] >= 0]
        return (0, min(his)) if his else WHOLE
    if min(a[0], b[0]) < 0 or math.isinf(max(a[1], b[1])):
        return WHOLE
    return 0, 2 ** int(max(a[1], b[1])).bit_length() - 1


def _neg(t: Mapping) -> dict:
    return {k: -v for k, v in t.items()}


def _add(a: Lin, b: Lin) -> Lin:
    out = dict(a[1])
    for k, v in b[1].items():
        out[k] = out.get(k, 0) + v
    return a[0] + b[0], {k: v for k, v in out.items() if v}


def _broadcast(node: ast.Subscript) -> bool:
    return is_broadcast(node.slice)


def _is_const(node: ast.expr, value: int) -> bool:
    return isinstance(node, ast.Constant) and node.value == value and not isinstance(node.value, str)


def _product(a: Interval, b: Interval) -> Interval:
    if a[0] > a[1] or b[0] > b[1]:
        return EMPTY
    cands = [x * y if x and y else 0 for x in a for y in b]
    return min(cands), max(cands)


def _empty_or_unbounded(n: Interval, d: Interval, what: str) -> bool:
    """Whether ``n`` or ``d`` holds no value; Unbounded where the divisor ``d`` may be 0 or negative."""
    if n[0] > n[1] or d[0] > d[1]:
        return True
    if d[0] < 1:
        raise Unbounded(f"a {what} by what may be 0 or negative")
    return False


def _quotient(n: Interval, d: Interval) -> Interval:
    """``n // d`` under floor and truncating division alike; unbounded where ``d`` may be 0 or negative."""
    if _empty_or_unbounded(n, d, "division"):
        return EMPTY
    cands = []
    for x in n:
        for y in d:
            cands.append(_floordiv(x, y))
            if x < 0 and not math.isinf(x):
                cands.append(-((-x) // y))  # truncated toward 0
    return min(cands), max(cands)


def _remainder(n: Interval, d: Interval) -> Interval:
    if _empty_or_unbounded(n, d, "remainder"):
        return EMPTY
    top = d[1] - 1
    if n[0] >= 0:
        return (n[0], n[1]) if n[1] < d[0] else (0, min(top, n[1]))
    return -top, top
