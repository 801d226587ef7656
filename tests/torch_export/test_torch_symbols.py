"""torch's symbolic sizes and guard code as aotc expressions and facts, and single-symbol guards folded into
ranges (unit tests of aotc.torch_export.symbols; sympy comes with torch)."""

from __future__ import annotations

import pytest
from torch_kit import torch_module

from aotc.ir.graph import Guard, Symbol
from aotc.ir.symbolic import floordiv, mod, smax, sym
from aotc.torch_export.symbols import Untranslatable, guard_facts, single_symbol_refinements, to_dim

torch_module()
sympy = pytest.importorskip("sympy")
B, S = sym("batch"), sym("seq")
NAMES = {"s0": B, "s1": S}


def test_sympy_size_expressions_translate() -> None:
    from torch.utils._sympy.functions import FloorDiv, Max, Mod

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    cases = [
        (2 * s0 + 1, 2 * B + 1),
        (s0 * s1, B * S),
        (FloorDiv(s0, 4), floordiv(B, 4)),
        (Mod(s1, 8), mod(S, 8)),
        (Max(s0, s1), smax(B, S)),
        (sympy.Integer(7), 7),
    ]
    for expr, want in cases:
        assert to_dim(expr, NAMES.__getitem__) == want, expr
    with pytest.raises(Untranslatable):
        to_dim(s0 / 3, NAMES.__getitem__)  # a rational is not a size


def test_a_truncated_float_size_in_guard_code_is_an_exact_floor_division() -> None:
    def size_of(source: str, axis: int) -> object:
        return {("L['x']", 2): B, ("L['x']", 3): S}[(source, axis)]

    code = "math.trunc(0.5*torch.sym_float(L['x'].size()[2])) >= 2 and math.floor(1.5*torch.sym_float(L['x'].size()[3])) != 1"
    assert guard_facts(code, size_of, lambda alts: alts[0]) == [
        (floordiv(B, 2), ">=", 2),
        (floordiv(3 * S, 2), "!=", 1),
    ]
    for bad in (
        "math.trunc(0.1*torch.sym_float(L['x'].size()[2])) >= 2",
        "math.trunc(-0.5*torch.sym_float(L['x'].size()[2])) < 0",
    ):
        with pytest.raises(Untranslatable):
            guard_facts(bad, size_of, lambda alts: alts[0])


def test_guard_code_becomes_facts_and_a_disjunction_is_chosen_by_the_caller() -> None:
    def size_of(source: str, axis: int) -> object:
        return {("L['x']", 0): B, ("L['x']", 1): S}[(source, axis)]

    def first(alternatives: list) -> list:
        return alternatives[0]

    assert guard_facts("(8*L['x'].size()[0]) == (32*(L['x'].size()[0] // 4))", size_of, first) == [
        (8 * B, "==", 32 * floordiv(B, 4))
    ]
    assert guard_facts("2 <= L['x'].size()[1] <= 64", size_of, first) == [(2, "<=", S), (S, "<=", 64)]
    assert guard_facts("L['x'].size()[0] == 1 or L['x'].size()[1] % 4 == 0", size_of, first) == [(B, "==", 1)]
    assert guard_facts("max(1, L['x'].size()[0]) >= 1", size_of, first) == [(smax(1, B), ">=", 1)]
    for bad in ("L['x'].size()[0] ** 2 >= 4", "L['x'].stride()[0] == 1", "L['y'].size()[0] == 2", "x ="):
        with pytest.raises((Untranslatable, KeyError)):
            guard_facts(bad, size_of, first)


def test_single_symbol_guards_fold_into_ranges_and_multiples() -> None:
    batch, seq = Symbol("batch", 1, 64), Symbol("seq", 1, 64)
    guards = [
        Guard(8 * B, "==", 32 * floordiv(B, 4)),  # batch % 4 == 0
        Guard(S, "<=", 48),
        Guard(B, "<=", S),  # two symbols: stays a guard
        Guard(mod(S, 2), "==", 1),  # odd sizes: no range says that
    ]
    symbols, kept = single_symbol_refinements([batch, seq], guards)
    assert symbols == [Symbol("batch", 4, 64, 4), Symbol("seq", 1, 48)]
    # a bound or divisor of one symbol says no more than the range; any other form stays as a fact for later stages
    assert [str(g) for g in kept] == ["8*batch == 32*(batch//4)", "batch <= seq", "seq%2 == 1"]
