"""Property tests: random attr values and random graphs survive write → read exactly."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from artifact_graphs import assert_same_graph, const, make_graph, same_value
from hypothesis import given, settings
from hypothesis import strategies as st

from aotc.artifact import SCHEMA_VERSION, describe, read_artifact, write_artifact
from aotc.artifact.decode import Decoder
from aotc.artifact.encode import Header, Interner, encode_artifact
from aotc.ir import Builder, DType, Guard, Op, Symbol, TensorType, Value, sym
from aotc.ir.graph import RELATIONS

SYMBOLS = ("a", "b_2", "seq")


def sym_exprs() -> st.SearchStrategy[Any]:
    leaf = st.sampled_from(SYMBOLS).map(sym)
    small = st.integers(-5, 5)

    def grow(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, small).map(lambda p: p[0] * p[1]),
            st.tuples(inner, inner).map(lambda p: p[0] * p[1]),
            st.tuples(inner, st.integers(1, 9)).map(lambda p: p[0] // p[1]),
            st.tuples(inner, st.integers(1, 9)).map(lambda p: p[0] % p[1]),
        )

    return st.recursive(leaf, grow, max_leaves=6)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(list(DType)),
    sym_exprs(),
)
ATTR_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(ATTR_VALUES)
def test_attr_values_round_trip(value: Any) -> None:
    tables = Interner()
    index = tables.attr_value(value, "attr")
    again = tables.attr_value(value, "attr")
    fb = encode_artifact(Header(SCHEMA_VERSION, "0", "attrs", "{}"), [], None, [], [], tables)
    back = Decoder(fb).tables.attr_values
    assert same_value(back[index], value), (value, back[index])
    assert again == index  # interned: equal kinds and bits give one entry


# -- random graphs --------------------------------------------------------------------------------

UNARY = (Op.NEG, Op.ABS, Op.EXP, Op.TANH, Op.FLOOR)
BINARY = (Op.ADD, Op.MUL, Op.MAXIMUM, Op.SUB)


@st.composite
def graphs(draw: st.DrawFn) -> Any:
    n_syms = draw(st.integers(0, 2))
    names = SYMBOLS[:n_syms]
    symbols = []
    for name in names:
        lo, mult = draw(st.integers(0, 50)), draw(st.sampled_from([1, 2, 8]))
        # some value in [lo, hi] is a multiple of mult (the writer refuses an unsatisfiable symbol)
        hi = max(lo + draw(st.integers(0, 10**6)), -(-lo // mult) * mult)
        symbols.append(Symbol(name, lo, hi, mult))
    dims = [
        draw(st.one_of(st.integers(0, 5), *(st.just(sym(n)) for n in names))) for _ in range(draw(st.integers(0, 3)))
    ]
    shape = (*dims, draw(st.integers(1, 4)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    consts: dict[str, np.ndarray] = {}
    locs = st.text(max_size=20)
    ops = draw(st.lists(st.sampled_from(["unary", "binary", "reduce", "full", "cast"]), min_size=1, max_size=6))

    def body(b: Builder, x: Value) -> list[Value]:
        outs, cur = [], x
        for kind in ops:
            b.loc = draw(locs)
            if kind == "unary":
                cur = b.op(draw(st.sampled_from(UNARY)), cur)
            elif kind == "binary":
                name = f"c{len(consts)}.weight"
                consts[name] = rng.standard_normal(shape[-1:]).astype(np.float32)
                cur = b.op(draw(st.sampled_from(BINARY)), cur, const(b, name, consts[name]))
            elif kind == "reduce":
                axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
                outs.append(b.op(Op.REDUCE_SUM, cur, axes=axes, keepdim=draw(st.booleans())))
            elif kind == "full":
                value = draw(
                    st.one_of(st.floats(), st.integers(-(2**40), 2**40), *(st.just(sym(n) * 3) for n in names))
                )
                outs.append(b.full(value, DType.float32 if isinstance(value, float) else DType.int64, shape[:-1]))
            else:
                outs.append(b.op(Op.CAST, cur, dtype=draw(st.sampled_from(list(DType)))))
        return [cur, *outs]

    guards = [
        Guard(sym(n), draw(st.sampled_from(RELATIONS)), draw(st.integers(-5, 10**6)), draw(locs))
        for n in names
        if draw(st.booleans())
    ]
    g = make_graph(
        {"x": TensorType(DType.float32, shape)},
        body,
        symbols=symbols,
        guards=guards,
        constants=consts,
        name=draw(st.text(max_size=10)),
    )
    leaves = list(draw(st.permutations(range(len(g.outputs)))))
    tree = draw(st.sampled_from(["tuple", "list", "dict"]))
    items = [[f"k{i}", leaf] for i, leaf in enumerate(leaves)] if tree == "dict" else leaves
    return g.replace(output_tree={tree: items})


@settings(max_examples=60, deadline=None)
@given(graphs(), st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3))
def test_random_graphs_round_trip(g: Any, meta: dict[str, Any]) -> None:
    art = read_artifact(write_artifact([g], source=g, meta=meta))
    assert_same_graph(art.variants[0].graph, g)
    assert_same_graph(art.source, g)
    assert art.meta == meta
    d = describe(art)
    assert json.loads(json.dumps(d)) == d
