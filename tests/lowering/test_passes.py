"""Each pass alone: the graph before, the graph after, and the same numbers from both."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.ir import DType, Op, verify
from aotc.ir.evaluate import run_graph
from aotc.lowering.cse import cse, dce
from aotc.lowering.decompose import decompose
from aotc.lowering.fold import fold_constants
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from aotc.lowering.simplify import simplify

F32 = DType.float32


def ops(graph):
    return [n.op for n in graph.nodes]


def same_outputs(before, after, feeds, env):
    for a, b in zip(run_graph(before, feeds, env), run_graph(after, feeds, env)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_decompose_leaves_only_primitives(kit):
    x = kit.input((kit.seq, 8))
    w = kit.const("w", kit.rng.standard_normal((4, 8)).astype(np.float32))
    y = kit.b.op(Op.SOFTMAX, kit.b.op(Op.LINEAR, x, w), axis=-1)
    before = kit.graph(y)
    after = decompose(before)
    verify(after, "decompose", primitive_only=True)
    assert Op.LINEAR in ops(before) and Op.LINEAR not in ops(after)
    assert Op.REDUCE_MAX in ops(after)  # the stable softmax subtracts the row max
    same_outputs(before, after, [kit.rng.standard_normal((5, 8)).astype(np.float32)], {"seq": 5})


def test_simplify_collapses_chains(kit):
    x = kit.input((kit.seq, 4, 2))
    r = kit.b.op(Op.RESHAPE, kit.b.op(Op.RESHAPE, x, shape=(kit.seq, 8)), shape=(kit.seq * 2, 4))
    p = kit.b.op(Op.PERMUTE, kit.b.op(Op.PERMUTE, x, perm=(1, 0, 2)), perm=(1, 0, 2))
    c = kit.b.op(Op.CAST, kit.b.op(Op.CAST, x, dtype=DType.float32), dtype=DType.float32)
    before = kit.graph(r, p, c)
    after = dce(simplify(before))
    verify(after, "simplify")
    assert ops(after) == [Op.RESHAPE]
    assert after.outputs[1] is after.inputs[0] and after.outputs[2] is after.inputs[0]
    same_outputs(before, after, [kit.rng.standard_normal((3, 4, 2)).astype(np.float32)], {"seq": 3})


def test_simplify_keeps_non_identity_permute(kit):
    x = kit.input((4, 4))
    before = kit.graph(kit.b.op(Op.PERMUTE, x, perm=(1, 0)))
    assert ops(simplify(before)) == [Op.PERMUTE]


def test_simplify_keeps_narrowing_cast_pair(kit):
    x = kit.input((4,))
    y = kit.b.op(Op.CAST, kit.b.op(Op.CAST, x, dtype=DType.float16), dtype=F32)  # rounds: not an identity
    after = simplify(kit.graph(y))
    assert ops(after) == [Op.CAST, Op.CAST]


def test_fold_keeps_views_of_weights_so_each_weight_is_stored_once(kit):
    x = kit.input((kit.seq, 8))
    w = kit.const("w", kit.rng.standard_normal((4, 8)).astype(np.float32))
    y = kit.b.op(Op.MATMUL, x, kit.b.op(Op.PERMUTE, w, perm=(1, 0)))  # a transpose is index math in the matmul
    before = kit.graph(y)
    after = dce(fold_constants(before))
    verify(after, "fold")
    assert ops(after) == [Op.CONSTANT, Op.PERMUTE, Op.MATMUL] and list(after.constants) == ["w"]
    same_outputs(before, after, [kit.rng.standard_normal((2, 8)).astype(np.float32)], {"seq": 2})


def test_fold_computes_through_views_of_constants(kit):
    x = kit.input((8, 4))
    w = kit.const("w", kit.rng.standard_normal((4, 8)).astype(np.float32))
    y = kit.b.op(Op.ADD, x, kit.b.op(Op.EXP, kit.b.op(Op.PERMUTE, w, perm=(1, 0))))
    before = kit.graph(y)
    after = dce(fold_constants(before))
    assert ops(after) == [Op.CONSTANT, Op.ADD] and list(after.constants) != ["w"]
    np.testing.assert_array_equal(next(iter(after.constants.values())), np.exp(before.constants["w"].T))
    same_outputs(before, after, [kit.rng.standard_normal((8, 4)).astype(np.float32)], {})


def test_fold_leaves_large_computations_on_weights_to_run_time(kit):
    x = kit.input((128, 256))
    w = kit.const("w", kit.rng.standard_normal((128, 256)).astype(np.float32))  # 128 KiB > max_bytes
    y = kit.b.op(Op.ADD, x, kit.b.op(Op.NEG, w))
    after = dce(fold_constants(kit.graph(y)))
    assert ops(after) == [Op.CONSTANT, Op.NEG, Op.ADD] and list(after.constants) == ["w"]


def test_fold_does_not_materialize_big_broadcast(kit):
    x = kit.input((kit.seq, 512, 512))
    big = kit.b.op(Op.BROADCAST, kit.b.full(1.0, F32), shape=(512, 512))
    after = fold_constants(kit.graph(kit.b.op(Op.ADD, x, big)))
    assert Op.BROADCAST in ops(after) and not after.constants


def test_fold_leaves_symbolic_sources(kit):
    x = kit.input((kit.seq,))
    n = kit.b.full(kit.seq, F32)  # a dynamic size as a value: must not fold
    after = fold_constants(kit.graph(kit.b.op(Op.DIV, x, n)))
    assert Op.FULL in ops(after) and not after.constants


def test_cse_merges_equal_nodes_and_dce_drops_the_rest(kit):
    x = kit.input((kit.seq, 3))
    a = kit.b.op(Op.EXP, x)
    b = kit.b.op(Op.EXP, x)
    kit.b.op(Op.LOG, x)  # dead
    before = kit.graph(kit.b.op(Op.ADD, a, b))
    after = dce(cse(before))
    verify(after, "cse")
    assert ops(after) == [Op.EXP, Op.ADD]
    same_outputs(before, after, [np.ones((2, 3), np.float32)], {"seq": 2})


def test_cse_distinguishes_attrs(kit):
    x = kit.input((kit.seq, 3))
    a = kit.b.op(Op.REDUCE_SUM, x, axes=(0,), keepdim=False)
    b = kit.b.op(Op.REDUCE_SUM, x, axes=(1,), keepdim=False)
    after = cse(kit.graph(a, b))
    assert ops(after) == [Op.REDUCE_SUM, Op.REDUCE_SUM]


def test_pipeline_dumps_every_stage_and_verifies(kit, tmp_path):
    x = kit.input((kit.seq, 8))
    w = kit.const("w", kit.rng.standard_normal((8, 8)).astype(np.float32))
    y = kit.b.op(Op.LAYER_NORM, kit.b.op(Op.GELU, kit.b.op(Op.LINEAR, x, w)), ndim=1, eps=1e-5)
    before = kit.graph(y)
    seen = []
    after = lower(before, CompileOptions(verify_each_stage=True), dump_dir=tmp_path, progress=seen.append)
    verify(after, "lowered", primitive_only=True)
    assert seen == [
        name
        for name in (
            "decompose",
            "attention",
            "simplify",
            "cse",
            "fold_constants",
            "cse_2",
            "matmul_padding",
            "split_k",
            "simplify_2",
            "dce",
        )
    ]
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert dumps[0] == "00-input.txt" and dumps[-1].endswith("-dce.txt") and len(dumps) == len(seen) + 1
    assert "layer_norm" in (tmp_path / "00-input.txt").read_text()
    same_outputs(before, after, [kit.rng.standard_normal((6, 8)).astype(np.float32)], {"seq": 6})


def test_options_turn_passes_off(kit):
    x = kit.input((kit.seq,))
    w = kit.const("w", np.ones(4, np.float32))
    before = kit.graph(kit.b.op(Op.ADD, kit.b.op(Op.EXP, kit.b.op(Op.REDUCE_SUM, w, axes=(0,), keepdim=False)), x))
    folded = lower(before)
    unfolded = lower(before, CompileOptions(fold_constants=False))
    assert Op.EXP not in ops(folded) and Op.EXP in ops(unfolded)
    assert CompileOptions().key() != CompileOptions(fold_constants=False).key()


@pytest.mark.parametrize("seq", [1, 7, 64])
def test_lowered_attention_matches_reference_at_several_lengths(kit, seq):
    q = kit.input((2, kit.seq, 8))
    y = kit.b.op(Op.SDPA, q, q, q, is_causal=True)
    before = kit.graph(y)
    after = lower(before)
    x = kit.rng.standard_normal((2, seq, 8)).astype(np.float32)
    same_outputs(before, after, [x], {"seq": seq})


def test_stage_verification_names_the_stage_that_broke(kit, monkeypatch):
    import aotc.lowering.pipeline as pipeline
    from aotc.errors import VerifyError

    x = kit.input((kit.seq, 3))
    before = kit.graph(kit.b.op(Op.EXP, x))

    def drop_producers(graph):  # a broken pass: outputs refer to a node it removed
        return graph.replace(nodes=())

    monkeypatch.setattr(pipeline, "dce", drop_producers)
    with pytest.raises(VerifyError, match="after stage 'dce'"):
        lower(before, CompileOptions(verify_each_stage=True))
