"""The index-text helpers (reshape dim runs, row-major offsets and unravelling, mask terms) and the simplified
index expressions the emitter prints."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aotc.ir import DType, Op, TensorType
from aotc.ir.graph import Graph, Symbol
from aotc.ir.index import IndexSpace, by_strides, divisions, flatten, unflatten
from aotc.ir.symbolic import SymExpr, add, floordiv, mod, mul, sym, to_infix
from aotc.ir.symbolic_values import evaluate
from aotc.kernels import index_text as ix
from aotc.kernels.emit import KernelBuilder
from aotc.kernels.scheduler import code, schedule_graph
from tests.graph_kit import make_graph
from tests.kernel_layer.test_splitk_interpret import _compiled

GRAPH = Graph((), (), (), (), symbols=(Symbol("n", 1, 64),))


def _factor(n: int, draw_bits: list[int]) -> tuple[int, ...]:
    """A shape with ``n`` elements, split by the given choices (1s included)."""
    dims, rest = [], n
    for b in draw_bits:
        d = next((d for d in range(2 + b % 3, rest + 1) if rest % d == 0), rest)
        if b % 4 == 0:
            d = 1
        dims.append(d)
        rest //= d
    return (*dims, rest)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.lists(st.integers(0, 50), max_size=3), st.lists(st.integers(0, 50), max_size=3))
def test_reshape_runs_map_every_element(n: int, a: list[int], b: list[int]) -> None:
    src, dst = _factor(n, a), _factor(n, b)
    groups = ix.reshape_groups(GRAPH, src, dst)
    assert [k for gi, _ in groups for k in gi] == list(range(len(src)))
    assert [k for _, go in groups for k in go] == list(range(len(dst)))
    for flat in range(n):
        j = np.unravel_index(flat, dst)
        env = {f"j{k}": int(v) for k, v in enumerate(j)}
        got = [0] * len(src)
        for gi, go in groups:
            lin = ix.row_major([f"j{k}" for k in go], [str(dst[k]) for k in go])
            for k, expr in zip(gi, ix.unravel(lin, [str(src[k]) for k in gi])):
                got[k] = eval(expr, {}, env)
        assert tuple(got) == tuple(int(v) for v in np.unravel_index(flat, src))


def test_symbolic_reshape_keeps_runs() -> None:
    n = sym("n")
    assert ix.reshape_groups(GRAPH, (2, n, 4, 16), (2, n, 64)) == [
        (range(0, 1), range(0, 1)),
        (range(1, 2), range(1, 2)),
        (range(2, 4), range(2, 3)),
    ]


def test_folding_keeps_code_short() -> None:
    assert ix.row_major(["a", "0", "b"], ["", "1", "64"]) == "a * 64 + b"
    assert ix.unravel("offs", ["", "seq", "64"]) == ["offs // (64 * seq)", "(offs // 64) % seq", "offs % 64"]
    assert ix.add("x", "-3") == "x - 3" and ix.mul_("1", "y") == "y" and ix.div("0", "k") == "0"


def test_mask_terms() -> None:
    assert ix.and_terms("(xmask & rmask) & (bad0 == 0)") == ["xmask", "rmask", "bad0 == 0"]
    assert ix.and_terms("m[:, None] & (k[None, :] < K)") == ["m[:, None]", "k[None, :] < K"]
    assert ix.names("(x0 * seq).to(tl.int64) + f(a, b=c)") == {"x0", "seq", "tl", "f", "a", "c"}


# -- simplified index expressions ---------------------------------------------------------------------------------
# The emitter builds every index as an expression over the kernel's index variables (each in [0, extent)) and
# simplifies it before printing: the rules below, then the same through a KernelBuilder.

S = sym("S")
SPACE_RANGES = {"S": (1, 9)}


def _space(**extents: int | SymExpr) -> tuple[IndexSpace, dict[str, SymExpr]]:
    space = IndexSpace(SPACE_RANGES)
    return space, {name: space.var(name, ext) for name, ext in extents.items()}


def test_simplification_rules() -> None:
    space, v = _space(a=100, r=6, s=S, small=3, wide=S * 64)
    a, r, s, small, wide = v["a"], v["r"], v["s"], v["small"], v["wide"]
    simp = space.simplify
    assert simp((a // 3) * 3 + a % 3) == a  # (a//c)*c + a%c -> a
    assert simp((wide // S) * S + wide % S) == wide  # ... for a symbolic c too
    assert simp(8 * ((a // 8) % 4) + a % 8) == a % 32  # a digit pair merges into one remainder
    assert simp(((a // 64) * 8 + (a // 8) % 8) * 8 + a % 8) == a  # a whole unravel, taken row-major again
    assert simp(small % 4) == small and simp(small // 4) == 0  # a < c proven from the ranges
    assert simp(s % S) == s and simp(s // S) == 0  # symbolic: s < S at every binding
    assert simp(a * 1 + 0) == a
    assert simp((a // 4) // 5) == a // 20
    assert simp((a * 7) // 7) == a and simp((a * 7) % 7) == 0
    # the split-K operand: rows of (batch*3) split as (batch, 3) and flattened again
    assert simp(((r // 3) * 3 + r % 3) * 2048 + 256 * small) == r * 2048 + small * 256
    # nothing is merged that does not hold: 3 digits of different bases, or a remainder of a maybe-larger a
    assert simp((a // 4) * 3 + a % 3) == (a // 4) * 3 + a % 3
    assert simp(a % 64) == a % 64 and simp(wide % S) == wide % S


def test_row_major_helpers() -> None:
    space, v = _space(i=S, j=4)
    i, j = v["i"], v["j"]
    flat = flatten([i, j], [S, 4])
    assert flat == 4 * i + j and unflatten(flat, [S, 4]) == [flat // 4, flat % 4]
    assert [space.simplify(e) for e in unflatten(flat, [S, 4])] == [i, j]
    assert unflatten(flat, [3, 0]) == [0, 0]  # an empty shape: any index will do, no division by 0
    assert by_strides(4 * S * i + 4 * j + 3, [7, S, 4]) == [i, j, 3]  # each term at its dim, constants last
    assert by_strides(i + 2 * j, [S, 4]) == [0, i + 2 * j]  # no stride divides: all at the last dim
    assert divisions(i // 4 + i % 4 + (i // 4) % 2) == 3 and divisions(i // 4 + i % 4, held={i // 4}) == 1


# Expressions the emitter builds: sums of variables, constants and symbols, split and merged by div and mod.
_DIVISORS = st.sampled_from([1, 2, 3, 4, 8, S, S * 2])


def _leaf(draw: st.DrawFn, v: dict[str, SymExpr]) -> int | SymExpr:
    return draw(st.sampled_from([*v.values(), S, 0, 1, 5]))


@st.composite
def index_exprs(draw: st.DrawFn, v: dict[str, SymExpr], depth: int = 0) -> int | SymExpr:
    if depth >= 3 or draw(st.booleans()):
        return _leaf(draw, v)
    kind = draw(st.sampled_from(["lin", "div", "mod", "digits", "unravel"]))
    x = draw(index_exprs(v, depth + 1))
    d = draw(_DIVISORS)
    if kind == "lin":
        return add(mul(x, draw(st.sampled_from([1, 2, 3, S]))), draw(index_exprs(v, depth + 1)))
    if kind == "div":
        return floordiv(x, d)
    if kind == "mod":
        return mod(x, d)
    if kind == "digits":  # k*((x // c) % m) + x % c, or k*(x // c) + x % c, with k = c or not
        c, m = d, draw(_DIVISORS)
        high = floordiv(x, c) if draw(st.booleans()) else mod(floordiv(x, c), m)
        return add(mul(high, draw(st.sampled_from([c, 2, 1]))), mod(x, c))
    dims = draw(st.lists(_DIVISORS, min_size=1, max_size=3))  # split by a shape and flattened again
    return flatten(unflatten(x, [1, *dims]), [1, *dims])


class _CInt(int):
    """An int whose // and % truncate toward zero, as Triton's do on integer tensors."""

    def __add__(self, o: int) -> _CInt:
        return _CInt(int(self) + int(o))

    __radd__ = __add__

    def __sub__(self, o: int) -> _CInt:
        return _CInt(int(self) - int(o))

    def __rsub__(self, o: int) -> _CInt:
        return _CInt(int(o) - int(self))

    def __mul__(self, o: int) -> _CInt:
        return _CInt(int(self) * int(o))

    __rmul__ = __mul__

    def __neg__(self) -> _CInt:
        return _CInt(-int(self))

    def __floordiv__(self, o: int) -> _CInt:
        q = abs(int(self)) // abs(int(o))
        return _CInt(q if (int(self) < 0) == (int(o) < 0) else -q)

    def __rfloordiv__(self, o: int) -> _CInt:
        return _CInt(o) // self

    def __mod__(self, o: int) -> _CInt:
        return _CInt(int(self) - int(self // o) * int(o))

    def __rmod__(self, o: int) -> _CInt:
        return _CInt(o) % self


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_simplified_index_equals_the_original_in_range(data: st.DataObject) -> None:
    space, v = _space(i=data.draw(_DIVISORS), j=12, k=S * 4)
    e = data.draw(index_exprs(v))
    s = space.simplify(e)
    assert divisions(s) <= divisions(e), (to_infix(e), to_infix(s))
    names = {"S": "S", "$i": "i", "$j": "j", "$k": "k"}
    text = ix.to_triton(s, names, space)
    for _ in range(8):
        env = {"S": data.draw(st.integers(1, 9))}
        for n in ("i", "j", "k"):
            env[f"${n}"] = data.draw(st.integers(0, evaluate(space.extents[f"${n}"], env) - 1))
        want = evaluate(e, env)
        assert evaluate(s, env) == want, (to_infix(e), to_infix(s), env)
        # the printed text, evaluated with Triton's truncating // and %, gives the same number
        local = {"S": _CInt(env["S"]), **{n: _CInt(env[f"${n}"]) for n in ("i", "j", "k")}}
        assert int(eval(text, {}, local)) == want, (text, env)
    assert space.simplify(s) == s


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_merged_digits_hold_for_every_int(data: st.DataObject) -> None:
    """``y*(b % k) + y*k*(b // k) == y*b`` and ``y*(b % k) + y*k*((b // k) % m) == y*(b % (k*m))`` for any b, even
    negative (floor semantics, which normalizes ``(b - 1) // k`` to ``(b + k - 1) // k - 1``): no range facts needed."""
    space = IndexSpace({"S": (1, 9)})
    b = add(space.var("b", 50), data.draw(st.integers(-40, 40)))
    bases = st.sampled_from([2, 3, 4, 8, S, S * 2])
    k, m, y = data.draw(bases), data.draw(bases), data.draw(st.sampled_from([1, 3, S]))
    high = floordiv(b, k) if data.draw(st.booleans()) else mod(floordiv(b, k), m)
    e = add(mul(y, mod(b, k)), mul(mul(y, k), high))
    s = space.simplify(e)
    assert divisions(s) < divisions(e)
    for env_b in range(0, 50, 7):
        env = {"S": data.draw(st.integers(1, 9)), "$b": env_b}
        assert evaluate(s, env) == evaluate(e, env)


def test_add_folds_a_leading_minus() -> None:
    assert ix.add("a", "-x * 3 + y") == "a - x * 3 + y" and ix.add("a", "-4") == "a - 4"


# -- through the emitter ------------------------------------------------------------------------------------------


def _load_offset(graph: Graph, value_index: int, index: list[str]) -> str:
    """The offset text of the one load a KernelBuilder emits for graph value ``value_index`` (every node inline)."""
    producers = {o.id: (i, n) for i, n in enumerate(graph.nodes) for o in n.outputs}
    b = KernelBuilder(graph, {o.id for n in graph.nodes for o in n.outputs}, producers)
    b.load(graph.nodes[value_index].outputs[0], index, "m")
    (line,) = [t for t in b.source("k", ()).splitlines() if "tl.load(" in t]
    call = line[line.index("in_ptr0 + ") + len("in_ptr0 + ") :]
    text = call[: call.rindex(", mask=")] if ", mask=" in call else call[:-1]
    return text[1:-1] if text.startswith("(") and ix.paren(text[1:-1]) != text[1:-1] else text


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 48), st.lists(st.integers(0, 50), max_size=3), st.lists(st.integers(0, 50), max_size=3))
def test_emitted_reshape_offsets_read_the_right_element(n: int, a: list[int], b: list[int]) -> None:
    src, dst = _factor(n, a), _factor(n, b)
    g = make_graph({"x": TensorType(DType.float32, src)}, lambda gb, x: [gb.op(Op.RESHAPE, x, shape=dst)])
    names = [f"i{k}" for k in range(len(dst))]
    text = _load_offset(g, 0, names)
    grid = np.indices(dst)  # every point of the reshaped value, each index an array over the whole grid
    got = eval(text, {}, dict(zip(names, grid)))
    np.testing.assert_array_equal(np.broadcast_to(got, dst), np.arange(n).reshape(dst))
    assert "//" not in text and "%" not in text  # the reshape folds away entirely: the load reads its input in order


