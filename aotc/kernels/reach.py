"""What a generated kernel touches: each pointer's smallest and largest element offset, over the kernel's own names.

A template's index math is Triton text: program ids, ``tl.arange`` tiles, loop counters, masks and the
offsets the KernelBuilder prints. The offsets are index expressions the builder simplified over the graph's
symbols, which it prints with size args for the symbols and the templates' texts for the index variables.
Read that way, an offset is an expression over the kernel's *own* names ("arg space"): size args, constexprs,
the grid (``GRID_NAMES``), and placeholders for the templates' variables. Each template says what its
variables hold (``Reach``):

- ``bound(text, hi, lo)``: a variable in ``[lo, hi)`` (``offs = pid * BLOCK + tl.arange(0, BLOCK)`` with
  ``pid < grid_x``: ``[0, grid_x * BLOCK)``);
- ``define(text, expr)``: a variable computed from others (``img = offs_m // positions``);
- ``guard(term, text, lo, hi)``: where a mask term keeps a lane, the variable lies in ``[lo, hi)``
  (``mask = offs < numel``);
- ``when(term, fact)``: a mask term keeps a lane only where ``fact >= 0`` (a pad's tap at a constant position
  ``-1``: ``inside = (-1 >= 0) & ...`` keeps none).

At each load and store the builder records the offset and the mask's terms (``Reach.access``); when the
kernel is finished ``extents`` bounds every offset by interval arithmetic, each variable resolved under the
terms of the access's mask, and gives per pointer arg the least lower and the greatest upper bound, as
expressions over the kernel's names: ``Extents``. A masked load or store counts only in-mask offsets, and an
access whose mask keeps no lane counts none: where a variable's interval under the mask is empty (``offs <
numel`` of a value with 0 elements) or a ``when`` fact fails, the access is dropped when that is certain, and
otherwise bounded as ``live * offset`` (``live`` is 1 where every such condition holds, else 0, so its upper
bound is -1 where it touches nothing).

Interval arithmetic needs the signs of its operands, which it reads from the bounds of each name over the
graph's ranges (a size arg's expression, a constexpr's value, a grid dim); ``Extents.ranges`` records every
name with that interval, and the artifact's reader checks the names a launch passes lie inside them before it
trusts the bounds (so a constexpr is pinned to the value the code was generated with). Floor division and remainder are bounded for both floor (the interpreter) and
truncating (the GPU) semantics. A divisor over the kernel's names that interval arithmetic cannot prove
positive (``(w2 + pad)//4`` with ``w2 >= 2`` and ``w2 + pad`` a multiple of 4) is bounded as if it were, and
``divisor >= 1`` joins the facts the extents rest on (``requires``): the reader proves it or checks it per
shape. The derivation never refuses a kernel for what it cannot prove.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from aotc.errors import ShapeError
from aotc.ir.index import index_var
from aotc.ir.schedule import GRID_NAMES, Arg, ArgKind, Extents, Size
from aotc.ir.symbolic import Atom, SymExpr, add, floordiv, mul, smax, smin, sym
from aotc.ir.symbolic_values import bounds, evaluate, prove_nonneg, reduce_quotients, substitute
from aotc.kernels import index_text as ix

Range = tuple[int, int]
Interval = tuple[Size, Size]  # inclusive
# an offset before simplification, and each index variable (placeholder) with the extent it must lie below
Unsimplified = tuple[Size, tuple[tuple[Size, Size], ...]]
# where a load or store is written (its pointer's text) and its value's element count, over the graph's symbols
Site = tuple[str, Size]
GRID_X, GRID_Y, GRID_Z = (sym(n) for n in GRID_NAMES)
_SUFFIX = re.compile(r"^([A-Za-z_]\w*)\[(?::, None|None, :)\]$")


def cdiv(a: Size, b: Size) -> Size:
    """``ceil(a / b)`` for a positive ``b``, as ``tl.cdiv`` computes it."""
    return floordiv(add(a, add(b, -1)), b)


def norm(text: str) -> str:
    """A template variable's text without the broadcast that places it on a tile axis (``offs_m[:, None]``)."""
    text = text.strip()
    m = _SUFFIX.match(text)
    return m.group(1) if m else text


