"""Every op-table entry has a kind, and the op families the passes use are exactly the kinds' members."""

from __future__ import annotations

import pytest

from aotc.ir.ops import (
    BINARY,
    CONTRACTIONS,
    ELEMENTWISE,
    HIGH_LEVEL,
    INDEXING,
    OPS,
    PRIMITIVES,
    REDUCTIONS,
    SOURCES,
    UNARY,
    VIEWS,
    Op,
    OpKind,
    elementwise,
    primitives_of,
)


def test_every_op_has_a_kind() -> None:
    for op, d in OPS.items():
        assert isinstance(d.kind, OpKind), op


def test_the_kind_families_partition_the_primitives() -> None:
    families = [primitives_of(k) for k in OpKind]
    assert sum(len(f) for f in families) == len(PRIMITIVES)
    assert frozenset().union(*families) == PRIMITIVES


def test_families_hold_exactly_the_ops_of_their_kind() -> None:
    assert ELEMENTWISE == {d.op for d in elementwise.DEFS}
    assert UNARY | BINARY | {Op.WHERE, Op.CAST} == ELEMENTWISE and not UNARY & BINARY
    assert REDUCTIONS == {Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD, Op.ARGMAX, Op.ARGMIN}
    assert VIEWS == {Op.RESHAPE, Op.PERMUTE, Op.BROADCAST, Op.SLICE, Op.PAD, Op.CONCAT, Op.FLIP}
    assert CONTRACTIONS == {Op.MATMUL, Op.CONV}
    assert {Op.GATHER} <= INDEXING <= {Op.GATHER, Op.SCATTER}
    assert SOURCES == {Op.IOTA, Op.FULL, Op.CONSTANT}
    assert all(OPS[op].arity == (0, 0) for op in SOURCES)
    assert all(OPS[op].arity[0] > 0 for op in OPS if op not in SOURCES)


@pytest.mark.parametrize(
    ("op", "kind"),
    [
        (Op.LINEAR, OpKind.CONTRACTION),
        (Op.SDPA, OpKind.CONTRACTION),
        (Op.CONV2D, OpKind.CONTRACTION),
        (Op.SOFTMAX, OpKind.REDUCTION),
        (Op.LOG_SOFTMAX, OpKind.REDUCTION),
        (Op.LAYER_NORM, OpKind.REDUCTION),
        (Op.RMS_NORM, OpKind.REDUCTION),
        (Op.REDUCE_MEAN, OpKind.REDUCTION),
        (Op.MAX_POOL2D, OpKind.REDUCTION),
        (Op.AVG_POOL2D, OpKind.REDUCTION),
        (Op.GELU, OpKind.POINTWISE),
        (Op.RELU, OpKind.POINTWISE),
        (Op.BATCH_NORM, OpKind.POINTWISE),
        (Op.TRIL, OpKind.POINTWISE),
        (Op.EMBEDDING, OpKind.INDEX),
    ],
)
def test_high_level_ops_have_the_kind_of_what_they_are(op: Op, kind: OpKind) -> None:
    assert op in HIGH_LEVEL and OPS[op].kind is kind
