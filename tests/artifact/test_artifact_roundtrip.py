"""Write → read round trips: graphs, attrs of every kind, constants, meta, paths and buffers."""

from __future__ import annotations

import json
import math
import mmap

import numpy as np
import pytest
from artifact_graphs import (
    BOOL,
    F32,
    I64,
    assert_same_graph,
    attr_zoo,
    const,
    high_level_zoo,
    make_graph,
    mlp_source,
)

import aotc
from aotc.artifact import FORMAT_VERSION, SCHEMA_VERSION, describe, read_artifact, save_artifact, write_artifact
from aotc.artifact.layout import SEGMENT_ALIGN
from aotc.errors import ArtifactError, VerifyError
from aotc.ir import Builder, DType, Graph, Guard, Op, Symbol, TensorType, Value, sym
from aotc.ir.evaluate import run_graph
from aotc.lowering.decompose import decompose as lower


@pytest.fixture(scope="module")
def mlp() -> tuple[Graph, Graph]:
    src = mlp_source()
    return lower(src), src


def test_mlp_round_trip(mlp: tuple[Graph, Graph]) -> None:
    variant, source = mlp
    art = read_artifact(write_artifact([variant], source=source, meta={"model": "mlp", "opt": [1, 2]}))
    assert len(art.variants) == 1
    assert_same_graph(art.variants[0].graph, variant)
    assert_same_graph(art.source, source)
    assert art.meta == {"model": "mlp", "opt": [1, 2]}
    assert art.name == "mlp"
    assert art.schema_version == SCHEMA_VERSION and art.format_version == FORMAT_VERSION
    assert art.producer_version == aotc.__version__
    x = np.random.default_rng(1).standard_normal((2, 6, 16)).astype(np.float32)
    env = {"batch": 2, "seq": 6}
    for want, got in zip(run_graph(variant, [x], env), run_graph(art.variants[0].graph, [x], env)):
        np.testing.assert_array_equal(want, got)


def test_every_attr_kind_round_trips_exactly() -> None:
    for g in (attr_zoo(), lower(high_level_zoo())):
        assert_same_graph(read_artifact(write_artifact([g])).variants[0].graph, g)
    src = high_level_zoo()
    back = read_artifact(write_artifact([lower(src)], source=src)).source
    assert_same_graph(back, src)
    attrs = {n.op: n.attrs for n in back.nodes}
    assert attrs[Op.SDPA]["scale"] is None and attrs[Op.SDPA]["is_causal"] is True
    assert attrs[Op.GELU]["approximate"] == "none"
    zoo = read_artifact(write_artifact([attr_zoo()])).variants[0].graph
    values = [n.attrs["value"] for n in zoo.nodes if n.op is Op.FULL]
    assert values[0] == math.inf and values[1] == -math.inf and math.isnan(values[2])
    assert math.copysign(1.0, values[3]) == -1.0
    assert values[4] is True and type(values[5]) is int and values[6] == sym("n") * 2 + 1


def test_graphs_share_one_object_per_distinct_type_and_attrs(mlp: tuple[Graph, Graph]) -> None:
    """The reader builds each distinct type and attr set once, for every graph: what keeps reading and
    verifying thousands of nodes fast."""
    variant, source = mlp
    art = read_artifact(write_artifact([variant], source=source))
    types = [o.type for g in (art.variants[0].graph, art.source) for n in g.nodes for o in n.outputs]
    attrs = [n.attrs for g in (art.variants[0].graph, art.source) for n in g.nodes]
    assert len({id(t) for t in types}) == len(set(types)) < len(types)
    assert len({id(a) for a in attrs}) == len(set(attrs)) < len(attrs)
    g = art.variants[0].graph
    defined = {id(v) for v in g.inputs} | {id(o) for n in g.nodes for o in n.outputs}
    assert all(id(v) in defined for n in g.nodes for v in n.inputs)  # a use is its definition's Value


def test_empty_and_long_graphs_round_trip() -> None:
    identity = make_graph({"x": TensorType(F32, (sym("n"),))}, lambda b, x: [x], symbols=(Symbol("n", 1, 4),))
    assert_same_graph(read_artifact(write_artifact([identity])).variants[0].graph, identity)

    def chain(b: Builder, x: Value) -> list[Value]:
        for i in range(3000):
            x = b.op((Op.NEG, Op.EXP, Op.TANH)[i % 3], x)
        return [x, b.op(Op.REDUCE_SUM, x, axes=(0,), keepdim=True)]

    long = make_graph({"x": TensorType(F32, (sym("n"), 2))}, chain, symbols=(Symbol("n", 1, 4),))
    assert_same_graph(read_artifact(write_artifact([long])).variants[0].graph, long)