def term_of(text: str) -> str:
    """A mask term as ``index_text.and_terms`` splits a mask (outer parentheses dropped)."""
    (term,) = ix.and_terms(text)
    return term


class Reach:
    """The template variables of one kernel, the accesses through its pointers and what its index math rests on."""

    def __init__(self) -> None:
        self._vars: dict[str, SymExpr] = {}  # text -> placeholder
        self._texts: dict[str, str] = {}  # placeholder name -> text
        self.bounds: dict[str, tuple[Size, Size]] = {}  # text -> [lo, hi)
        self.defs: dict[str, Size] = {}  # text -> expression over names and placeholders
        self.guards: dict[str, list[tuple[str, Size | None, Size | None]]] = {}  # term -> (text, lo, hi)
        self.implies: dict[str, tuple[str, ...]] = {}
        self.whens: dict[str, list[Size]] = {}  # term -> facts (>= 0) wherever it keeps a lane
        self.requires: list[Size] = []
        # (pointer arg name, offset, mask terms, the offset unsimplified and what it rests on)
        # and where it is written with its value's element count, for ``KernelBuilder._clamp_unbounded``)
        self.accesses: list[tuple[str, Size, frozenset[str], Unsimplified | None, Site | None]] = []

    # -- declarations (templates) --------------------------------------------------------------------
    def var(self, text: str) -> SymExpr:
        """The placeholder of a template variable in expressions over the kernel's names."""
        t = norm(text)
        v = self._vars.get(t)
        if v is None:
            v = self._vars[t] = index_var(f"r{len(self._vars)}")
            self._texts[v.symbol_name] = t
        return v

    def bound(self, text: str, hi: Size, lo: Size = 0) -> None:
        self.bounds[norm(text)] = (lo, hi)

    def define(self, text: str, expr: Size) -> None:
        self.defs[norm(text)] = expr

    def guard(self, term: str, text: str, lo: Size | None = None, hi: Size | None = None) -> None:
        self.guards.setdefault(term_of(term), []).append((norm(text), lo, hi))

    def when(self, term: str, fact: Size) -> None:
        """Where mask term ``term`` keeps a lane, ``fact >= 0`` (an expression over the kernel's names)."""
        self.whens.setdefault(term_of(term), []).append(fact)

    def imply(self, term: str, *terms: str) -> None:
        """Where mask term ``term`` keeps a lane, so do ``terms`` (a name bound to ``mask & ...``)."""
        self.implies[term_of(term)] = tuple(term_of(t) for t in terms)

    def require(self, fact: Size) -> None:
        """A fact (``>= 0``) over the kernel's names that the declared bounds rest on."""
        self.requires.append(fact)

    # -- accesses (the builder) ----------------------------------------------------------------------
    def access(
        self,
        pointer: str,
        offset: Size,
        mask: str | None,
        unsimplified: Unsimplified | None = None,
        site: Site | None = None,
    ) -> None:
        """A load or store through ``pointer`` at ``offset`` where ``mask`` keeps a lane. ``unsimplified``: the
        same offset as its per-dim indices give it before the builder simplified it, with each index variable
        (a placeholder) and the extent it must lie below for the two to agree; where the variables provably do,
        the tighter of the two bounds counts (interval arithmetic loses ``n - n % m >= 0`` in a simplified
        roll, which the per-dim ``(i - s) % d`` keeps)."""
        terms = set(ix.and_terms(mask)) if mask else set()
        todo = list(terms)
        while todo:
            for t in self.implies.get(todo.pop(), ()):
                if t not in terms:
                    terms.add(t)
                    todo.append(t)
        self.accesses.append((pointer, offset, frozenset(terms), unsimplified, site))

    def mentions(self, name: str) -> bool:
        """Whether a template variable's text reads ``name``."""
        return any(name in ix.names(t) for t in self._vars)

    def rename(self, mapping: Mapping[str, str]) -> None:
        """Pointer args renamed (``KernelBuilder.finish`` names them by role): their accesses follow."""
        self.accesses = [
            (mapping.get(p, p), off, terms, alt, None if site is None else (ix.rename(site[0], mapping), site[1]))
            for p, off, terms, alt, site in self.accesses
        ]

    def clamp(self, k: int, top: Size) -> None:
        """Access ``k`` now clamps its offset into ``[0, top)`` (``top``: an int or a size arg)."""
        pointer, offset, terms, _, _ = self.accesses[k]
        self.accesses[k] = (pointer, smin(smax(offset, 0), add(top, -1)), terms, None, None)

    # -- the extents (finish) ---------------------------------------------------------------------------
    def extents(self, args: Sequence[Arg], constexprs: Sequence[tuple[str, int]], grid: Sequence[Size],
                ranges: Mapping[str, Range], multiples: Mapping[str, int]) -> Extents:  # fmt: skip
        """Per arg the least and greatest offset of its accesses; ``ranges`` and ``multiples`` are the graph's."""
        names: dict[str, Range] = {}
        for a in args:
            if a.kind is ArgKind.SIZE:
                names[a.name] = bounds(a.size, ranges, multiples)
        names.update((c, (v, v)) for c, v in constexprs)
        names.update((n, bounds(g, ranges, multiples)) for n, g in zip(GRID_NAMES, grid))
        box, bounded = self._bounded(args, constexprs, grid, ranges, multiples)
        per: dict[str, tuple[list[Size], list[Size]]] = {}
        for (pointer, *_), (lo, hi) in zip(self.accesses, bounded):
            if (lo, hi) == (0, -1):
                continue
            los, his = per.setdefault(pointer, ([], []))
            los.append(lo)
            his.append(hi)
        lows: list[Size] = []
        highs: list[Size] = []
        for a in args:
            if a.kind is ArgKind.SIZE or a.name not in per:
                lows.append(0)
                highs.append(-1)
                continue
            los, his = per[a.name]
            lows.append(box.least(los))
            highs.append(box.greatest(his))
        # every name, not only those the bounds read: a launch passes what its code was generated for
        return Extents(
            tuple(lows),
            tuple(highs),
            tuple((n, *r) for n, r in box.names.items()),
            tuple(dict.fromkeys([*self.requires, *box.requires])),
        )

    def per_access(self, args: Sequence[Arg], constexprs: Sequence[tuple[str, int]], grid: Sequence[Size],
                   ranges: Mapping[str, Range], multiples: Mapping[str, int]) -> list[Interval]:  # fmt: skip
        """Each access's least and greatest offset (``(0, -1)``: it touches nothing)."""
        return self._bounded(args, constexprs, grid, ranges, multiples)[1]

    def _bounded(self, args: Sequence[Arg], constexprs: Sequence[tuple[str, int]], grid: Sequence[Size],
                 ranges: Mapping[str, Range], multiples: Mapping[str, int]) -> tuple[_Box, list[Interval]]:  # fmt: skip
        names: dict[str, Range] = {}
        for a in args:
            if a.kind is ArgKind.SIZE:
                names[a.name] = bounds(a.size, ranges, multiples)
        names.update((c, (v, v)) for c, v in constexprs)
        names.update((n, bounds(g, ranges, multiples)) for n, g in zip(GRID_NAMES, grid))
        passed: dict[str, Size] = {a.name: a.size for a in args if a.kind is ArgKind.SIZE}
        passed.update(constexprs)
        passed.update(zip(GRID_NAMES, grid))
        box = _Box(self, names, (passed, ranges, multiples))
        out: list[Interval] = []
        programs = {add(g, -1) for g in (GRID_X, GRID_Y, GRID_Z)}  # no program, no access
        for _, offset, terms, unsimplified, _ in self.accesses:
            box.conditions = programs | {c for t in terms for c in self.whens.get(t, ())}
            lo, hi = box.interval(offset, terms)
            if unsimplified is not None and all(box.within(v, top, terms) for v, top in unsimplified[1]):
                ulo, uhi = box.interval(unsimplified[0], terms)
                lo, hi = box.tighter(lo, ulo, lower=True), box.tighter(hi, uhi, lower=False)
            for term in terms:  # a guard's variable with no value in its interval: the term keeps no lane
                for text, _, _ in self.guards.get(term, ()):
                    try:
                        box.resolve(text, terms)
                    except RuntimeError:  # bounded on one side only: no condition, the access counts
                        pass
            live = box.live(box.conditions)
            if live == 0:  # its mask keeps no lane: no access
                lo, hi = 0, -1
            elif live != 1:  # 0 where it keeps none: [0, -1]
                lo, hi = mul(live, lo), add(mul(live, add(hi, 1)), -1)
            out.append((lo, hi))
        return box, out


