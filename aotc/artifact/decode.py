"""A FlatBuffer (schema.fbs) back into graphs, checking every index, enum, name and expression on the way.

Only the reader uses this. The shared tables (strings, types, attrs) are decoded once each; a graph's
node columns are read as numpy arrays, range-checked as whole arrays, and then turned into nodes in
one tight loop. Errors are ArtifactError naming the part of the file that is wrong; the reader turns
anything else the FlatBuffers runtime raises on a malformed buffer into ArtifactError too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from aotc.artifact import fbtable
from aotc.artifact.canonical import InterningOrder
from aotc.artifact.checks import check_output_tree
from aotc.artifact.generated.Artifact import Artifact as FbArtifact
from aotc.artifact.layout import SCHEMA_VERSION, segment_digest_size
from aotc.artifact.pacing import pace
from aotc.artifact.tables import Tables, check_indices, column, decode_tables, dtype, expr, text
from aotc.errors import ArtifactError, ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, Guard, State, Symbol
from aotc.ir.ops import Op
from aotc.ir.state import StateProblem, state_chains
from aotc.ir.symbolic import sym
from aotc.ir.types import Node, Value

# Everything this module decodes was verified by verify_flatbuffer first, so the generated readers may skip the
# flatbuffers package's per-read checks (fbtable.py).
fbtable.install()

# The first schema with the ONNX model for onnxruntime (Artifact.onnx).
ONNX_VERSION = 7
# The first schema with Variant tables (Artifact.variants: a graph and its plan each).
VARIANT_VERSION = 9
# The first schema with states (Graph.states).
STATE_VERSION = 10
# aotc.__version__, as the writer stores it (PEP 440 characters)
_VERSION = re.compile(r"[0-9A-Za-z.+!_-]{1,64}")


@dataclass(frozen=True)
class SegmentInfo:
    offset: int  # from the data start
    length: int
    checksum: bytes


@dataclass(frozen=True)
class ConstantInfo:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    segment: int


class Decoder:
    """Reads one FlatBuffer; ``size`` bounds every vector length before it is iterated."""

    def __init__(self, buf: bytes, schema_version: int = SCHEMA_VERSION) -> None:
        self.buf = buf
        self.size = len(buf)
        self.version = schema_version
        self.root = FbArtifact.GetRootAs(buf, 0)

    # -- header ------------------------------------------------------------------------------
    def schema_version(self) -> int:
        return int(self.root.SchemaVersion())

    def producer_version(self) -> str:
        v = text(self.root.ProducerVersion(), "producer version")
        if not _VERSION.fullmatch(v):
            raise ArtifactError(f"producer version {v[:80]!r} is not a version number")
        return v

    def model_name(self) -> str:
        return text(self.root.ModelName(), "model name")

    def meta(self) -> dict[str, Any]:
        raw = text(self.root.MetaJson(), "meta")
        try:
            meta = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise ArtifactError(f"artifact meta is not valid JSON: {e}") from None
        if not isinstance(meta, dict):
            raise ArtifactError(f"artifact meta must be a JSON object, got {type(meta).__name__}")
        return meta

    # -- segments and constants --------------------------------------------------------------
    def segments(self) -> list[SegmentInfo]:
        out = []
        for i in range(self.count(self.root.SegmentsLength(), "segments")):
            s = self.root.Segments(i)
            digest = column(s.ChecksumAsNumpy(), np.uint8)
            want = segment_digest_size(self.version)
            if len(digest) != want:
                raise ArtifactError(f"segment {i} has a {len(digest)}-byte checksum, expected {want}")
            out.append(SegmentInfo(int(s.Offset()), int(s.Length()), digest.tobytes()))
        return out

    def constants(self, n_segments: int) -> list[ConstantInfo]:
        out: list[ConstantInfo] = []
        names: set[str] = set()
        used: set[int] = set()
        for i in range(self.count(self.root.ConstantsLength(), "constants")):
            c = self.root.Constants(i)
            name = text(c.Name(), f"constant {i} name")
            what = f"constant {name!r}"
            if name in names:
                raise ArtifactError(f"{what} is listed twice")
            shape = tuple(column(c.ShapeAsNumpy(), np.int64).tolist())
            if any(d < 0 for d in shape):
                raise ArtifactError(f"{what} has a negative dim in {shape}")
            seg = int(c.Segment())
            if not 0 <= seg < n_segments:
                raise ArtifactError(f"{what} points at segment {seg}, but the file has {n_segments}")
            if seg in used:
                raise ArtifactError(f"{what} shares segment {seg} with another constant")
            names.add(name)
            used.add(seg)
            out.append(ConstantInfo(name, dtype(c.Dtype(), what), shape, seg))
        return out

    # -- graphs ------------------------------------------------------------------------------
    @cached_property
    def tables(self) -> Tables:
        return decode_tables(self.root, self.count)

    @cached_property
    def order(self) -> InterningOrder:
        return InterningOrder(self.tables)

    def check_all_used(self) -> None:
        """Call after decoding every graph, in file order: every shared-table entry was used, and first
        used in the order the writer interns them (canonical.py)."""
        self.order.finish()

    def variants(self) -> list[tuple[Any, Any | None]]:
        """Each variant's Graph table and its plan's Schedule table (None: no plan), from where this file's schema
        version keeps them: the Variant tables (schema >= 9), else the graphs with their ``schedule`` (3-8)."""
        r = self.root
        if self.version >= VARIANT_VERSION:
            if not r.VariantGraphsIsNone():
                raise ArtifactError(
                    f"a schema version {self.version} file holds its variants' graphs in the schema 1-8 list"
                )
            if r.VariantsIsNone():
                raise ArtifactError(f"the variants list is required from schema {VARIANT_VERSION}")
            out = []
            for i in range(self.count(r.VariantsLength(), "variants")):
                v = r.Variants(i)
                g = v.Graph()
                if g.Schedule() is not None:
                    raise ArtifactError(
                        f"variant {i}: its graph has a schedule (from schema {VARIANT_VERSION}: its plan)"
                    )
                out.append((g, v.Plan()))
            return out
        if not r.VariantsIsNone():
            raise ArtifactError(f"a schema version {self.version} file holds schema {VARIANT_VERSION} variant tables")
        if r.VariantGraphsIsNone():
            raise ArtifactError(f"the variant graphs are required before schema {VARIANT_VERSION}")
        graphs = [r.VariantGraphs(i) for i in range(self.count(r.VariantGraphsLength(), "variant graphs"))]
        return [(g, g.Schedule() if self.version >= 3 else None) for g in graphs]

    def source(self) -> Any | None:
        return self.root.Source()

    def onnx(self) -> bytes | None:
        """The ONNX model the file stores for tools (schema >= 7), or None."""
        if self.root.OnnxIsNone():
            return None
        if self.version < ONNX_VERSION:
            raise ArtifactError(f"a schema version {self.version} file holds a schema {ONNX_VERSION} onnx model")
        data = self.root.OnnxAsNumpy()
        if len(data) == 0:
            raise ArtifactError("the onnx model is empty (a file without one leaves the field out)")
        return data.tobytes()

    def graph(self, g: Any, constants: list[tuple[str, np.ndarray]], what: str) -> Graph:
        t = self.tables
        name = text(g.Name(), f"{what} name")
        in_ids = column(g.InputIdsAsNumpy(), np.int64)
        in_types = column(g.InputTypesAsNumpy(), np.uint32)
        n_in = len(in_ids)
        if len(in_types) != n_in or g.InputNamesLength() != n_in:
            raise ArtifactError(
                f"{what} has {n_in} input ids, {len(in_types)} input types and {g.InputNamesLength()} input names"
            )
        input_names = tuple(text(g.InputNames(i), f"{what} input name {i}") for i in range(n_in))
        check_indices(in_types, len(t.types), f"{what} input", "type")
        values: dict[int, Value] = {}
        inputs = tuple(Value(vid, t.types[k]) for vid, k in zip(in_ids.tolist(), in_types.tolist()))
        for v in inputs:
            if values.setdefault(v.id, v) is not v:
                raise ArtifactError(f"{what}: input value %{v.id} is defined a second time")
        nodes = self._nodes(g, values, what, in_types.tolist())
        outputs = tuple(_use(values, vid, f"{what} output") for vid in column(g.OutputsAsNumpy(), np.int64).tolist())
        symbols = tuple(
            self._symbol(g.Symbols(i), what) for i in range(self.count(g.SymbolsLength(), f"{what} symbols"))
        )
        guards = tuple(self._guard(g.Guards(i), what) for i in range(self.count(g.GuardsLength(), f"{what} guards")))
        held: dict[str, np.ndarray] = {}
        for idx in column(g.ConstantsAsNumpy(), np.uint32).tolist():
            if idx >= len(constants):
                raise ArtifactError(f"{what} holds constant {idx}, but the file has {len(constants)}")
            cname, arr = constants[idx]
            if cname in held:
                raise ArtifactError(f"{what} holds constant {cname!r} twice")
            held[cname] = arr
        states, writers = self._states(g, constants, held, input_names, len(outputs), what)
        tree = output_tree(text(g.OutputTreeJson(), f"{what} output tree"), len(outputs) - len(states), what)
        graph = Graph(inputs, input_names, nodes, outputs, tree, symbols, guards, held, name, states)
        if states:
            try:
                derived = [c.writers for c in state_chains(graph)]
            except StateProblem as e:
                raise ArtifactError(f"{what}: {e}") from None
            for st, stored, want in zip(states, writers, derived):
                if stored != want:
                    raise ArtifactError(
                        f"{what}: state {st.name!r} lists writers {list(stored)}, but its writes are the nodes "
                        f"{list(want)}"
                    )
        return graph

    def _states(
        self,
        g: Any,
        constants: list[tuple[str, np.ndarray]],
        held: dict[str, np.ndarray],
        input_names: tuple[str, ...],
        n_outputs: int,
        what: str,
    ) -> tuple[tuple[State, ...], list[tuple[int, ...]]]:
        """The graph's states (schema >= 10) and the writers each lists."""
        if g.StatesIsNone():
            return (), []
        if self.version < STATE_VERSION:
            raise ArtifactError(f"{what}: a schema version {self.version} file holds schema {STATE_VERSION} states")
        n = self.count(g.StatesLength(), f"{what} states")
        if n == 0:
            raise ArtifactError(f"{what} has an empty states list (a graph without states leaves it out)")
        if n > min(len(input_names), n_outputs):
            raise ArtifactError(f"{what} has {n} states but {len(input_names)} inputs and {n_outputs} outputs")
        states, writers = [], []
        for i in range(n):
            s = g.States(i)
            idx = int(s.Initial())
            if idx >= len(constants) or constants[idx][0] not in held:
                raise ArtifactError(
                    f"{what} state {i}: its initial value is constant {idx}, which the graph does not hold"
                )
            states.append(State(input_names[len(input_names) - n + i], constants[idx][0]))
            writers.append(tuple(column(s.WritersAsNumpy(), np.uint32).tolist()))
        return tuple(states), writers

    def _nodes(self, g: Any, values: dict[int, Value], what: str, in_types: list[int]) -> tuple[Node, ...]:
        """The node columns, each range-checked whole, then the nodes in one loop over Python lists."""
        t = self.tables
        ops = column(g.NodeOpsAsNumpy(), np.uint32)
        n = len(ops)
        in_counts = column(g.NodeInputCountsAsNumpy(), np.uint32)
        out_counts = column(g.NodeOutputCountsAsNumpy(), np.uint32)
        attrs = column(g.NodeAttrsAsNumpy(), np.uint32)
        locs = column(g.NodeLocsAsNumpy(), np.uint32)
        if not len(in_counts) == len(out_counts) == len(attrs) == len(locs) == n:
            raise ArtifactError(f"{what}: the node columns have different lengths")
        ins = column(g.NodeInputsAsNumpy(), np.int64)
        out_ids = column(g.NodeOutputIdsAsNumpy(), np.int64)
        out_types = column(g.NodeOutputTypesAsNumpy(), np.uint32)
        in_ends = np.cumsum(in_counts, dtype=np.int64)
        out_ends = np.cumsum(out_counts, dtype=np.int64)
        n_ins, n_outs = (int(in_ends[-1]), int(out_ends[-1])) if n else (0, 0)
        if n_ins != len(ins):
            raise ArtifactError(f"{what}: the nodes' input counts add up to {n_ins}, not {len(ins)}")
        if not n_outs == len(out_ids) == len(out_types):
            raise ArtifactError(
                f"{what}: the nodes' output counts add up to {n_outs}, but there are {len(out_ids)} output ids"
                f" and {len(out_types)} output types"
            )
        check_indices(ops, len(t.strings), f"{what} node", "op")
        check_indices(attrs, len(t.attr_sets), f"{what} node", "attr set")
        check_indices(locs, len(t.strings), f"{what} node", "loc")
        check_indices(out_types, len(t.types), f"{what} node output", "type")
        op_of: dict[int, Op] = {}
        for k in np.unique(ops).tolist():
            try:
                op_of[k] = Op(t.strings[k])
            except ValueError:
                raise ArtifactError(f"{what} node {int(np.argmax(ops == k))} has unknown op {t.strings[k]!r}") from None

        types, strings, sets = t.types, t.strings, t.attr_sets
        ins_l, out_ids_l, out_types_l = ins.tolist(), out_ids.tolist(), out_types.tolist()
        nodes = []
        a = p = 0
        ops_l, out_ends_l, attrs_l, locs_l = ops.tolist(), out_ends.tolist(), attrs.tolist(), locs.tolist()
        self.order.graph(ops_l, out_ends_l, out_types_l, attrs_l, locs_l, in_types)
        columns = zip(ops_l, in_ends.tolist(), out_ends_l, attrs_l, locs_l)
        for i, (k, b, q, attr_set, loc) in enumerate(columns):
            if not i % 128:
                pace()  # see aotc/artifact/pacing.py
            try:
                node_ins = tuple([values[vid] for vid in ins_l[a:b]])
            except KeyError as e:
                raise ArtifactError(
                    f"{what} node {i} ({op_of[k].value}) uses value %{e.args[0]}, which is not defined before it"
                ) from None
            outs = tuple([Value(vid, types[ty]) for vid, ty in zip(out_ids_l[p:q], out_types_l[p:q])])
            for o in outs:
                if values.setdefault(o.id, o) is not o:
                    raise ArtifactError(f"{what} node {i} ({op_of[k].value}) defines value %{o.id} a second time")
            nodes.append(Node(op_of[k], node_ins, outs, sets[attr_set], strings[loc]))
            a, p = b, q
        return tuple(nodes)

    def _symbol(self, s: Any, what: str) -> Symbol:
        name = text(s.Name(), f"{what} symbol name")
        try:
            sym(name)
        except ShapeError as e:
            raise ArtifactError(f"{what}: {e}") from None
        return Symbol(name, int(s.Min()), int(s.Max()), int(s.MultipleOf()))

    def _guard(self, g: Any, what: str) -> Guard:
        what = f"{what} guard"
        lhs, rhs = (expr(text(x, what), what) for x in (g.Lhs(), g.Rhs()))
        return Guard(lhs, text(g.Rel(), what), rhs, text(g.Loc(), what))

    def count(self, n: int, what: str) -> int:
        # Every element takes at least 4 bytes, so a longer vector must be a corrupted length.
        if not 0 <= n <= self.size // 4:
            raise ArtifactError(f"{what}: vector length {n} does not fit in a {self.size}-byte FlatBuffer")
        return n


# -- small readers -------------------------------------------------------------------------------


def _use(values: dict[int, Value], vid: int, what: str) -> Value:
    v = values.get(vid)
    if v is None:
        raise ArtifactError(f"{what} uses value %{vid}, which is not defined")
    return v


def output_tree(raw: str, n_outputs: int, what: str) -> Any:
    try:
        tree = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ArtifactError(f"{what} output tree is not valid JSON: {e}") from None
    check_output_tree(tree, n_outputs, ArtifactError, what)
    return tree
