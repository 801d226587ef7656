"""Index expressions: index variables, range-aware simplification (sound at every point in range) and Triton text."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotc.errors import ShapeError
from aotc.ir.index import IndexSpace, simplify_index
from aotc.ir.symbolic import SymExpr, smax, smin, sym, to_infix
from aotc.ir.symbolic_values import evaluate
from aotc.kernels.index_text import to_triton

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SYMS = {"A": (1, 6), "B": (1, 5)}
IVARS = ("i", "j", "k")


def _space(extents: dict[str, Any]) -> tuple[IndexSpace, dict[str, SymExpr]]:
    space = IndexSpace(SYMS)
    return space, {n: space.var(n, ext) for n, ext in extents.items()}


def _points(space: IndexSpace, data: st.DataObject, n: int = 6) -> list[dict[str, int]]:
    """Random bindings: symbols in their ranges, then each index variable in [0, extent) (skipped if empty)."""
    out = []
    for _ in range(n):
        env = {s: data.draw(st.integers(*r)) for s, r in SYMS.items()}
        for v, ext in space.extents.items():
            e = evaluate(ext, env)
            if e <= 0:
                break
            env[v] = data.draw(st.integers(0, e - 1))
        else:
            out.append(env)
    return out


# -- random expressions over index variables ------------------------------------------------------------------

extents = st.sampled_from([sym("A"), sym("B"), sym("A") * sym("B"), 3, 4, sym("A") * 2])
positive = st.sampled_from([sym("A"), sym("B"), sym("A") * sym("B"), 2, 3, sym("B") * 4, sym("A") + 1])
leaves = st.one_of(st.sampled_from(IVARS + ("A", "B")), st.integers(-3, 5))


def _extend(ch: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), ch, ch),
        st.tuples(st.sampled_from(["//", "%"]), ch, positive),
        st.tuples(st.just("lin"), ch, positive, ch),  # x*d + y: the shape a flattened index takes
    )


trees = st.recursive(leaves, _extend, max_leaves=8)


def build(t: Any, ivars: dict[str, SymExpr]) -> int | SymExpr:
    if isinstance(t, str):
        return ivars[t] if t in ivars else sym(t)
    if isinstance(t, int):
        return t
    if t[0] == "lin":
        return build(t[1], ivars) * t[2] + build(t[3], ivars)
    op, x, y = t
    a = build(x, ivars)
    b = y if isinstance(y, SymExpr) else build(y, ivars)
    if op in ("//", "%"):
        a = a if isinstance(a, SymExpr) else sym("A") * 0 + a  # keep ints on the SymExpr operators' path
        return a // b if op == "//" else a % b
    return {"+": a + b, "-": a - b, "*": a * b, "min": smin(a, b), "max": smax(a, b)}[op]


@SETTINGS
@given(trees, st.tuples(extents, extents, extents), st.data())
def test_simplified_expression_equals_original_at_every_sampled_point(t: Any, ext: tuple, data: st.DataObject) -> None:
    space, ivars = _space(dict(zip(IVARS, ext)))
    e = build(t, ivars)
    s = simplify_index(e, space)
    lo, hi = space.bounds(e)
    for env in _points(space, data):
        v = evaluate(e, env)
        assert evaluate(s, env) == v, (to_infix(e), to_infix(s), env)
        assert lo <= v <= hi, (to_infix(e), env, (lo, hi))
    assert simplify_index(s, space) == s  # a fixed point: simplifying twice changes nothing


# -- chains of views: reshape and permute, checked against numpy -----------------------------------------------

# A dim is a tuple of atomic factors (ints or symbol names); reshapes merge neighbours or split them apart again.
factor = st.sampled_from([2, 3, "A", "B"])


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[tuple], list[tuple]]:
    shape = [(f,) for f in draw(st.lists(factor, min_size=1, max_size=4))]
    first, steps = list(shape), []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["merge", "split", "permute"]))
        if kind == "merge" and len(shape) > 1:
            i = draw(st.integers(0, len(shape) - 2))
            shape = shape[:i] + [shape[i] + shape[i + 1]] + shape[i + 2 :]
            steps.append(("reshape", list(shape)))
        elif kind == "split" and any(len(d) > 1 for d in shape):
            i = draw(st.sampled_from([n for n, d in enumerate(shape) if len(d) > 1]))
            cut = draw(st.integers(1, len(shape[i]) - 1))
            shape = shape[:i] + [shape[i][:cut], shape[i][cut:]] + shape[i + 1 :]
            steps.append(("reshape", list(shape)))
        else:
            perm = draw(st.permutations(range(len(shape))))
            shape = [shape[p] for p in perm]
            steps.append(("permute", list(perm)))
    return first, steps


def _dim(d: tuple) -> int | SymExpr:
    return math.prod((sym(f) if isinstance(f, str) else f for f in d), start=1)


def _flat(idx: list, shape: list) -> int | SymExpr:
    out: int | SymExpr = 0
    for i, d in zip(idx, shape):
        out = out * _dim(d) + i
    return out


def _unflat(flat: int | SymExpr, shape: list) -> list:
    out = []
    for d in reversed(shape):
        out.append(flat % _dim(d))
        flat = flat // _dim(d)
    return out[::-1]


@SETTINGS
@given(chains(), st.data())
def test_view_chains_become_index_math_that_numpy_agrees_with(chain: tuple, data: st.DataObject) -> None:
    first, steps = chain
    shapes = [first]
    for kind, arg in steps:
        shapes.append(arg if kind == "reshape" else [shapes[-1][p] for p in arg])
    space = IndexSpace(SYMS)
    idx: list = [space.var(f"o{n}", _dim(d)) for n, d in enumerate(shapes[-1])]
    for (kind, arg), before in zip(reversed(steps), reversed(shapes[:-1])):  # consumer index -> source index
        if kind == "reshape":
            idx = _unflat(_flat(idx, arg), before)
        else:
            src = [None] * len(arg)
            for out_axis, in_axis in enumerate(arg):
                src[in_axis] = idx[out_axis]
            idx = src
    simple = [simplify_index(e, space) for e in idx]
    for env in _points(space, data, 4):
        src_shape = [evaluate(_dim(d), env) for d in first]
        x = np.arange(math.prod(src_shape)).reshape(src_shape)
        for kind, arg in steps:
            x = x.reshape([evaluate(_dim(d), env) for d in arg]) if kind == "reshape" else x.transpose(arg)
        point = tuple(env[f"$o{n}"] for n in range(x.ndim))
        want = np.unravel_index(int(x[point]), src_shape)
        assert [evaluate(e, env) for e in simple] == [int(w) for w in want]
        assert [evaluate(e, env) for e in idx] == [int(w) for w in want]


def test_reshape_round_trips_simplify_to_the_index_variables() -> None:
    space = IndexSpace({"B": (1, 64), "S": (1, 2048), "H": (1, 128)})
    bs, s_, h_ = sym("B"), sym("S"), sym("H")
    b, s, h = space.var("b", bs), space.var("s", s_), space.var("h", h_)
    flat = (b * s_ + s) * h_ + h
    assert simplify_index(flat // h_, space) == b * s_ + s
    assert simplify_index(flat % h_, space) == h
    assert simplify_index(flat // (s_ * h_), space) == b
    assert simplify_index(flat % (s_ * h_), space) == s * h_ + h
    assert simplify_index((b * s_ + s) // s_, space) == b
    r = space.var("r", bs * s_)
    assert simplify_index((r // s_) % bs, space) == r // s_  # r // S < B
    assert simplify_index(((h * 64 + 5) // 128), space) == h // 2  # (x*k + y) // (k*m) with 0 <= y < k
    assert simplify_index(((h * 64 + 5) % 128), space) == 64 * (h % 2) + 5
    assert simplify_index(smin(h, h_), space) == h and simplify_index(smax(h, h_ - 1), space) == h_ - 1
    assert simplify_index((h - h_) // h_, space) == -1
    assert simplify_index((s + 1) // s_, space) == (s + 1) // s_  # s + 1 may reach S: no rule applies


def test_facts_need_the_ranges() -> None:
    space = IndexSpace({"H": (1, 8)})
    h = space.var("h", 2 * sym("H"))
    assert simplify_index(h // sym("H"), space) == h // sym("H")  # h may exceed H
    assert space.less(h, 2 * sym("H")) and not space.less(h, sym("H"))
    assert space.nonneg(h) and not space.nonneg(h - 1)


def test_index_space_refuses_bad_declarations() -> None:
    space = IndexSpace({"H": (1, 8)})
    i = space.var("i", sym("H"))
    with pytest.raises(ShapeError, match="declared twice"):
        space.var("i", 4)
    with pytest.raises(ShapeError, match="another index variable"):
        space.var("j", i + 1)
    with pytest.raises(ShapeError, match="has no range"):
        space.var("k", sym("Q"))
    with pytest.raises(ShapeError, match="index variable"):
        IndexSpace({"$i": (0, 3)})
    with pytest.raises(ShapeError, match="no name in the kernel"):
        to_triton(i + sym("H"), {"$i": "offs"})


# -- Triton text: Triton's integer // and % truncate toward zero, like C ---------------------------------------


class CInt:
    """An int whose // and % truncate toward zero, as Triton's do on integer tensors."""

    def __init__(self, v: int) -> None:
        self.v = v

    @staticmethod
    def of(x: Any) -> int:
        return x.v if isinstance(x, CInt) else x

    def __add__(self, o: Any) -> CInt:
        return CInt(self.v + CInt.of(o))

    __radd__ = __add__

    def __sub__(self, o: Any) -> CInt:
        return CInt(self.v - CInt.of(o))

    def __rsub__(self, o: Any) -> CInt:
        return CInt(CInt.of(o) - self.v)

    def __mul__(self, o: Any) -> CInt:
        return CInt(self.v * CInt.of(o))

    __rmul__ = __mul__

    def __neg__(self) -> CInt:
        return CInt(-self.v)

    def __floordiv__(self, o: Any) -> CInt:
        d = CInt.of(o)
        return CInt(int(self.v / d) if abs(self.v) < 2**52 else -(-self.v // d) if self.v < 0 else self.v // d)

    def __rfloordiv__(self, o: Any) -> CInt:
        return CInt(CInt.of(o)) // self

    def __mod__(self, o: Any) -> CInt:
        return CInt(self.v - (self // o).v * CInt.of(o))

    def __rmod__(self, o: Any) -> CInt:
        return CInt(CInt.of(o)) % self


class _TL:
    @staticmethod
    def minimum(a: Any, b: Any) -> CInt:
        return CInt(min(CInt.of(a), CInt.of(b)))

    @staticmethod
    def maximum(a: Any, b: Any) -> CInt:
        return CInt(max(CInt.of(a), CInt.of(b)))


def _run_triton_text(text: str, env: dict[str, int]) -> int:
    names = {k.lstrip("$") + ("_idx" if k.startswith("$") else ""): CInt(v) for k, v in env.items()}
    out = eval(text, {"tl": _TL, **names})  # the printer's own output, over CInt values
    return CInt.of(out)


def _triton_names(space: IndexSpace) -> dict[str, str]:
    names = {s: s for s in SYMS}
    names.update({v: v.lstrip("$") + "_idx" for v in space.extents})
    return names


@SETTINGS
@given(trees, st.tuples(extents, extents, extents), st.data())
def test_triton_text_computes_the_expression_under_truncating_division(t: Any, ext: tuple, data: st.DataObject) -> None:
    space, ivars = _space(dict(zip(IVARS, ext)))
    e = build(t, ivars)
    safe = to_triton(e, _triton_names(space), space)
    plain = to_triton(simplify_index(e, space), _triton_names(space), space)
    for env in _points(space, data):
        assert _run_triton_text(safe, env) == evaluate(e, env), (safe, env)
        assert _run_triton_text(plain, env) == evaluate(e, env), (plain, env)


def test_triton_text_reads_like_hand_written_index_math() -> None:
    space = IndexSpace({"H": (1, 128), "W": (1, 64)})
    h, w = space.var("h", sym("H")), space.var("w", sym("W"))
    names = {"$h": "offs_h[:, None]", "$w": "offs_w[None, :]", "H": "H", "W": "W"}
    e = h * sym("W") + w
    assert to_triton(e, names) == "offs_h[:, None] * W + offs_w[None, :]"
    assert to_triton(e // 4, names) == "(offs_h[:, None] * W + offs_w[None, :]) // 4"
    assert to_triton((e - 4) % sym("W"), names) == "(offs_w[None, :] - 4) % W"  # h*W drops out first
    # w - 4 may be negative: given the space, the remainder prints in its sign-safe form
    assert to_triton((e - 4) % sym("W"), names, space) == "((offs_w[None, :] - 4) % W + W) % W"
    assert to_triton((h - 1) // 2, names, space) == "(offs_h[:, None] + 1) // 2 - 1"
    assert to_triton(smin(h, sym("W")) - 3 * w, names) == "tl.minimum(offs_h[:, None], W) - offs_w[None, :] * 3"
    assert to_triton(3 - h // 2, names) == "3 - offs_h[:, None] // 2"  # a positive term leads
    assert to_triton(-(h // 2), names) == "-(offs_h[:, None] // 2)"  # not (-h) // 2
    # a variable holding part of the expression prints as its name; wide terms compute in int64
    assert to_triton(e // 4 + h % 2, names, held={h % 2: "hb"}) == "hb + (offs_h[:, None] * W + offs_w[None, :]) // 4"
    assert to_triton(e, names, wide=True) == "offs_h[:, None].to(tl.int64) * W + offs_w[None, :].to(tl.int64)"