def test_reshape_back_and_forth_reads_the_index() -> None:
    def body(gb, x):
        y = gb.op(Op.RESHAPE, x, shape=(sym("S"), 3, 2, 8))
        return [gb.op(Op.RESHAPE, y, shape=(sym("S") * 6, 8))]

    g = make_graph({"x": TensorType(DType.float32, (sym("S"), 48))}, body, symbols=(Symbol("S", 1, 9),))
    assert _load_offset(g, 1, ["offs_m[:, None]", "offs_k[None, :]"]) == "offs_m[:, None] * 8 + offs_k[None, :]"
    # a permute in between keeps its index math, and what remains of the reshapes
    g2 = make_graph(
        {"x": TensorType(DType.float32, (sym("S"), 6, 8))},
        lambda gb, x: [gb.op(Op.RESHAPE, gb.permute(x, (0, 2, 1)), shape=(sym("S") * 8, 6))],
        symbols=(Symbol("S", 1, 9),),
    )
    assert _load_offset(g2, 1, ["r", "c"]) == "((r // 8) * 6 + c) * 8 + r % 8"


def test_split_k_operand_index_has_no_division() -> None:
    mm = _compiled("fp32").schedule.kernels[0]
    loads = [t for t in mm.source.splitlines() if "tl.load(" in t]
    assert len(loads) == 2 and not any("//" in t or "%" in t for t in loads), mm.source
    assert "offs_m[:, None] * 2048 + b0 * 256 + offs_k[None, :]" in loads[0]


def test_pointwise_offsets_of_a_same_shape_operand_are_the_linear_index() -> None:
    def body(gb, x, y):
        return [gb.op(Op.ADD, x, gb.op(Op.RESHAPE, y, shape=(2, sym("S"), 4, 16)))]

    g = make_graph(
        {"x": TensorType(DType.float32, (2, sym("S"), 4, 16)), "y": TensorType(DType.float32, (2, sym("S"), 64))},
        body,
        symbols=(Symbol("S", 1, 9),),
    )
    (k,) = schedule_graph(g).kernels
    assert [t.strip() for t in k.source.splitlines() if "tl.load" in t or "tl.store" in t] == [
        "x = tl.load(x_ptr + offs, mask=mask, other=0.0)",
        "y = tl.load(y_ptr + offs, mask=mask, other=0.0)",
        "tl.store(out_ptr + offs, out, mask=mask)",
    ]
    assert "//" not in code(k.source) and "%" not in code(k.source)  # no dim index is needed, so none is computed
