"""CSE keys float attrs by their bits: -0.0 and 0.0 are different constants (x / -0.0 is -inf, not +inf)."""

from __future__ import annotations

import struct

import numpy as np

from aotc.ir import DType, Op
from aotc.ir.evaluate import run_graph
from aotc.lowering.cse import attr_key, cse
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower

F32 = DType.float32


def _nan(payload: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0]


def test_signed_zeros_survive_lowering(kit):
    x = kit.input((kit.seq,))
    neg = kit.b.op(Op.DIV, x, kit.b.full(-0.0, F32))
    pos = kit.b.op(Op.DIV, x, kit.b.full(0.0, F32))
    before = kit.graph(neg, pos)
    feeds = [np.array([1.0, -2.0], np.float32)]
    with np.errstate(divide="ignore"):
        want = run_graph(before, feeds, {"seq": 2})
        got = run_graph(lower(before, CompileOptions()), feeds, {"seq": 2})
    np.testing.assert_array_equal(want[0], [-np.inf, np.inf])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_cse_merges_by_bits(kit):
    x = kit.input((3,))
    fulls = [kit.b.full(v, F32) for v in (-0.0, 0.0, 0.0, _nan(1), _nan(1), _nan(2))]
    after = cse(kit.graph(*(kit.b.op(Op.ADD, x, f) for f in fulls)))
    assert [n.op for n in after.nodes].count(Op.FULL) == 4  # -0.0, 0.0, nan(1), nan(2)
    assert [n.op for n in after.nodes].count(Op.ADD) == 4


def test_attr_keys_tell_kinds_and_bits_apart():
    assert attr_key(-0.0) != attr_key(0.0) and attr_key(_nan(3)) == attr_key(_nan(3))
    assert attr_key(_nan(3)) != attr_key(_nan(4))
    assert len({attr_key(True), attr_key(1), attr_key(1.0)}) == 3
    assert attr_key((1, -0.0)) != attr_key((1, 0.0)) and attr_key((1, 2)) == attr_key((1, 2))
    assert attr_key(np.float32(-0.0)) == attr_key(-0.0) and attr_key(np.int64(3)) == attr_key(3)
    assert attr_key(F32) == attr_key(DType.float32) and attr_key("a") != attr_key("b")
