"""aotc's own ONNX writer (aotc/ir/onnx_form/) against the onnx package: its type table says what onnx.defs says at
the export opset, and the protobuf it writes parses back to the same fields."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from aotc.errors import UnsupportedError
from aotc.ir import Builder, Graph, Symbol, TensorType, sym
from aotc.ir.dtypes import DType
from aotc.ir.onnx_form import build_model, proto
from aotc.ir.onnx_form.emitters import _BINARY, _UNARY
from aotc.ir.onnx_form.opset import DTYPE_TO_ONNX, EXPORT_OPSET, FIRST_INPUT_TYPES, IR_VERSION, accepts
from aotc.ir.ops import Op
from aotc.ir.verify import graph_ctx

# The op types the emitters ask ``accepts`` about: every one written through emitters._simple.
ASKED = {*_UNARY.values(), *_BINARY.values(), "Mod", "MatMul"} | {
    f"Reduce{r}" for r in ("Sum", "Max", "Min", "Prod", "Mean")
}


def onnx_types(op_type: str) -> frozenset[DType]:
    schema = onnx.defs.get_schema(op_type, EXPORT_OPSET)
    type_str = schema.inputs[0].type_str
    allowed = next((c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == type_str), [type_str])
    names = {
        onnx.helper.tensor_dtype_to_string(e).lower().replace("tensorproto.", ""): d for d, e in DTYPE_TO_ONNX.items()
    }
    return frozenset(d for name, d in names.items() if f"tensor({name})" in allowed)


@pytest.mark.parametrize("op_type", sorted(FIRST_INPUT_TYPES))
def test_the_type_table_is_what_onnx_defs_says_at_the_export_opset(op_type: str) -> None:
    assert FIRST_INPUT_TYPES[op_type] == onnx_types(op_type)


def test_the_table_covers_every_op_type_the_emitters_ask_about() -> None:
    assert ASKED <= set(FIRST_INPUT_TYPES)
    with pytest.raises(UnsupportedError, match="'Gelu' is not in aotc's table"):
        accepts("Gelu", DType.float16)


def test_the_ir_version_is_the_oldest_that_imports_the_export_opset() -> None:
    assert IR_VERSION == onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", EXPORT_OPSET)])


def test_written_messages_parse_back_to_the_same_fields() -> None:
    attrs = {"axis": -1, "epsilon": 1e-5, "mode": "constant", "perm": [2, -1, 0], "scales": [0.5, 2.0], "empty": []}
    node = proto.node("Op", ["a", ""], ["b"], "op_1", attrs)
    weight = np.arange(6, dtype=np.int64).reshape(2, 3) - 3
    body = proto.graph(
        "g",
        [node],
        [proto.value_info("x", 1, ["batch", 3]), proto.value_info("s", 7, [])],
        [proto.value_info("b", 9, [2])],
        [proto.tensor("w", weight, 7), proto.tensor("big", weight, 7, external=("w.data", 4096))],
    )
    blob = proto.model(body, ir_version=8, opset=18, producer=("aotc", "1.2"), metadata={"k": "v"}).tobytes()
    m = onnx.load_model_from_string(blob)
    assert (m.ir_version, m.producer_name, m.producer_version) == (8, "aotc", "1.2")
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 18)]
    assert {p.key: p.value for p in m.metadata_props} == {"k": "v"}
    (n,) = m.graph.node
    assert (n.op_type, n.name, list(n.input), list(n.output)) == ("Op", "op_1", ["a", ""], ["b"])
    got = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
    assert got == {**attrs, "epsilon": pytest.approx(1e-5), "mode": b"constant"}
    assert onnx.AttributeProto.INTS == next(a.type for a in n.attribute if a.name == "empty")
    x, s = m.graph.input
    assert [d.dim_param or d.dim_value for d in x.type.tensor_type.shape.dim] == ["batch", 3]
    assert s.type.tensor_type.HasField("shape") and not s.type.tensor_type.shape.dim  # a scalar, not an unknown rank
    inline, external = m.graph.initializer
    np.testing.assert_array_equal(numpy_helper.to_array(inline), weight)
    assert external.data_location == onnx.TensorProto.EXTERNAL and list(external.dims) == [2, 3]
    assert {e.key: e.value for e in external.external_data} == {"location": "w.data", "offset": "4096", "length": "48"}


# -- what build_model writes for the runtime's session -------------------------------------------------------------
def _matmul_graph(transposed: bool) -> Graph:
    """``x @ w`` (or ``x @ w.T``, a tied lm head) for ``x`` of shape (batch, 3, 8)."""
    symbols = (Symbol("batch", 1, 8),)
    b = Builder(graph_ctx(Graph((), (), (), (), 0, symbols)))
    x = b.new_value(TensorType(DType.float32, (sym("batch"), 3, 8)))
    w = b.op(Op.CONSTANT, name="w", shape=(4, 8) if transposed else (8, 4), dtype=DType.float32)
    y = b.op(Op.MATMUL, x, b.permute(w, (1, 0)) if transposed else w)
    weight = np.zeros((4, 8) if transposed else (8, 4), np.float32)
    return Graph((x,), ("x",), tuple(b.nodes), (y,), 0, symbols, (), {"w": weight})


@pytest.mark.parametrize("transposed", [False, True])
def test_a_batched_matmul_by_a_weight_the_session_holds_is_one_plain_matmul(transposed: bool) -> None:
    g = _matmul_graph(transposed)
    held = onnx.load_model_from_string(build_model(g, weights_as_inputs=True, session_weights={"w"}).model)
    assert "Reshape" not in [n.op_type for n in held.graph.node]
    # a weight bound as an input each call: one GEMM over every row, as onnxruntime runs a batched MatMul per batch
    bound = onnx.load_model_from_string(build_model(g, weights_as_inputs=True).model)
    assert [n.op_type for n in bound.graph.node if n.op_type in ("Reshape", "MatMul")] == [
        "Reshape",
        "MatMul",
        "Reshape",
    ]


def _positions_graph(rows: int) -> Graph:
    """``table[arange(s)]`` with s in [1, 16]."""
    symbols = (Symbol("s", 1, 16),)
    b = Builder(graph_ctx(Graph((), (), (), (), 0, symbols)))
    x = b.new_value(TensorType(DType.float32, (sym("s"),)))
    table = b.op(Op.CONSTANT, name="table", shape=(rows, 4), dtype=DType.float32)
    y = b.op(Op.GATHER, table, b.op(Op.IOTA, shape=(sym("s"),), axis=0, dtype=DType.int64), axis=0)
    return Graph((x,), ("x",), tuple(b.nodes), (y,), 0, symbols, (), {"table": np.zeros((rows, 4), np.float32)})


def test_computed_ids_get_bound_outputs_only_when_the_graph_cannot_prove_them_valid() -> None:
    proved = build_model(_positions_graph(rows=16), weights_as_inputs=True, id_bounds=True)
    assert proved.id_bounds == () and len(onnx.load_model_from_string(proved.model).graph.output) == 1
    unproved = build_model(_positions_graph(rows=15), weights_as_inputs=True, id_bounds=True)  # s = 16 reads row 15
    (bound,) = unproved.id_bounds
    assert bound.outputs == (1, 2) and bound.size == 15
    assert len(onnx.load_model_from_string(unproved.model).graph.output) == 3


def test_fresh_names_skip_every_name_taken_and_do_not_search_from_the_start_each_time() -> None:
    from aotc.ir.onnx_form.context import unique

    taken: set[str] = set()
    tried: dict[str, int] = {}
    assert [unique("a", taken, tried) for _ in range(3)] == ["a", "a_2", "a_3"]
    taken.add("a_5")  # taken by another route (an output's name)
    assert [unique("a", taken, tried) for _ in range(2)] == ["a_4", "a_6"]
    assert unique("b", taken, tried) == "b"
    probes = 0

    class Counting(set):
        def __contains__(self, x: object) -> bool:
            nonlocal probes
            probes += 1
            return super().__contains__(x)

    many, tried = Counting(), {}
    for _ in range(2000):
        unique("x", many, tried)
    assert probes < 3 * 2000  # linear: a search from x_2 each time would probe ~2 million times