def test_variants_share_constants_by_name(mlp: tuple[Graph, Graph]) -> None:
    variant, source = mlp
    small = variant.replace(symbols=(Symbol("batch", 1, 2), Symbol("seq", 2, 64, multiple_of=2)), name="small")
    art = read_artifact(write_artifact([small, variant], source=source))
    assert [g.name for g in art.variants] == ["small", "mlp"]
    assert len(art.constants) == 3
    assert art.variants[0].graph.constants["fc1.weight"] is art.variants[1].graph.constants["fc1.weight"]
    assert art.source.constants["fc2.weight"] is art.constants["fc2.weight"]


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(6, dtype=np.int64).reshape(2, 3) - 3,
        np.array([True, False, True]),
        np.array(2.5, dtype=np.float16),
        np.zeros((0, 4), dtype=np.int32),
        np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
        np.arange(10, dtype=np.float32)[::2],
    ],
    ids=["int64", "bool", "f16-0d", "empty", "fortran", "strided"],
)
def test_constant_dtypes_and_layouts(arr: np.ndarray) -> None:
    g = make_graph({}, lambda b: [const(b, "c", arr)], constants={"c": arr})
    back = read_artifact(write_artifact([g])).constants["c"]
    assert back.dtype == arr.dtype and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)
    assert not back.flags.writeable


def test_bfloat16_constant() -> None:
    arr = np.array([1.5, -2.0, 3.25], dtype=DType.bfloat16.np)
    g = make_graph({}, lambda b: [const(b, "c", arr)], constants={"c": arr})
    back = read_artifact(write_artifact([g])).constants["c"]
    assert back.dtype == arr.dtype
    assert back.tobytes() == arr.tobytes()


def test_save_maps_constants_zero_copy(tmp_path, mlp: tuple[Graph, Graph]) -> None:
    variant, source = mlp
    path = tmp_path / "m.aotc"
    save_artifact(path, [variant], source=source)
    data = path.read_bytes()
    assert data == write_artifact([variant], source=source)
    for src in (path, str(path)):
        art = read_artifact(src)
        assert art.path == str(path) and art.file_size == len(data)
        for arr in art.constants.values():
            assert not arr.flags.writeable
            assert arr.ctypes.data % SEGMENT_ALIGN == 0
            base = arr
            while isinstance(base, np.ndarray):
                base = base.base
            assert isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)
    assert not list(tmp_path.glob("*.tmp*"))


def test_reads_from_buffers(mlp: tuple[Graph, Graph]) -> None:
    data = write_artifact([mlp[0]])
    for buf in (data, bytearray(data), memoryview(data)):
        art = read_artifact(buf)
        assert art.path is None and art.source is None
    mutable = bytearray(data)
    art = read_artifact(mutable)
    mutable[:] = bytes(len(mutable))  # the reader took a snapshot
    assert art.constants["fc1.weight"].any()


def test_segments_are_aligned_and_padding_is_zero(mlp: tuple[Graph, Graph]) -> None:
    data = write_artifact([mlp[0]])
    art = read_artifact(data)
    assert len(data) % SEGMENT_ALIGN == len(art.constants["fc2.weight"].tobytes()) % SEGMENT_ALIGN
    assert art.weight_bytes == sum(a.nbytes for a in mlp[0].constants.values())


def test_describe_is_json(mlp: tuple[Graph, Graph]) -> None:
    variant, source = mlp
    d = describe(read_artifact(write_artifact([variant], source=source, meta={"k": "v"})))
    assert json.loads(json.dumps(d)) == d
    assert d["checksums"] == "ok" and d["model_name"] == "mlp"
    assert d["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", "seq", "16"]}]
    assert d["outputs"][2] == {"index": 2, "dtype": "float32", "shape": ["batch"]}
    assert d["symbols"][1] == {"name": "seq", "min": 2, "max": 64, "multiple_of": 2}
    assert d["guards"] == [{"guard": "seq <= 48", "loc": "model.py:12"}]
    assert d["variants"][0]["op_counts"] == variant.op_counts()
    assert d["source"]["op_counts"]["linear"] == 2
    assert d["constants"] == 3 and d["weight_bytes"] == (32 * 16 + 32 + 16 * 32) * 4
    assert d["file_size"] % SEGMENT_ALIGN == (16 * 32 * 4) % SEGMENT_ALIGN
    assert d["schema_version"] == SCHEMA_VERSION and d["meta"] == {"k": "v"}


# -- the writer refuses what it can't store ---------------------------------------------------------


