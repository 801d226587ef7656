"""Property tests for symbolic integers: evaluation, normalization, serialization, bounds and parse robustness."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from aotc.errors import ShapeError
from aotc.ir.index import index_var
from aotc.ir.symbolic import SymExpr, smax, smin, sym, to_infix, to_sexpr
from aotc.ir.symbolic_parse import parse
from aotc.ir.symbolic_values import bounds, divisor, evaluate

NAMES = ("a", "b", "c")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# An expression is a tree of tuples, interpreted twice: once as SymExpr, once as plain python ints.
leaves = st.one_of(st.sampled_from(NAMES), st.integers(-6, 6))


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), children, children),
        st.tuples(st.sampled_from(["//", "%"]), children, st.integers(1, 7)),
    )


trees = st.recursive(leaves, _extend, max_leaves=10)


def build(t: Any) -> int | SymExpr:
    if isinstance(t, str):
        return sym(t)
    if isinstance(t, int):
        return t
    op, x, y = t
    a = build(x)
    if op in ("//", "%"):
        return a // y if op == "//" else a % y
    b = build(y)
    return {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "min": lambda: smin(a, b),
        "max": lambda: smax(a, b),
    }[op]()


def py(t: Any, env: dict[str, int]) -> int:
    if isinstance(t, str):
        return env[t]
    if isinstance(t, int):
        return t
    op, x, y = t
    a = py(x, env)
    if op == "//":
        return a // y
    if op == "%":
        return a % y
    b = py(y, env)
    return {"+": a + b, "-": a - b, "*": a * b, "min": min(a, b), "max": max(a, b)}[op]


envs = st.fixed_dictionaries({n: st.integers(-20, 60) for n in NAMES})


@SETTINGS
@given(trees, st.lists(envs, min_size=1, max_size=5))
def test_evaluate_matches_python_arithmetic(t: Any, bindings: list[dict[str, int]]) -> None:
    e = build(t)
    for env in bindings:
        assert evaluate(e, env) == py(t, env)


@SETTINGS
@given(trees)
def test_sexpr_round_trips_and_forms_are_consistent(t: Any) -> None:
    e = build(t)
    text = to_sexpr(e)
    back = parse(text)
    assert back == e and hash(back) == hash(e)
    assert to_sexpr(back) == text
    assert isinstance(to_infix(e), str) and " + -" not in to_infix(e)
    if isinstance(e, SymExpr):
        assert e.free_symbols() <= set(NAMES) and e.free_symbols()
        assert build(t) == e  # construction is deterministic
    else:
        assert isinstance(e, int) and not isinstance(e, bool)


@st.composite
def ranged(draw: st.DrawFn) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    ranges, mults = {}, {}
    for n in NAMES:
        m = draw(st.sampled_from([1, 1, 2, 4, 8]))
        lo = draw(st.integers(-10, 30))
        hi = draw(st.integers(lo, lo + 40))
        assume(any(v % m == 0 for v in range(lo, hi + 1)))
        ranges[n], mults[n] = (lo, hi), m
    return ranges, mults


@SETTINGS
@given(trees, ranged(), st.data())
def test_bounds_contain_every_sampled_value(t: Any, rm: tuple, data: st.DataObject) -> None:
    ranges, mults = rm
    e = build(t)
    lo, hi = bounds(e, ranges, mults)
    plain_lo, plain_hi = bounds(e, ranges)
    assert lo <= hi
    for _ in range(8):
        env = {}
        for n in NAMES:
            r_lo, r_hi = ranges[n]
            choices = [v for v in range(r_lo, r_hi + 1) if v % mults[n] == 0]
            env[n] = data.draw(st.sampled_from(choices))
        v = evaluate(e, env)
        assert lo <= v <= hi, (to_infix(e), env, v, (lo, hi))
        assert plain_lo <= v <= plain_hi
        d = divisor(e, mults)
        assert (v % d == 0) if d else v == 0


@SETTINGS
@given(trees, trees, trees, st.integers(1, 9))
def test_algebraic_normalization(t1: Any, t2: Any, t3: Any, k: int) -> None:
    e, f, g = build(t1), build(t2), build(t3)
    assert e - e == 0
    assert e + 0 == e and 0 + e == e
    assert e * 1 == e and e * 0 == 0
    assert e + f == f + e
    assert e * f == f * e
    assert (e + f) - f == e
    assert (e + f) + g == e + (f + g)
    assert (e + f) * g == e * g + f * g
    assert (e * k) // k == e
    assert (e * k) % k == 0
    assert smin(e, e) == e and smax(e, e) == e
    assert smin(e, f) == smin(f, e) and smax(e, f) == smax(f, e)


def test_normalization_facts() -> None:
    s, b, x = sym("s"), sym("b"), sym("x")
    assert (4 * s + 3) // 4 == s
    assert (b * s * 64) // 64 == b * s
    assert (s * 16) % 4 == 0
    assert x - x == 0
    assert x + 0 == x
    assert (s // 2) // 3 == s // 6
    assert (s % 12) % 4 == s % 4
    assert (2 * s + 1) % 2 == 1
    assert (2 * s) // 4 == s // 2
    assert (6 * s + 4) // 2 == 3 * s + 2
    assert smin(s, s + 1) == s and smax(s, s + 1) == s + 1
    assert isinstance((s + 3) - s, int)
    assert (s + 1) * (s - 1) == s * s - 1


def test_text_forms() -> None:
    b, s = sym("batch"), sym("seq")
    e = 3 + 2 * b + s // 4
    assert to_sexpr(e) == "(+ (// seq 4) (* 2 batch) 3)"  # terms sort by their canonical text
    assert parse(to_sexpr(e)) == e
    assert to_infix(e) == "seq//4 + 2*batch + 3"
    assert to_infix(smin(s, 4)) == "min(4, seq)"
    assert to_infix(b - s - 1) == "batch - seq - 1"
    assert parse("  (min 4 seq) ") == smin(s, 4)
    assert parse("-7") == -7 and parse("batch").is_symbol() and parse("batch").symbol_name == "batch"


def test_bounds_see_through_floor_division() -> None:
    h = sym("h")
    ranges = {"h": (4, 12)}
    assert bounds(h - 2 * (h // 2), ranges) == (0, 1)
    assert bounds(h - h // 2, ranges) == (2, 7)
    assert bounds(2 * ((h + 1) // 2) - h, ranges) == (0, 1)
    assert bounds(h % 4, ranges, {"h": 4}) == (0, 0)
    assert bounds(h // 3, ranges) == (1, 4)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: sym("1x"),
        lambda: sym("min"),
        lambda: sym(""),
        lambda: sym(3),
        lambda: sym("a") // 0,
        lambda: sym("a") % -2,
        lambda: sym("a") // -sym("b") // 1.5,
        lambda: evaluate(sym("a") // sym("b"), {"a": 3, "b": 0}),
        lambda: evaluate(5 % sym("b"), {"b": -2}),
        lambda: bounds(sym("a") // sym("b"), {"a": (0, 4), "b": (0, 3)}),
        lambda: sym("$a"),
        lambda: index_var("0a"),
        lambda: sym("a") // 1.5,
        lambda: sym("a") + 1.5,
        lambda: sym("a") * True,
        lambda: evaluate(sym("a"), {}),
        lambda: bounds(sym("a"), {}),
        lambda: (sym("a") + 1).symbol_name,
    ],
)
def test_bad_construction_raises_shape_error(bad: Any) -> None:
    with pytest.raises(ShapeError):
        bad()


MALFORMED = [
    "",
    "   ",
    "(",
    ")",
    "()",
    "(+",
    "(+ 1 2",
    "1 2",
    "(+ 1 2))",
    "(// a $)",
    "(% a $1)",
    "(// a 0)",
    "(% a -3)",
    "(min a)",
    "(max a b c)",
    "(foo a b)",
    "(1 2 3)",
    "a.b",
    "+",
    "//",
    "min",
    "(min min 1)",
    "١٢",
    "9" * 5000,
    "(+ " * 100 + "1" + ")" * 100,
    "(+ " * 100000,
    "a " * 20000,
    "(* " + "(+ a b c d) " * 40 + ")",  # well-formed, but 4**40 terms: refused as too large
    "(* " + "a " * 200 + ")",  # a**200: past the degree limit
    "\x00",
    "(+ 1 2)\n(+ 3 4)",
]


@pytest.mark.parametrize("text", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_text_raises_shape_error_quickly(text: str) -> None:
    start = time.perf_counter()
    with pytest.raises(ShapeError):
        parse(text)
    assert time.perf_counter() - start < 1.0


TOKENS = ["(", ")", "+", "*", "//", "%", "min", "max", "a", "b", "-3", "7", "0", "1", " ", "-", "x1"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), st.lists(st.sampled_from(TOKENS), max_size=40).map(" ".join)))
def test_parse_of_arbitrary_text_gives_a_value_or_shape_error(text: str) -> None:
    try:
        e = parse(text)
    except ShapeError:
        return
    assert isinstance(e, (int, SymExpr)) and not isinstance(e, bool)
    assert parse(to_sexpr(e)) == e


def test_exact_div_is_exact_or_none():
    from aotc.ir.symbolic import exact_div, sym

    b, s = sym("b"), sym("s")
    assert exact_div(12, 4) == 3 and exact_div(12, 5) is None and exact_div(b, 0) is None
    assert exact_div(6 * b * s, 3) == 2 * b * s and exact_div(6 * b * s + 1, 3) is None
    assert exact_div(6 * b * s, -3) == -2 * b * s
    assert exact_div(6 * b * s, 2 * s) == 3 * b and exact_div(b * s * s + 4 * s, s) == b * s + 4
    assert exact_div(b * s, 2 * s) is None and exact_div(b + 1, b) is None and exact_div(4, b) is None
    # a constant multiple of a many-term divisor: GIT's heads split off (seq + 17) tokens' width
    assert exact_div((544 + 32 * s) * b, (272 + 16 * s) * b) == 2
    assert exact_div((545 + 32 * s) * b, (272 + 16 * s) * b) is None and exact_div(2 * s + 2, s + 2) is None


# -- symbolic divisors: positive by range (every symbol >= 1 below), any numerator ----------------------------

positive = st.recursive(
    st.one_of(st.sampled_from(NAMES), st.integers(1, 5)),
    lambda ch: st.tuples(st.sampled_from(["+", "*"]), ch, ch),
    max_leaves=3,
)


def _extend_sym(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), children, children),
        st.tuples(st.sampled_from(["//", "%"]), children, st.one_of(st.integers(1, 7), positive)),
    )


sym_trees = st.recursive(leaves, _extend_sym, max_leaves=8)
pos_envs = st.fixed_dictionaries({n: st.integers(1, 30) for n in NAMES})


def py_pos(t: Any, env: dict[str, int]) -> int:
    """Python arithmetic where a divisor may be a tree of its own (always > 0 under pos_envs)."""
    if isinstance(t, str):
        return env[t]
    if isinstance(t, int):
        return t
    op, x, y = t
    a, b = py_pos(x, env), py_pos(y, env)
    if op in ("//", "%"):
        assert b > 0
        return a // b if op == "//" else a % b
    return {"+": a + b, "-": a - b, "*": a * b, "min": min(a, b), "max": max(a, b)}[op]


def build_sym(t: Any) -> int | SymExpr:
    if not isinstance(t, tuple):
        return build(t)
    op, x, y = t
    a, b = build_sym(x), build_sym(y)
    return {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "min": lambda: smin(a, b),
        "max": lambda: smax(a, b),
        "//": lambda: a // b if isinstance(a, SymExpr) or isinstance(b, int) else b.__rfloordiv__(a),
        "%": lambda: a % b if isinstance(a, SymExpr) or isinstance(b, int) else b.__rmod__(a),
    }[op]()


@SETTINGS
@given(sym_trees, st.lists(pos_envs, min_size=1, max_size=5))
def test_symbolic_divisors_evaluate_like_python(t: Any, bindings: list[dict[str, int]]) -> None:
    e = build_sym(t)
    for env in bindings:
        assert evaluate(e, env) == py_pos(t, env), (to_infix(e), env)


@SETTINGS
@given(sym_trees)
def test_symbolic_divisors_round_trip_through_text(t: Any) -> None:
    e = build_sym(t)
    text = to_sexpr(e)
    assert parse(text) == e and to_sexpr(parse(text)) == text
    assert isinstance(to_infix(e), str)


@SETTINGS
@given(sym_trees, st.data())
def test_symbolic_divisor_bounds_contain_every_sampled_value(t: Any, data: st.DataObject) -> None:
    ranges = {}
    for n in NAMES:
        lo = data.draw(st.integers(1, 20))
        ranges[n] = (lo, data.draw(st.integers(lo, lo + 15)))
    e = build_sym(t)
    lo, hi = bounds(e, ranges)
    for _ in range(8):
        env = {n: data.draw(st.integers(*ranges[n])) for n in NAMES}
        assert lo <= evaluate(e, env) <= hi, (to_infix(e), env, (lo, hi))


@SETTINGS
@given(sym_trees, positive, st.lists(pos_envs, min_size=1, max_size=3))
def test_symbolic_division_identities(t: Any, dt: Any, bindings: list[dict[str, int]]) -> None:
    e, d = build_sym(t), build_sym(dt)
    q, r = e // d, e % d
    for env in bindings:
        dv = evaluate(d, env)
        assert evaluate(q, env) * dv + evaluate(r, env) == evaluate(e, env)
        assert 0 <= evaluate(r, env) < dv
    if isinstance(d, SymExpr) and len(d.terms) == 1 and not d.const:  # one-term divisors divide exactly
        assert (e * d) // d == e and (e * d) % d == 0


def test_symbolic_divisor_normalization_facts() -> None:
    b, s, h, n = sym("b"), sym("s"), sym("h"), sym("n")
    assert ((b * s + s) * h + 3) // h == b * s + s + 3 // h
    assert ((b * s + s) * h + 3) % h == 3 % h
    assert (2 * b * h) // (4 * h) == b // 2 and (2 * b * h) % (4 * h) == 2 * h * (b % 2)
    assert (b // s) // h == b // (s * h)
    assert (b % (4 * h)) % (2 * h) == b % (2 * h)
    assert (b * n) // n == b and (b * n) % n == 0
    assert 0 // n == 0 and -1 // n == -1 and 0 % n == 0
    assert to_sexpr(b // (s * h)) == "(// b (* h s))"
    assert parse("(// b (+ h 1))") == b // (h + 1)
    assert to_infix(b // (h + 1)) == "b//(h + 1)" and to_infix((b + 1) % h) == "(b + 1)%h"
    assert bounds(b // s, {"b": (0, 10), "s": (2, 5)}) == (0, 5)
    assert bounds(b % s, {"b": (0, 10), "s": (2, 5)}) == (0, 4)
    assert bounds(b % s, {"b": (0, 1), "s": (2, 5)}) == (0, 1)


def test_index_variables_cannot_clash_with_symbols() -> None:
    i = index_var("i0")
    assert i.symbol_name == "$i0" and i != sym("i0") and i.free_symbols() == {"$i0"}
    assert parse(to_sexpr(3 * i + sym("i0")), index_vars=True) == 3 * i + sym("i0")
    with pytest.raises(ShapeError):  # shapes (and so artifacts) never hold one
        parse(to_sexpr(3 * i))


def test_a_padded_length_divides_by_congruence_and_a_near_miss_does_not() -> None:
    from aotc.ir.symbolic import add, mod, mul, sym
    from aotc.ir.symbolic_residue import divide_by_congruence, is_multiple_of
    from aotc.ir.symbolic_values import substitute

    seq, batch = sym("seq"), sym("batch")
    padded = add(seq, mod(mul(63, mod(seq, 64)), 64))  # seq rounded up to a multiple of 64
    assert is_multiple_of(padded, 64) and is_multiple_of(padded, 32)
    assert not is_multiple_of(padded, 128) and not is_multiple_of(add(padded, 1), 64)
    assert not is_multiple_of(add(seq, mod(mul(63, mod(seq, 32)), 32)), 64)  # a mod 32 says nothing mod 64
    numel = mul(mul(8192, batch), padded)
    q = divide_by_congruence(numel, mul(524288, batch))
    for s in range(1, 300):
        for b in (1, 5):
            assert substitute(q, {"seq": s, "batch": b}) * 524288 * b == substitute(numel, {"seq": s, "batch": b})
    assert divide_by_congruence(add(numel, mul(8192, batch)), mul(524288, batch)) is None
    assert divide_by_congruence(numel, mul(524288, seq)) is None  # seq is not a factor of every term
