"""The index-text helpers: reshape dim runs, row-major offsets and unravelling, mask terms."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aotc.ir.graph import Graph, Symbol
from aotc.ir.symbolic import sym
from aotc.kernels import index_text as ix

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