def test_writer_rejects_bad_input(mlp: tuple[Graph, Graph]) -> None:
    variant, source = mlp
    with pytest.raises(ArtifactError, match="non-empty sequence"):
        write_artifact([])
    with pytest.raises(ArtifactError, match="non-empty sequence"):
        write_artifact(variant)  # type: ignore[arg-type]
    with pytest.raises(ArtifactError, match="expected a Variant or a Graph"):
        write_artifact([variant, "x"])  # type: ignore[list-item]
    with pytest.raises(VerifyError, match="high-level op"):
        write_artifact([source])
    with pytest.raises(ArtifactError, match="JSON"):
        write_artifact([variant], meta={"f": object()})
    with pytest.raises(ArtifactError, match="JSON"):
        write_artifact([variant], meta={"nan": math.nan})
    with pytest.raises(ArtifactError, match="mapping"):
        write_artifact([variant], meta=[1])  # type: ignore[arg-type]


def test_writer_rejects_mismatched_variants(mlp: tuple[Graph, Graph]) -> None:
    variant = mlp[0]
    other = make_graph({"y": TensorType(F32, (3,))}, lambda b, y: [y])
    with pytest.raises(ArtifactError, match="variant 1 does not match"):
        write_artifact([variant, other])


def test_writer_rejects_conflicting_constants() -> None:
    a, b = np.zeros(3, np.float32), np.ones(3, np.float32)
    g1 = make_graph({}, lambda bl: [const(bl, "w", a)], constants={"w": a})
    g2 = make_graph({}, lambda bl: [const(bl, "w", b)], constants={"w": b})
    with pytest.raises(ArtifactError, match="different arrays"):
        write_artifact([g1, g2])
    same = make_graph({}, lambda bl: [const(bl, "w", a.copy())], constants={"w": a.copy()})
    assert len(read_artifact(write_artifact([g1, same])).constants) == 1


def test_writer_rejects_values_out_of_range() -> None:
    g = make_graph({}, lambda b: [b.full(2**70, I64, ())])
    with pytest.raises(ArtifactError, match="64 bits"):
        write_artifact([g])


def test_writer_rejects_bad_output_tree(mlp: tuple[Graph, Graph]) -> None:
    for tree in ({"set": [0, 1, 2]}, {"tuple": [0, 1, 1]}, {"dict": [["a", 0], ["a", 1], ["b", 2]]}, [0, 1, 2]):
        with pytest.raises((VerifyError, ArtifactError), match="output tree"):
            write_artifact([mlp[0].replace(output_tree=tree)])


def test_symbolic_guards_and_symbols_round_trip() -> None:
    n, m = sym("n"), sym("m")
    g = make_graph(
        {"x": TensorType(BOOL, (n, m * 4))},
        lambda b, x: [b.op(Op.NOT, x)],
        symbols=(Symbol("n", 0, 2**40), Symbol("m", 1, 9, multiple_of=3)),
        guards=(Guard(n * m, ">", 2, "a.py:1"), Guard(n % 4, "==", 0), Guard(m // 3 + n, "<", 2**40)),
    )
    assert_same_graph(read_artifact(write_artifact([g])).variants[0].graph, g)


def test_offsets_and_lengths_are_64_bit() -> None:
    """Segments past 4 GiB (the weights of a large model) keep exact offsets and lengths."""
    from aotc.artifact.decode import Decoder
    from aotc.artifact.encode import Header, SegmentEntry, encode_artifact

    far = SegmentEntry(offset=5 << 30, length=(3 << 30) + 7, checksum=bytes(range(16)))
    fb = encode_artifact(Header(SCHEMA_VERSION, "0", "big", "{}"), [], None, [], [far])
    (seg,) = Decoder(fb).segments()
    assert (seg.offset, seg.length, seg.checksum) == (far.offset, far.length, far.checksum)


def test_only_canonical_expressions_are_parsed() -> None:
    """A product of sums (never written by aotc) could take very long to expand, so the reader refuses it; and any
    other text than the writer's for an expression (the terms in another order, a stray space), so that a file the
    reader accepts is one the writer writes byte for byte."""
    from aotc.artifact.tables import expr

    assert expr("(+ (// (+ a 3) 4) (* 2 a))", "dim") == sym("a") * 2 + (sym("a") + 3) // 4
    for other in ("(+ (* 2 a) (// (+ a 3) 4))", "48 ", "(+ a  1)"):
        with pytest.raises(ArtifactError, match="not written as the writer writes it"):
            expr(other, "dim")
    with pytest.raises(ArtifactError, match="canonical"):
        expr("(* (+ a b) (+ c d))", "dim")
    with pytest.raises(ArtifactError, match="too long"):
        expr("(+ " + "a " * 3000 + ")", "dim")
