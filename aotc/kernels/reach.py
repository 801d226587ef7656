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
from collections.abc import Collection, Mapping, Sequence

from aotc.ir.index import index_var
from aotc.ir.schedule import GRID_NAMES, Arg, ArgKind, Extents, Size
from aotc.ir.symbolic import SymExpr, add, floordiv, mul, smax, smin, sym
from aotc.ir.symbolic_values import Range, bounds
from aotc.kernels import index_text as ix
from aotc.kernels.interval_box import Box, Interval, Variables

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
        self.declared = Variables()  # what the templates declare their variables hold
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
            self.declared.texts[v.symbol_name] = t
        return v

    def bound(self, text: str, hi: Size, lo: Size = 0) -> None:
        self.declared.bounds[norm(text)] = (lo, hi)

    def define(self, text: str, expr: Size) -> None:
        self.declared.defs[norm(text)] = expr

    def guard(self, term: str, text: str, lo: Size | None = None, hi: Size | None = None) -> None:
        self.declared.guards.setdefault(term_of(term), []).append((norm(text), lo, hi))

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
                 ranges: Mapping[str, Range], multiples: Mapping[str, int]) -> tuple[Box, list[Interval]]:  # fmt: skip
        names: dict[str, Range] = {}
        for a in args:
            if a.kind is ArgKind.SIZE:
                names[a.name] = bounds(a.size, ranges, multiples)
        names.update((c, (v, v)) for c, v in constexprs)
        names.update((n, bounds(g, ranges, multiples)) for n, g in zip(GRID_NAMES, grid))
        passed: dict[str, Size] = {a.name: a.size for a in args if a.kind is ArgKind.SIZE}
        passed.update(constexprs)
        passed.update(zip(GRID_NAMES, grid))
        box = Box(self.declared, names, (passed, ranges, multiples))
        out: list[Interval] = []
        programs = {add(g, -1) for g in (GRID_X, GRID_Y, GRID_Z)}  # no program, no access
        for _, offset, terms, unsimplified, _ in self.accesses:
            box.conditions = programs | {c for t in terms for c in self.whens.get(t, ())}
            lo, hi = box.interval(offset, terms)
            if unsimplified is not None and all(box.within(v, top, terms) for v, top in unsimplified[1]):
                ulo, uhi = box.interval(unsimplified[0], terms)
                lo, hi = box.tighter(lo, ulo, lower=True), box.tighter(hi, uhi, lower=False)
            for term in terms:  # a guard's variable with no value in its interval: the term keeps no lane
                for text, _, _ in self.declared.guards.get(term, ()):
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
