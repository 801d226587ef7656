"""A FlatBuffer (schema.fbs) back into graphs, checking every index, enum, name and expression on the way.

Only the reader uses this. Errors are ArtifactError naming the part of the file that is wrong; the
reader turns anything else the FlatBuffers runtime raises on a malformed buffer into ArtifactError too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.artifact.checks import check_output_tree
from aotc.artifact.generated.Artifact import Artifact as FbArtifact
from aotc.artifact.generated.ValueKind import ValueKind
from aotc.artifact.layout import DIGEST_SIZE, DTYPES_BY_CODE, MAX_ATTR_DEPTH
from aotc.errors import ArtifactError, ShapeError
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, Guard, Symbol
from aotc.ir.ops import Op
from aotc.ir.symbolic import SymExpr, parse, sym
from aotc.ir.types import Attrs, Node, TensorType, Value

# Canonical expressions are short; a cap keeps a hostile file from making the parser do heavy work.
MAX_SEXPR_CHARS = 4096
_PAREN = re.compile(r"\(\s*([^\s()]*)|\)")


@dataclass(frozen=True)
class SegmentInfo:
    offset: int
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

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.size = len(buf)
        self.root = FbArtifact.GetRootAs(buf, 0)

    # -- header ------------------------------------------------------------------------------
    def schema_version(self) -> int:
        return int(self.root.SchemaVersion())

    def producer_version(self) -> str:
        return text(self.root.ProducerVersion(), "producer version")

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
            digest = ints(s.ChecksumIsNone(), s.ChecksumAsNumpy)
            if len(digest) != DIGEST_SIZE:
                raise ArtifactError(f"segment {i} has a {len(digest)}-byte checksum, expected {DIGEST_SIZE}")
            out.append(SegmentInfo(int(s.Offset()), int(s.Length()), bytes(digest)))
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
            shape = tuple(ints(c.ShapeIsNone(), c.ShapeAsNumpy))
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
    def variants(self) -> list[Any]:
        return [self.root.Variants(i) for i in range(self.count(self.root.VariantsLength(), "variants"))]

    def source(self) -> Any | None:
        return self.root.Source()

    def graph(self, g: Any, constants: Sequence[tuple[str, np.ndarray]], what: str) -> Graph:
        name = text(g.Name(), f"{what} name")
        n_in = self.count(g.InputsLength(), f"{what} inputs")
        if g.InputNamesLength() != n_in:
            raise ArtifactError(f"{what} has {n_in} inputs but {g.InputNamesLength()} input names")
        input_names = tuple(text(g.InputNames(i), f"{what} input name {i}") for i in range(n_in))
        types: dict[int, TensorType] = {}
        inputs = tuple(self._define(g.Inputs(i), types, f"{what} input {i}") for i in range(n_in))
        nodes = tuple(
            self._node(g.Nodes(i), types, f"{what} node {i}")
            for i in range(self.count(g.NodesLength(), f"{what} nodes"))
        )
        outputs = tuple(self._use(vid, types, f"{what} output") for vid in ints(g.OutputsIsNone(), g.OutputsAsNumpy))
        tree = output_tree(text(g.OutputTreeJson(), f"{what} output tree"), len(outputs), what)
        symbols = tuple(
            self._symbol(g.Symbols(i), what) for i in range(self.count(g.SymbolsLength(), f"{what} symbols"))
        )
        guards = tuple(self._guard(g.Guards(i), what) for i in range(self.count(g.GuardsLength(), f"{what} guards")))
        held: dict[str, np.ndarray] = {}
        for idx in ints(g.ConstantsIsNone(), g.ConstantsAsNumpy):
            if not 0 <= idx < len(constants):
                raise ArtifactError(f"{what} holds constant {idx}, but the file has {len(constants)}")
            cname, arr = constants[idx]
            if cname in held:
                raise ArtifactError(f"{what} holds constant {cname!r} twice")
            held[cname] = arr
        return Graph(inputs, input_names, nodes, outputs, tree, symbols, guards, held, name)

    def _define(self, v: Any, types: dict[int, TensorType], what: str) -> Value:
        if v is None:
            raise ArtifactError(f"{what} is missing")
        vid = int(v.Id())
        if vid in types:
            raise ArtifactError(f"{what}: value %{vid} is defined twice")
        t = v.Type()
        if t is None:
            raise ArtifactError(f"{what}: value %{vid} has no type")
        shape = tuple(
            dim(text(t.Shape(i), f"{what} shape"), f"{what} shape")
            for i in range(self.count(t.ShapeLength(), f"{what} shape"))
        )
        types[vid] = TensorType(dtype(t.Dtype(), what), shape)
        return Value(vid, types[vid])

    def _use(self, vid: int, types: dict[int, TensorType], what: str) -> Value:
        if vid not in types:
            raise ArtifactError(f"{what} uses value %{vid}, which is not defined before it")
        return Value(vid, types[vid])

    def _node(self, n: Any, types: dict[int, TensorType], what: str) -> Node:
        if n is None:
            raise ArtifactError(f"{what} is missing")
        op_name = text(n.Op(), f"{what} op")
        try:
            op = Op(op_name)
        except ValueError:
            raise ArtifactError(f"{what} has unknown op {op_name!r}") from None
        what = f"{what} ({op_name})"
        ins = tuple(self._use(vid, types, what) for vid in ints(n.InputsIsNone(), n.InputsAsNumpy))
        attrs: dict[str, Any] = {}
        for i in range(self.count(n.AttrsLength(), f"{what} attrs")):
            a = n.Attrs(i)
            key = text(a.Name(), f"{what} attr name")
            if key in attrs:
                raise ArtifactError(f"{what} has attr {key!r} twice")
            attrs[key] = self.attr_value(a.Value(), f"{what} attr {key!r}")
        outs = tuple(
            self._define(n.Outputs(i), types, f"{what} output {i}")
            for i in range(self.count(n.OutputsLength(), f"{what} outputs"))
        )
        return Node(op, ins, outs, Attrs(attrs), text(n.Loc(), f"{what} loc"))

    def attr_value(self, v: Any, what: str, depth: int = 0) -> Any:
        if v is None:
            raise ArtifactError(f"{what} has no value")
        kind = v.Kind()
        if kind == ValueKind.Null:
            return None
        if kind == ValueKind.Int:
            return int(v.IntValue())
        if kind == ValueKind.Float:
            return float(v.FloatValue())
        if kind == ValueKind.Bool:
            b = int(v.IntValue())
            if b not in (0, 1):
                raise ArtifactError(f"{what}: bool stored as {b}")
            return b == 1
        if kind == ValueKind.Str:
            return text(v.StrValue(), what)
        if kind == ValueKind.Dtype:
            return dtype(v.IntValue(), what)
        if kind == ValueKind.Sym:
            e = expr(text(v.StrValue(), what), what)
            if not isinstance(e, SymExpr):
                raise ArtifactError(f"{what}: symbolic value {e} has no symbols")
            return e
        if kind == ValueKind.Tuple:
            if depth >= MAX_ATTR_DEPTH:
                raise ArtifactError(f"{what}: tuples nest deeper than {MAX_ATTR_DEPTH} levels")
            n = self.count(v.ItemsLength(), what)
            return tuple(self.attr_value(v.Items(i), what, depth + 1) for i in range(n))
        raise ArtifactError(f"{what} has unknown value kind {kind}")

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


def text(raw: bytes | None, what: str) -> str:
    if raw is None:
        raise ArtifactError(f"{what} is missing")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ArtifactError(f"{what} is not valid UTF-8") from None


def ints(is_none: bool, as_numpy: Callable[[], Any]) -> list[int]:
    """A scalar vector as Python ints (an absent vector is empty)."""
    return [] if is_none else [int(x) for x in np.asarray(as_numpy()).tolist()]


def dtype(code: int, what: str) -> DType:
    try:
        return DTYPES_BY_CODE[int(code)]
    except KeyError:
        raise ArtifactError(f"{what} has unknown dtype code {code}") from None


def expr(s: str, what: str) -> int | SymExpr:
    """A symbolic integer from its s-expression."""
    if len(s) > MAX_SEXPR_CHARS:
        raise ArtifactError(f"{what}: expression of {len(s)} characters is too long")
    if _has_product_of_sums(s):
        raise ArtifactError(f"{what}: expression {s[:80]!r} is not in canonical form (a product of sums)")
    try:
        return parse(s)
    except ShapeError as e:
        raise ArtifactError(f"{what}: {e}") from None


def _has_product_of_sums(s: str) -> bool:
    """Canonical expressions are sums of products; expanding a product of sums could take very long."""
    stack: list[str] = []
    for m in _PAREN.finditer(s):
        if m.group(0) == ")":
            if stack:
                stack.pop()
            continue
        if m.group(1) == "+" and stack and stack[-1] == "*":
            return True
        stack.append(m.group(1))
    return False


def dim(s: str, what: str) -> int | SymExpr:
    """A tensor dim: an expression, or a non-negative int."""
    d = expr(s, what)
    if isinstance(d, int) and d < 0:
        raise ArtifactError(f"{what}: negative dim {d}")
    return d


def output_tree(raw: str, n_outputs: int, what: str) -> Any:
    try:
        tree = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ArtifactError(f"{what} output tree is not valid JSON: {e}") from None
    check_output_tree(tree, n_outputs, ArtifactError, what)
    return tree
