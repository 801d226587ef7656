"""The verifier, before/after style: a valid graph passes; each broken invariant fails naming the node and stage."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from aotc.errors import VerifyError
from aotc.ir import Attrs, Builder, DType, Graph, Guard, Op, Symbol, TensorType, Value, sym, verify
from aotc.ir.evaluate import run_graph
from aotc.ir.graph import unflatten_tree
from aotc.ir.shapes import ShapeCtx
from aotc.ir.verify import graph_ctx

F32 = DType.float32
S = sym("s")


def _valid() -> Graph:
    """x: f32[s, 4] -> dict(y=relu(x @ w + 1), z=(x,)): one constant, one high-level op, a symbol and a guard."""
    ctx = ShapeCtx({"s": (1, 32)})
    x = Value(0, TensorType(F32, (S, 4)))
    b = Builder(ctx, next_id=1)
    w = b.op(Op.CONSTANT, name="w", shape=(4, 3), dtype=F32)
    mm = b.op(Op.MATMUL, x, w)
    y = b.op(Op.RELU, b.op(Op.ADD, mm, b.full(1.0, F32)))
    return Graph(
        inputs=(x,),
        input_names=("x",),
        nodes=tuple(b.nodes),
        outputs=(y, x),
        output_tree={"dict": [["y", 0], ["z", {"tuple": [1]}]]},
        symbols=(Symbol("s", 1, 32),),
        guards=(Guard(S, "<=", 32, "model.py:3"),),
        constants={"w": np.ones((4, 3), np.float32)},
        name="m",
    )


def _node_index(g: Graph, op: Op) -> int:
    return next(i for i, n in enumerate(g.nodes) if n.op is op)


def _replace_node(g: Graph, i: int, **changes: Any) -> Graph:
    nodes = list(g.nodes)
    nodes[i] = nodes[i].replace(**changes)
    return g.replace(nodes=tuple(nodes))


def _fails(g: Graph, *patterns: str, stage: str = "fold", primitive_only: bool = False) -> str:
    with pytest.raises(VerifyError) as info:
        verify(g, stage, primitive_only=primitive_only)
    msg = str(info.value)
    assert f"after stage '{stage}'" in msg, msg
    for p in patterns:
        assert re.search(p, msg), (p, msg)
    return msg


def test_valid_graph_passes_and_runs() -> None:
    g = _valid()
    verify(g)
    verify(g, "trace")
    outs = run_graph(g, [np.ones((5, 4), np.float32)], {"s": 5})
    tree = unflatten_tree(g.output_tree, outs)
    np.testing.assert_array_equal(tree["y"], np.full((5, 3), 5.0, np.float32))
    assert isinstance(tree["z"], tuple) and tree["z"][0].shape == (5, 4)
    assert graph_ctx(g).known_equal(S, S)


def test_high_level_op_in_a_primitive_graph() -> None:
    g = _valid()
    i = _node_index(g, Op.RELU)
    _fails(g, rf"at node {i} \(relu\)", "high-level op", primitive_only=True)


def test_use_before_definition() -> None:
    g = _valid()
    nodes = list(g.nodes)
    nodes[0], nodes[1] = nodes[1], nodes[0]  # matmul now reads w before the constant node defines it
    _fails(g.replace(nodes=tuple(nodes)), r"at node 0 \(matmul\)", "used before it is defined")


def test_value_defined_twice() -> None:
    g = _valid()
    i = _node_index(g, Op.MATMUL)
    dup = Value(0, g.nodes[i].outputs[0].type)  # reuses the input's id
    _fails(_replace_node(g, i, outputs=(dup,)), rf"at node {i} \(matmul\)", "defined twice")
    x = g.inputs[0]
    _fails(g.replace(inputs=(x, x), input_names=("x", "x2")), "defined twice")


def test_wrong_recorded_output_type() -> None:
    g = _valid()
    i = _node_index(g, Op.MATMUL)
    out = g.nodes[i].outputs[0]
    for bad in (
        TensorType(F32, (S, 5)),
        TensorType(DType.float16, (S, 3)),
        TensorType(F32, (S,)),
        TensorType(F32, (S + 1, 3)),
    ):
        _fails(_replace_node(g, i, outputs=(Value(out.id, bad),)), rf"at node {i} \(matmul\)", "recorded as")


def test_input_type_differs_from_definition() -> None:
    g = _valid()
    i = _node_index(g, Op.MATMUL)
    x = g.nodes[i].inputs[0]
    bad = Value(x.id, TensorType(F32, (S, 5)))
    _fails(_replace_node(g, i, inputs=(bad, g.nodes[i].inputs[1])), rf"at node {i} \(matmul\)", "was defined as")


def test_graph_output_type_differs_from_definition() -> None:
    g = _valid()
    y = g.outputs[0]
    _fails(g.replace(outputs=(Value(y.id, TensorType(F32, (S, 7))), g.outputs[1])), "output %", "was defined as")


def test_missing_or_mismatched_constant() -> None:
    g = _valid()
    _fails(g.replace(constants={}), r"at node 0 \(constant\)", "'w' is missing")
    _fails(g.replace(constants={"w": np.ones((3, 4), np.float32)}), r"at node 0 \(constant\)", r"\(3, 4\)")
    _fails(g.replace(constants={"w": np.ones((4, 3), np.float64)}), r"at node 0 \(constant\)", "float64")
    _fails(g.replace(constants={"w": [[1.0] * 3] * 4}), r"at node 0 \(constant\)", "not a numpy array")


def test_undeclared_symbols() -> None:
    g = _valid()
    _fails(g.replace(symbols=(), guards=()), r"input %0", r"undeclared symbols \['s'\]")
    _fails(g.replace(guards=(Guard(sym("t"), ">", 1),)), "guard", r"undeclared symbols \['t'\]")
    b = Builder(ShapeCtx({"s": (1, 32), "t": (1, 4)}), next_id=100)
    r = b.full(1.0, F32, (S, sym("t")))
    broken = g.replace(nodes=(*g.nodes, *b.nodes), outputs=(*g.outputs, r), output_tree={"list": [0, 1, 2]})
    _fails(broken, rf"at node {len(g.nodes)} \(full\)", r"undeclared symbols \['t'\]")


@pytest.mark.parametrize(
    "tree",
    [
        {"tuple": [0]},  # misses output 1
        {"tuple": [0, 1, 1]},  # names output 1 twice
        {"tuple": [0, 2]},  # past the outputs
        {"set": [0, 1]},  # unknown kind
        {"tuple": [0, True]},  # bool is not an index
        {"dict": [[1, 0], ["b", 1]]},  # non-string key
        {"dict": [["a", 0], ["a", 1]]},  # repeated key
        {"dict": [["a", 0, 1]]},  # item is not a pair
        {"tuple": [0, 1], "list": []},  # two kinds at once
        {"tuple": 5},
        {"list": [0, None]},
        "0",
        None,
        1.0,
    ],
)
def test_bad_output_tree(tree: Any) -> None:
    _fails(_valid().replace(output_tree=tree), "output tree")


def test_deep_but_valid_output_tree_passes_and_hostile_depth_fails() -> None:
    tree: Any = {"list": [0, 1]}
    for _ in range(10):
        tree = {"tuple": [tree]}
    verify(_valid().replace(output_tree=tree))
    for _ in range(100):
        tree = {"tuple": [tree]}
    _fails(_valid().replace(output_tree=tree), "output tree")


def test_duplicate_or_bad_input_names() -> None:
    g = _valid()
    x2 = Value(99, TensorType(F32, (3,)))
    _fails(g.replace(inputs=(g.inputs[0], x2), input_names=("x", "x")), "input names must be unique")
    _fails(g.replace(input_names=()), "one per input")
    for bad in ("", "a\nb", "nul\x00"):  # any printable name is fine ("gpu_0/data_0"); these are not
        _fails(g.replace(input_names=(bad,)), "must be a non-empty string of printable characters")
    verify(g.replace(input_names=("gpu_0/data_0",)))


def test_arity_and_rule_violations_name_the_node() -> None:
    g = _valid()
    i = _node_index(g, Op.ADD)
    _fails(_replace_node(g, i, inputs=g.nodes[i].inputs[:1]), rf"at node {i} \(add\)", "inputs")
    m = _node_index(g, Op.MATMUL)
    _fails(_replace_node(g, m, attrs=Attrs(), inputs=g.nodes[m].inputs[::-1]), rf"at node {m} \(matmul\)")
    c = _node_index(g, Op.CONSTANT)
    _fails(_replace_node(g, c, attrs=Attrs(name="w", shape=None, dtype=F32)), rf"at node {c} \(constant\)", "shape")
    _fails(_replace_node(g, c, op="constant"), rf"at node {c} \('constant'\)", "unknown op")


def test_node_location_is_reported() -> None:
    g = _valid()
    m = _node_index(g, Op.MATMUL)
    _fails(
        _replace_node(g, m, loc="model.py:7", outputs=(Value(g.nodes[m].outputs[0].id, TensorType(F32, (S,))),)),
        "matmul, model.py:7",
    )


def test_bad_symbols_and_guards() -> None:
    g = _valid()
    _fails(g.replace(symbols=(Symbol("s", 1, 32), Symbol("s", 1, 8))), "duplicate symbol")
    _fails(g.replace(symbols=(Symbol("s", 5, 2),)), "bad range")
    _fails(g.replace(symbols=(Symbol("s", 1, 8, 0),)), "multiple_of")
    _fails(g.replace(guards=(Guard(S, "=<", 3),)), "unknown relation")


def test_stage_name_is_optional() -> None:
    g = _valid().replace(constants={})
    with pytest.raises(VerifyError, match=r"^invalid graph at node 0 \(constant\)"):
        verify(g)