class _Box:
    """Interval arithmetic over expressions in the kernel's names."""

    def __init__(
        self, reach: Reach, names: Mapping[str, Range], graph: tuple[Mapping[str, Size], Mapping[str, Range], Any]
    ) -> None:
        self.reach, self.names = reach, names
        # what the compiler passes for each name, over the graph's symbols, and their ranges and multiples
        self.passed, self.ranges, self.multiples = graph
        self._resolved: dict[tuple[str, frozenset[str]], tuple[Interval, frozenset[Size]]] = {}
        # what must hold (>= 0) for the access being bounded to touch anything: its variables' intervals
        # non-empty, its mask terms' ``when`` facts
        self.conditions: set[Size] = set()
        self.requires: list[Size] = []  # divisors bounded as positive without a proof

    def live(self, conditions: Iterable[Size]) -> Size:
        """0 where a condition is proved to fail, else the 0/1 expression of those that fail, with what the
        compiler passes, at the symbols' least or greatest binding (an empty tensor's dim at its min 0); one that
        holds at both counts as holding, which only leaves the access counted (sound, and no fact for the reader
        to check per shape)."""
        out: Size = 1
        low = {n: r[0] for n, r in self.ranges.items()}
        high = {n: r[1] for n, r in self.ranges.items()}
        for c in sorted(conditions, key=str):
            if self.nonneg(c):
                continue
            if self.nonneg(add(mul(c, -1), -1)):
                return 0
            try:
                passed = substitute(c, self.passed)
                holds = evaluate(passed, low) >= 0 and evaluate(passed, high) >= 0
            except ShapeError:
                holds = False
            if not holds:
                out = mul(out, smax(smin(add(c, 1), 1), 0))
        return out

    def nonneg(self, e: Size) -> bool:
        if isinstance(e, int):
            return e >= 0
        return prove_nonneg(e, self.names)

    def within(self, v: SymExpr, top: Size, terms: frozenset[str]) -> bool:
        """Whether placeholder ``v`` lies in ``[0, top)`` wherever the mask ``terms`` keeps a lane: proved over the
        names' ranges, or over the graph's with what the compiler passes for the names (two size args of one
        dim, ``size_2 - 3 < h3 - 2``), which then joins the facts the extents rest on (``requires``): a launch
        that passes other values must prove it again."""
        lo, hi = self.interval(v, terms)
        pending = []
        for fact in (lo, add(add(top, -1), mul(hi, -1))):
            if self.nonneg(fact):
                continue
            try:
                passed = reduce_quotients(substitute(fact, self.passed))
                if not prove_nonneg(passed, self.ranges, self.multiples):
                    return False
            except ShapeError:
                return False
            pending.append(fact)
        self.requires.extend(pending)
        return True

    def tighter(self, a: Size, b: Size, lower: bool) -> Size:
        """The tighter of two bounds of one value (both hold, so the larger lower / smaller upper one does)."""
        if a == b or self.nonneg(add(a, mul(b, -1)) if lower else add(b, mul(a, -1))):
            return a
        if self.nonneg(add(b, mul(a, -1)) if lower else add(a, mul(b, -1))):
            return b
        return smax(a, b) if lower else smin(a, b)

    def least(self, xs: Iterable[Size]) -> Size:
        return self._fold(xs, smin, lambda a, b: self.nonneg(add(b, mul(a, -1))))

    def greatest(self, xs: Iterable[Size]) -> Size:
        return self._fold(xs, smax, lambda a, b: self.nonneg(add(a, mul(b, -1))))

    def _fold(
        self, xs: Iterable[Size], join: Callable[[Size, Size], Size], covers: Callable[[Size, Size], bool]
    ) -> Size:
        """The join of ``xs``, leaving out each one another covers (``covers(a, b)``: a is as extreme as b)."""
        kept: list[Size] = []
        for x in dict.fromkeys(xs):
            if any(covers(k, x) for k in kept):
                continue
            kept = [k for k in kept if not covers(x, k)] + [x]
        out = kept[0]
        for x in kept[1:]:
            out = join(out, x)
        return out

    # -- resolving template variables ----------------------------------------------------------------
    def variable(self, name: str, terms: frozenset[str]) -> Interval:
        return self.resolve(self.reach._texts[name], terms)

    def resolve(self, text: str, terms: frozenset[str]) -> Interval:
        """The interval of template variable ``text`` under the mask ``terms``; what it rests on joins
        ``conditions``."""
        key = (text, terms)
        hit = self._resolved.get(key)
        if hit is None:
            outer, self.conditions = self.conditions, set()
            try:
                iv = self._variable(text, terms)
                hit = self._resolved[key] = (iv, frozenset(self.conditions | {add(iv[1], mul(iv[0], -1))}))
            finally:
                self.conditions = outer | self.conditions
        self.conditions |= hit[1]
        return hit[0]

    def _variable(self, text: str, terms: frozenset[str]) -> Interval:
        lo: Size | None = None
        hi: Size | None = None
        for term in sorted(terms):  # every guard the mask holds: the variable is inside each
            for t, glo, ghi in self.reach.guards.get(term, ()):
                if t == text and glo is not None:
                    lo = glo if lo is None else smax(lo, glo)
                if t == text and ghi is not None:
                    hi = add(ghi, -1) if hi is None else smin(hi, add(ghi, -1))
        if lo is not None and hi is not None:
            return lo, hi
        if text in self.reach.defs:
            base = self.interval(self.reach.defs[text], terms)
        elif text in self.reach.bounds:
            blo, bhi = self.reach.bounds[text]
            base = (blo, add(bhi, -1))
        else:
            raise RuntimeError(
                f"kernel builder: template variable {text!r} has no declared range (aotc/kernels/reach.py)"
            )
        return (base[0] if lo is None else lo, base[1] if hi is None else hi)

    # -- interval arithmetic -----------------------------------------------------------------------------
    def interval(self, e: Size, terms: frozenset[str]) -> Interval:
        """Bounds of ``e`` where every template variable holds what it may under the mask ``terms``. Terms
        with the same variable atoms are bounded together, their coefficients summed (``x*seq - x`` is
        ``x*(seq - 1)``, not ``x*seq`` less the most ``x`` may be)."""
        if isinstance(e, int):
            return e, e
        groups: dict[tuple[Atom, ...], Size] = {}
        fixed: Size = e.const
        for mono, c in e.terms:
            varying = tuple(a for a in mono if self._varies(a))
            coef: Size = c
            for a in mono:
                if a not in varying:
                    coef = mul(coef, SymExpr((((a,), 1),)))
            if varying:
                groups[varying] = add(groups.get(varying, 0), coef)
            else:
                fixed = add(fixed, coef)
        lo: Size = fixed
        hi: Size = fixed
        for varying, coef in groups.items():
            if coef == 0:
                continue
            vlo, vhi = self._product([self._atom(a, terms) for a in varying])
            if self.nonneg(coef):
                tlo, thi = mul(coef, vlo), mul(coef, vhi)
            elif self.nonneg(mul(coef, -1)):
                tlo, thi = mul(coef, vhi), mul(coef, vlo)
            else:  # a coefficient of either sign (it is fixed for a launch): the larger and smaller end
                a, b = mul(coef, vlo), mul(coef, vhi)
                tlo, thi = smin(a, b), smax(a, b)
            lo, hi = add(lo, tlo), add(hi, thi)
        return lo, hi

    def _varies(self, a: Atom) -> bool:
        if a.kind == "sym":
            return a.name in self.reach._texts
        return any(isinstance(x, SymExpr) and x.free_symbols() & self.reach._texts.keys() for x in a.args)

    def _product(self, parts: list[Interval]) -> Interval:
        if len(parts) == 1:
            return parts[0]
        if all(self.nonneg(p[0]) for p in parts):
            plo: Size = 1
            phi: Size = 1
            for p in parts:
                plo, phi = mul(plo, p[0]), mul(phi, p[1])
            return plo, phi
        nlo, nhi = 1, 1  # signs unknown: the corners' numeric hull over the names' ranges
        for p in parts:
            a, b = self._numeric(p[0]), self._numeric(p[1])
            cands = (nlo * a[0], nlo * b[1], nhi * a[0], nhi * b[1])
            nlo, nhi = min(cands), max(cands)
        return nlo, nhi

    def _numeric(self, e: Size) -> Range:
        if isinstance(e, int):
            return e, e
        return bounds(e, self.names)

    def _atom(self, a: Atom, terms: frozenset[str]) -> Interval:
        if a.kind == "sym":
            if a.name in self.reach._texts:
                return self.variable(a.name, terms)
            if a.name not in self.names:
                raise RuntimeError(f"kernel builder: {a.name!r} in an offset is no size arg, constexpr or grid dim")
            e = sym(a.name)
            return e, e
        if a.kind in ("fdiv", "mod"):
            num, d = a.args
            floor = _floor_idiom(num, d) if a.kind == "fdiv" else None
            if floor is not None:  # floor(n / d) in either semantics, n's own interval: monotone in n
                self._positive(d)
                flo, fhi = self.interval(floor, terms)
                return floordiv(flo, d), floordiv(fhi, d)
            nlo, nhi = self.interval(num, terms)
            if isinstance(d, SymExpr) and d.free_symbols() & self.reach._texts.keys():
                return self._quotient_of_variable(a.kind, nlo, nhi, self.interval(d, terms))
            self._positive(d)
            if a.kind == "fdiv":  # floor(nlo/d) is at most the floor or truncated quotient of any n >= nlo
                return floordiv(nlo, d), floordiv(nhi, d) if self.nonneg(nhi) else smax(floordiv(nhi, d), 0)
            if not self.nonneg(nlo):  # a truncating remainder of a negative n lies in (-d, 0]
                return add(1, mul(d, -1)), add(d, -1)
            if self.nonneg(add(add(d, -1), mul(nhi, -1))):
                return nlo, nhi
            return 0, add(d, -1)
        (xlo, xhi), (ylo, yhi) = (self.interval(v, terms) for v in a.args)
        if a.kind == "min":
            return smin(xlo, ylo), smin(xhi, yhi)
        return smax(xlo, ylo), smax(xhi, yhi)

    def _positive(self, d: Size) -> None:
        """Bounds below rest on ``d >= 1``: proved here, or left to the reader (``requires``)."""
        if not self.nonneg(add(d, -1)):
            self.requires.append(add(d, -1))

    def _quotient_of_variable(self, kind: str, nlo: Size, nhi: Size, d: Interval) -> Interval:
        """``n // d`` or ``n % d`` for ``n`` in ``[nlo, nhi]`` and a divisor in ``d``: its least value at least 1
        (``requires``). A floor quotient grows with ``n`` and moves toward 0 as ``d`` grows, so its extremes are
        at the corners; a truncated one lies between the floor one and 0."""
        dlo, dhi = d
        self._positive(dlo)
        dlo, dhi = smax(dlo, 1), smax(dhi, 1)  # as they are wherever the requirement holds
        if kind == "fdiv":
            lo = smin(smin(floordiv(nlo, dlo), floordiv(nlo, dhi)), 0)
            hi = smax(smax(floordiv(nhi, dlo), floordiv(nhi, dhi)), 0)
            return lo, hi
        if self.nonneg(nlo):
            return 0, add(dhi, -1)
        return add(1, mul(dhi, -1)), add(dhi, -1)


