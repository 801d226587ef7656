"""Schedule-level properties: typed errors, wide (int64) indexing, outputs that need no kernel, --explain."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from aotc.errors import UnsupportedError
from aotc.ir import DType, Graph, Op, Symbol, TensorType
from aotc.ir.schedule import ArgKind
from aotc.ir.symbolic import SymExpr, sym
from aotc.kernels import index_text as ix
from aotc.kernels.explain import explain
from aotc.kernels.scheduler import code, schedule_graph
from tests.graph_kit import const, make_graph
from tests.kernel_layer.kernel_kit import check

F32 = DType.float32


def test_op_without_kernel_is_a_typed_error() -> None:
    qkv = {n: TensorType(F32, (1, 2, 4, 1024)) for n in "qkv"}  # a head dim past the attention template's
    g = make_graph(qkv, lambda b, q, k, v: [b.op(Op.SDPA, q, k, v)])
    with pytest.raises(UnsupportedError, match="no kernel for scaled_dot_product_attention"):
        schedule_graph(g)


def test_sizes_that_may_pass_int32_use_int64_offsets() -> None:
    n = Symbol("n", 1, 2**33)
    g = make_graph({"x": TensorType(F32, (sym("n"),))}, lambda b, x: [b.op(Op.EXP, x)], symbols=(n,))
    s = check(g, [np.linspace(-1, 1, 5, dtype=np.float32)], {"n": 5})
    (k,) = s.kernels
    assert "tl.int64" in k.source
    assert [a.type for a in k.args if a.kind is ArgKind.SIZE] == ["i64"]


def test_outputs_that_are_inputs_need_no_kernel() -> None:
    g = make_graph({"x": TensorType(F32, (3,))}, lambda b, x: [x, b.op(Op.NEG, x)])
    s = check(g, [np.arange(3, dtype=np.float32)])
    assert len(s.kernels) == 1


@pytest.mark.parametrize("multiple, hinted", [(1, False), (8, False), (16, True)])
def test_divisibility_hints_only_where_proven(multiple: int, hinted: bool) -> None:
    n = Symbol("n", 16, 1024, multiple_of=multiple)
    g = make_graph({"x": TensorType(F32, (sym("n"), 3))}, lambda b, x: [b.op(Op.EXP, x)], symbols=(n,))
    (k,) = schedule_graph(g).kernels
    sizes = [i for i, a in enumerate(k.args) if a.kind is ArgKind.SIZE]
    assert sizes and all((i in k.divisible) == hinted for i in sizes)


def test_explain_names_each_kernel_and_reason() -> None:
    def body(b, x):
        s = b.op(Op.REDUCE_SUM, x, axes=(0,), keepdim=True)
        return [b.op(Op.REDUCE_MAX, b.op(Op.SUB, x, s), axes=(1,), keepdim=True)]

    g = make_graph({"x": TensorType(F32, (4, 6))}, body)
    s = check(g, [np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)])
    text = explain(g, s)
    assert len(s.kernels) == 2 and "other rows" in text
    for k in s.kernels:
        assert k.name in text


def test_kernels_share_a_name_only_when_their_binaries_would_match() -> None:
    """Same code but other pointer types (a float32 and a float16 transpose) or block sizes: two names."""

    def body(b, x, y, z):
        return [b.permute(x, (1, 0)), b.permute(y, (1, 0)), b.permute(z, (1, 0))]

    g = make_graph(
        {"x": TensorType(F32, (4, 8)), "y": TensorType(DType.float16, (4, 8)), "z": TensorType(F32, (40, 80))},
        body,
    )
    s = schedule_graph(g)
    assert len(s.kernels) == 3 and len({k.name for k in s.kernels}) == 3
    first, second = (code(k.source).replace(k.name, "K") for k in s.kernels[:2])
    assert first == ix.rename(second, {"y_ptr": "x_ptr", "y": "x"})  # a load is named after its pointer


def _two_layers(rows: int | SymExpr, d: int, dtype: DType, symbols: tuple[Symbol, ...] = ()) -> Graph:
    """``exp(exp(x @ W1 + b1) @ W2 + b2)``: the same layer twice, on weights named otherwise (``fc.weight`` and
    ``fc.bias``, then ``proj.kernel`` and ``proj.offset``)."""
    rng = np.random.default_rng(0)
    w, bias = (rng.standard_normal(shape).astype(dtype.np) for shape in ((d, d), (d,)))
    weights = {"fc.weight": w, "fc.bias": bias, "proj.kernel": w * 2, "proj.offset": bias + 1}

    def layer(b, x, w, bias):
        wide = b.op(Op.BROADCAST, const(b, bias, weights[bias]), shape=(rows, d))
        return b.op(Op.ADD, b.op(Op.MATMUL, x, const(b, w, weights[w])), wide)

    def body(b, x):
        return [b.op(Op.EXP, layer(b, b.op(Op.EXP, layer(b, x, "fc.weight", "fc.bias")), "proj.kernel", "proj.offset"))]

    return make_graph({"x": TensorType(dtype, (rows, d))}, body, constants=weights, symbols=symbols)


def test_kernels_that_differ_in_the_names_of_their_values_share_one_code() -> None:
    """Two layers computing the same on weights of other names: their loads are named after the weights
    (``bias``, ``offset``), yet they run one code, whose text (and value names) the second launch takes."""
    g = _two_layers(4, 8, F32)
    s = check(g, [np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)])
    first, second = (k for k in s.kernels if "matmul" in k.fused)
    assert first.name == second.name and first.source == second.source
    assert "bias = tl.load(bias_ptr" in first.source
    assert [a.name for a in second.args][:3] == ["x_ptr", "weight_ptr", "bias_ptr"]


def test_a_shared_kernels_variant_names_its_values_after_the_shared_pointers() -> None:
    """sm_90's wider tiles make a variant of each layer; the second layer's is emitted under the names of the
    code it shares (``bias_ptr``, not ``offset_ptr``), so its loads read ``bias`` too, and both share one variant."""
    g = _two_layers(sym("n"), 512, DType.float16, (Symbol("n", 1, 4096),))
    first, second = schedule_graph(g, SimpleNamespace(targets=("sm_80", "sm_90"))).kernels
    (v1,), (v2,) = first.arch_launches, second.arch_launches
    assert v1.kernel.name == v2.kernel.name == f"{first.name}_sm90" and v1.kernel.source == v2.kernel.source
    assert [a.name for a in v2.kernel.args] == [a.name for a in second.args] == [a.name for a in first.args]
    assert "bias = tl.load(bias_ptr" in v2.kernel.source and "offset" not in v2.kernel.source


def test_unlowered_graph_is_a_typed_error() -> None:
    g = make_graph({"x": TensorType(F32, (4,))}, lambda b, x: [b.op(Op.RELU, x)])
    with pytest.raises(UnsupportedError, match="not lowered"):
        schedule_graph(g)


def test_a_merged_pointwise_kernel_stores_every_value_before_the_launches_that_read_it() -> None:
    """Bicubic grid sampling under two paddings shares its coordinate math (CSE): pointwise kernels that already
    hold a merge are merged again into later ones, and each value they store must still precede its readers."""
    from aotc.compiler import CompileOptions, lower
    from aotc.frontend.grid_sample import grid_sample_value

    def build(b: object, x: object, grid: object) -> list:
        return [grid_sample_value(b, x, grid, "bicubic", p, False) for p in ("zeros", "border")]

    g = make_graph({"x": TensorType(F32, (2, 3, 5, 6)), "grid": TensorType(F32, (2, 4, 7, 2))}, build)
    s = schedule_graph(lower(g, CompileOptions()))
    written = {v.id for v in g.inputs}
    for k in s.kernels:
        unwritten = [v for v in k.inputs if v not in written and v in {o for q in s.kernels for o in q.outputs}]
        assert not unwritten, f"{k.name} reads {unwritten} before a launch writes them"
        written.update(k.outputs)