def _floor_idiom(num: Size, d: Size) -> Size | None:
    """``n`` where ``num`` is ``n - (n % d + d) % d``: the floored quotient's idiom (``(n % d + d) % d`` is the
    floored remainder whether ``%`` truncates or floors, so ``num`` is ``d * floor(n / d)`` and ``num // d`` is
    ``floor(n / d)``), which interval arithmetic would bound as ``n`` less up to ``d - 1``; else None."""
    if isinstance(num, int):
        return None
    for mono, c in num.terms:
        if c != -1 or len(mono) != 1 or mono[0].kind != "mod" or mono[0].args[1] != d:
            continue
        inner = add(mono[0].args[0], mul(d, -1))  # n % d
        if not isinstance(inner, SymExpr) or inner.const or len(inner.terms) != 1:
            continue
        ((imono, ic),) = inner.terms
        if ic != 1 or len(imono) != 1 or imono[0].kind != "mod" or imono[0].args[1] != d:
            continue
        n = imono[0].args[0]
        if add(num, SymExpr(((mono, 1),))) == n:
            return n
    return None


def without(args: Sequence[Arg], extents: Extents, unread: Collection[str]) -> tuple[list[Arg], Extents]:
    """``args`` less the size args named in ``unread`` that the extents can do without, and the extents less them.
    An extent that reads one through the unsimplified form of an offset (``min(simplified, unsimplified)``,
    ``Reach.access``) keeps its other bound, looser but sound; a size arg an extent cannot do without stays."""
    drop = set(unread)
    for e, kind in [*((e, "max") for e in extents.lows), *((e, "min") for e in extents.highs)]:
        if _loosen(e, drop, kind) is None:
            drop -= e.free_symbols() if isinstance(e, SymExpr) else set()
    for e in extents.requires:
        drop -= e.free_symbols() if isinstance(e, SymExpr) else set()
    if not drop:
        return list(args), extents
    keep = [k for k, a in enumerate(args) if a.name not in drop]
    lows = [_loosen(extents.lows[k], drop, "max") for k in keep]
    highs = [_loosen(extents.highs[k], drop, "min") for k in keep]
    ranges = tuple(r for r in extents.ranges if r[0] not in drop)
    return [args[k] for k in keep], Extents(tuple(_sure(lows)), tuple(_sure(highs)), ranges, extents.requires)


def _loosen(e: Size, names: Collection[str], kind: str) -> Size | None:
    """Bound ``e`` without ``names``: the arguments of a ``kind`` (``min`` of upper bounds, ``max`` of lower
    bounds) that do not read them, each a sound bound alone; None when ``e`` cannot do without them."""
    if isinstance(e, int) or not (e.free_symbols() & set(names)):
        return e
    if e.const or len(e.terms) != 1 or e.terms[0][1] != 1 or len(e.terms[0][0]) != 1:
        return None
    atom = e.terms[0][0][0]
    if atom.kind != kind:
        return None
    kept = [x for x in (_loosen(a, names, kind) for a in atom.args) if x is not None]
    if not kept:
        return None
    out = kept[0]
    for x in kept[1:]:
        out = smin(out, x) if kind == "min" else smax(out, x)
    return out


def _sure(bounds_: Sequence[Size | None]) -> list[Size]:
    out = [b for b in bounds_ if b is not None]
    if len(out) != len(bounds_):
        raise AssertionError("an extent lost the size arg it reads")
    return out
