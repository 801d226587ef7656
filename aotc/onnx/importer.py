"""ONNX -> aotc Graph (high-level ops, symbolic shapes).

Every ``dim_param`` becomes a symbol (range from ``dims``, else ``DEFAULT_DIM_RANGE``); fixed dims stay static.
Nodes whose inputs are all known are folded at import time: shape arithmetic symbolically (``shape_fold``), the
rest with ONNX's reference implementation, so only runtime computation reaches the graph. Anything aotc can't
run fails here, naming the op type and node, never at run time.

Errors: a file that is not an ONNX model, or a malformed graph (undefined input, output that no
node defines) -> ModelError; an op, opset, dtype or attribute aotc doesn't handle -> UnsupportedError;
inconsistent shapes -> ShapeError.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aotc.errors import AotcError, ModelError, ShapeError, UnsupportedError
from aotc.frontend.pinned import warn_pinned
from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, Guard, Symbol
from aotc.ir.ops import Op
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic import SymExpr, sym
from aotc.ir.types import Node, ShapeDim, TensorType, Value
from aotc.ir.verify import verify
from aotc.onnx._common import (
    DEFAULT_DIM_RANGE,
    MIN_IMPORT_OPSET,
    SYMBOLS_META_KEY,
    dtype_from_np,
    dtype_from_onnx,
    identifier,
    io_name,
    require_onnx,
    unique,
)
from aotc.onnx.convert import CONVERTERS, NO_REFERENCE_FOLD
from aotc.onnx.node import Known, NeedsKnownInput, OnnxNode, Operand, decode_attr
from aotc.onnx.shape_fold import fold_symbolic

# Ops whose result is not a function of their inputs: folding them would freeze one random draw.
NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
# AttributeProto.GRAPH and GRAPHS: kept as protos (If inlines its branches)
_GRAPH_ATTRS = (5, 10)
# A reference fold producing more elements than this is kept as runtime ops instead of a stored constant.
MAX_FOLD_ELEMENTS = 1 << 22
# A graph input a compile-time value (a shape, pads) is computed from may be fixed per call, by the ONNX backend,
# when it holds at most this many elements.
MAX_SPECIALIZED_ELEMENTS = 64


class GuardingCtx(ShapeCtx):
    """Turns an equality the shapes can't prove (two different dim_params meeting in an Add) into a guard."""

    def __init__(self, ranges: Mapping[str, tuple[int, int]]) -> None:
        super().__init__(ranges)
        self.guards: list[Guard] = []
        self.loc = ""

    def require_equal(self, a: ShapeDim, b: ShapeDim, what: str) -> None:
        if self.known_equal(a, b):
            return
        lo, hi = self.bounds(a - b)
        if lo > 0 or hi < 0:
            super().require_equal(a, b, what)
        self.guards.append(Guard(a, "==", b, self.loc))
        self.equal_pairs.add(frozenset((a, b)))


class DefaultRangeWarning(UserWarning):
    """A dynamic ONNX dim that got ``DEFAULT_DIM_RANGE`` because no ``--dim``/``dims=`` and no aotc metadata gave one."""


def import_onnx(
    path_or_model: Any,
    dims: Mapping[str, tuple[int, int]] | None = None,
    *,
    constant_inputs: Mapping[str, np.ndarray] | None = None,
) -> Graph:
    """Import an ONNX model (a path, bytes or ``onnx.ModelProto``) as a verified high-level Graph.

    ``dims`` maps a dim_param name to its inclusive (min, max) range (default ``DEFAULT_DIM_RANGE``).
    ``constant_inputs`` fixes graph inputs to values, as if they were initializers (for a shape or axes tensor
    fed as an input). The graph's inputs keep the ONNX input names exactly (``exe.run({"gpu_0/data_0": x})``
    works as with onnxruntime); its outputs are a dict keyed by the ONNX output names, in the file's order.
    """
    model = load_model(path_or_model)
    return Importer(model, dims or {}, constant_inputs or {}).run()


def load_model(path_or_model: Any) -> Any:
    onnx = require_onnx()
    from google.protobuf.message import DecodeError

    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model
    try:
        if isinstance(path_or_model, (bytes, bytearray, memoryview)):
            model = onnx.load_model_from_string(bytes(path_or_model))
            where = "the given bytes"
        elif isinstance(path_or_model, (str, os.PathLike)):
            where = str(path_or_model)
            if not Path(where).is_file():
                raise ModelError(f"{where}: no such ONNX file")
            model = onnx.load(where)
        else:
            raise ModelError(
                f"expected an ONNX file path, bytes or onnx.ModelProto, got {type(path_or_model).__name__}"
            )
    except (DecodeError, ValueError, RuntimeWarning, UnicodeDecodeError) as e:
        raise ModelError(f"{where} is not a valid ONNX model: {e}") from None
    except (OSError, onnx.checker.ValidationError) as e:
        raise ModelError(f"{where}: cannot read the model or its external data: {e}") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelError(f"{where} is not a valid ONNX model: it has no graph")
    return model


def default_opset(model: Any) -> int:
    onnx = require_onnx()
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        if model.opset_import:
            raise UnsupportedError("the model imports no default-domain (ai.onnx) opset")
        versions = [1]  # ONNX: a model without opset_import is opset 1
    opset = max(versions)
    newest = onnx.defs.onnx_opset_version()
    if opset < MIN_IMPORT_OPSET:
        changed = _changed_since(model, opset)
        if changed:
            raise UnsupportedError(
                f"opset {opset} is too old: aotc imports opsets {MIN_IMPORT_OPSET}..{newest} (ops used here that "
                f"changed since: {', '.join(changed)}); upgrade the model with onnx.version_converter"
            )
    if opset > newest:
        raise UnsupportedError(f"opset {opset} is newer than this onnx package knows ({newest}); upgrade onnx")
    return opset


def _changed_since(model: Any, opset: int) -> list[str]:
    """Ops of an old-opset model whose definition changed before MIN_IMPORT_OPSET (an old model using only
    ops that kept their meaning, like Not-1, imports as it is)."""
    import onnx

    changed = set()
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        try:
            then = onnx.defs.get_schema(n.op_type, opset).since_version
            now = onnx.defs.get_schema(n.op_type, MIN_IMPORT_OPSET).since_version
        except onnx.defs.SchemaError:
            changed.add(n.op_type)
            continue
        if then != now:
            changed.add(n.op_type)
    return sorted(changed)


class Importer:
    """Walks one ONNX graph, mapping each tensor name to a graph Value or a Known tensor."""

    def __init__(
        self, model: Any, dims: Mapping[str, tuple[int, int]], constant_inputs: Mapping[str, np.ndarray]
    ) -> None:
        self.model = model
        self.constant_inputs = dict(constant_inputs)
        self._graph_input_of: dict[int, str] = {}  # value id -> ONNX input name
        self.opset = default_opset(model)
        self.name = identifier(model.graph.name or "model", "model")
        self.symbols: dict[str, Symbol] = {}
        self._sym_of_param: dict[str, str] = {}
        self._dims = self._check_dims(dims)
        self._meta_ranges = self._metadata_ranges()
        self.ctx = GuardingCtx({})
        self.b = Builder(self.ctx)
        self.constants: dict[str, np.ndarray] = {}
        self._const_names: set[str] = set()
        self._materialized: dict[tuple[int, DType | None], Value] = {}
        self._known_names: dict[int, str] = {}
        # Materialized and named Knowns stay referenced so their id() keys are never reused.
        self._keep_alive: list[Known] = []

    # -- inputs and symbols ------------------------------------------------------------------------------
    def _check_dims(self, dims: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        out = {}
        for name, rng in dims.items():
            try:
                lo, hi = (int(v) for v in rng)
            except (TypeError, ValueError):
                raise ShapeError(f"dim {name!r}: range must be (min, max) ints, got {rng!r}") from None
            if not 0 <= lo <= hi:
                raise ShapeError(f"dim {name!r}: range [{lo}, {hi}] must satisfy 0 <= min <= max")
            out[name] = (lo, hi)
        return out

    def _metadata_ranges(self) -> dict[str, tuple[int, int]]:
        """Ranges an aotc export recorded, so a round trip keeps them."""
        for p in self.model.metadata_props:
            if p.key == SYMBOLS_META_KEY:
                try:
                    return {k: (int(v[0]), int(v[1])) for k, v in json.loads(p.value).items()}
                except (ValueError, TypeError, KeyError, IndexError):
                    return {}
        return {}

    def _symbol(self, param: str, fallback: str) -> SymExpr:
        key = param or f"\0{fallback}"
        if key not in self._sym_of_param:
            name = identifier(param, "d") if param else identifier(fallback, "d")
            if name in ("min", "max"):
                name = f"d_{name}"
            name = unique(name, set(self.symbols))
            given = self._dims.get(param, self._dims.get(name, self._meta_ranges.get(name)))
            lo, hi = given or DEFAULT_DIM_RANGE
            if given is None:  # a range nobody chose sizes the memory plan and the guards: say so, once per dim
                where = f"graph input dim {param!r}" if param else f"an unnamed dim ({fallback})"
                warnings.warn(
                    f"{where} has no range: it defaults to [{lo}, {hi}], which sizes the memory plan for {hi}; "
                    f"give its real range with --dim {name}=MIN:MAX (import_onnx(..., dims={{{name!r}: (MIN, MAX)}}))",
                    DefaultRangeWarning,
                    stacklevel=2,
                )
            self.symbols[name] = Symbol(name, lo, hi)
            self.ctx.ranges[name] = (lo, hi)
            self._sym_of_param[key] = name
        return sym(self._sym_of_param[key])

    def _input(self, vi: Any, taken: set[str]) -> tuple[str, Value]:
        what = f"graph input {vi.name!r}"
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedError(f"{what} is not a tensor (sequences, maps and optionals are not supported)")
        tt = vi.type.tensor_type
        dtype = dtype_from_onnx(tt.elem_type, what)
        if not tt.HasField("shape"):
            raise UnsupportedError(f"{what} has no shape; aotc needs the rank of every input")
        shape: list[ShapeDim] = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                if d.dim_value < 0:
                    raise ModelError(f"{what} dim {axis} is negative ({d.dim_value})")
                shape.append(int(d.dim_value))
            else:
                shape.append(self._symbol(d.dim_param, f"{vi.name}_{axis}"))
        return io_name(vi.name, "graph input", taken), self.b.new_value(TensorType(dtype, tuple(shape)))

    # -- operands ------------------------------------------------------------------------------------------
    def value(self, x: Operand, dtype: DType | None = None, what: str = "a constant") -> Value:
        """``x`` as a graph Value; a Known becomes a FULL (one element) or CONSTANT node, cast to ``dtype``."""
        if isinstance(x, Value):
            return x
        key = (id(x), dtype)
        if key in self._materialized:
            return self._materialized[key]
        if x.symbolic:
            dt = dtype or dtype_from_np(x.dtype, what)
            parts = [self.b.full(e, dt, (1,)) for e in x.array.reshape(-1)]
            v = parts[0] if len(parts) == 1 else self.b.op(Op.CONCAT, *parts, axis=0)
            v = self.b.reshape(v, x.shape)
        else:
            arr = x.array if dtype is None else x.array.astype(dtype.np)
            dt = dtype_from_np(arr.dtype, what)
            flat = arr.reshape(-1)
            if arr.size == 1 or (arr.size and not np.isnan(flat[0]) and bool(np.all(flat == flat[0]))):
                v = self.b.full(flat[0].item(), dt, arr.shape)  # uniform: no stored copy
            else:
                name = unique(
                    identifier(self._known_names.get(id(x), "const"), "const", allow_dots=True), self._const_names
                )
                self.constants[name] = np.ascontiguousarray(arr)
                v = self.b.op(Op.CONSTANT, name=name, shape=tuple(arr.shape), dtype=dt)
        self._materialized[key] = v
        self._keep_alive.append(x)
        return v

    def full(self, value: Any, dtype: DType, shape: tuple[ShapeDim, ...] = ()) -> Value:
        return self.b.full(value, dtype, shape)

    # -- the walk ----------------------------------------------------------------------------------------
    def run(self) -> Graph:
        g = self.model.graph
        env: dict[str, Operand] = {}
        self._add_initializers(g, env)
        graph_inputs = {vi.name for vi in g.input}
        unknown = sorted(set(self.constant_inputs) - graph_inputs)
        if unknown:
            raise ModelError(f"constant_inputs names {unknown} are not graph inputs")
        for name, arr in self.constant_inputs.items():
            env[name] = Known.of(np.asarray(arr))
            self._keep_alive.append(env[name])
        taken: set[str] = set()
        inputs, names = [], []
        for vi in g.input:
            if vi.name in taken:
                io_name(vi.name, "graph input", taken)  # raises: a second input of one name
            if vi.name in env:  # IR < 4 lists initializers as inputs too: they are constants
                continue
            name, v = self._input(vi, taken)
            self._graph_input_of[v.id] = vi.name
            env[vi.name] = v
            inputs.append(v)
            names.append(name)
        unknown = sorted(set(self._dims) - set(self._sym_of_param) - set(self.symbols))
        if unknown:
            have = (
                ", ".join(sorted(p for p in self._sym_of_param if not p.startswith("\0")))
                or "none: every dim is static"
            )
            raise ShapeError(f"the model has no dynamic dim {', '.join(map(repr, unknown))}; its dims are: {have}")
        self.run_nodes(g.node, env)
        outputs, tree, out_names = [], [], set()
        for i, vi in enumerate(g.output):
            io_name(vi.name, "graph output", out_names)
            if vi.name not in env:
                raise ModelError(f"graph output {vi.name!r} is not produced by any node, input or initializer")
            outputs.append(self.value(env[vi.name], what=f"graph output {vi.name!r}"))
            tree.append([vi.name, i])
        nodes = _live_nodes(self.b.nodes, outputs)
        used = {n.attrs["name"] for n in nodes if n.op is Op.CONSTANT}
        graph = Graph(
            inputs=tuple(inputs),
            input_names=tuple(names),
            nodes=tuple(nodes),
            outputs=tuple(outputs),
            output_tree={"dict": tree},
            symbols=tuple(self.symbols.values()),
            guards=tuple(dict.fromkeys(self.ctx.guards)),
            constants={k: v for k, v in self.constants.items() if k in used},
            name=self.name,
        )
        verify(graph, stage="onnx import")
        warn_pinned(graph.symbols, graph.guards, stacklevel=3)
        return graph

    def _add_initializers(self, g: Any, env: dict[str, Operand]) -> None:
        from onnx import numpy_helper

        if len(g.sparse_initializer):
            raise UnsupportedError("sparse initializers are not supported")
        for t in g.initializer:
            try:
                arr = numpy_helper.to_array(t)
            except (ValueError, TypeError, OSError) as e:
                raise ModelError(f"initializer {t.name!r} has no readable data: {e}") from None
            k = Known.of(arr)
            self._known_names[id(k)] = t.name
            self._keep_alive.append(k)
            env[t.name] = k

    def run_nodes(self, nodes: Any, env: dict[str, Operand]) -> None:
        for index, proto in enumerate(nodes):
            label = f"{proto.op_type} node {proto.name or '#' + str(index)!r}"
            ins: list[Operand | None] = []
            for n in proto.input:
                if n == "":
                    ins.append(None)
                elif n in env:
                    ins.append(env[n])
                else:
                    raise ModelError(
                        f"{label}: input {n!r} is not defined by an earlier node, a graph input or an initializer"
                    )
            if proto.domain not in ("", "ai.onnx"):
                raise UnsupportedError(
                    f"ONNX op {proto.domain}::{proto.op_type} ({label}) is not supported: aotc imports the default domain only"
                )
            try:
                attrs = {a.name: a if a.type in _GRAPH_ATTRS else decode_attr(a) for a in proto.attribute}
            except (ValueError, TypeError) as e:
                raise UnsupportedError(f"{label}: cannot read its attributes: {e}") from None
            node = OnnxNode(proto.op_type, proto.name or f"#{index}", ins, list(proto.output), attrs, self.opset, proto)
            self.ctx.loc = f"onnx node {node.name!r} ({proto.op_type})"
            self.b.loc = self.ctx.loc
            outs = self._convert_checked(node, env)
            for name, o in zip(proto.output, outs):
                if name:
                    env[name] = o
                    if isinstance(o, Known) and id(o) not in self._known_names:
                        self._known_names[id(o)] = name  # a stored constant is named after its tensor
                        self._keep_alive.append(o)

    def _convert_checked(self, node: OnnxNode, env: dict[str, Operand]) -> list[Operand]:
        try:
            outs = list(self._convert(node, env))
        except NeedsKnownInput as e:
            e.input_names = self._inputs_behind(e.value)
            raise
        except AotcError as e:
            if node.label in str(e):
                raise
            raise type(e)(f"{node.label}: {e}") from None
        except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError) as e:
            raise UnsupportedError(f"{node.label}: cannot import it: {type(e).__name__}: {e}") from e
        wanted = sum(1 for i in range(len(node.outputs)) if node.wants(i))
        if len(outs) < len(node.outputs) and wanted > len(outs):
            raise UnsupportedError(f"{node.label}: outputs beyond the first {len(outs)} are not supported")
        return outs

    def _inputs_behind(self, value: Value) -> tuple[str, ...]:
        """The graph inputs ``value`` is computed from, if each holds at most MAX_SPECIALIZED_ELEMENTS (a window
        length, a target size): fixing those makes ``value`` known. Else ()."""
        producer = {o.id: n for n in self.b.nodes for o in n.outputs}
        found: dict[str, None] = {}
        stack, seen = [value], set()
        while stack:
            v = stack.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            if v.id in self._graph_input_of:
                shape = v.type.shape
                if (
                    not all(isinstance(d, int) for d in shape)
                    or np.prod(shape, dtype=np.int64) > MAX_SPECIALIZED_ELEMENTS
                ):
                    return ()
                found[self._graph_input_of[v.id]] = None
            elif v.id in producer:
                stack.extend(producer[v.id].inputs)
        return tuple(found)

    def _convert(self, node: OnnxNode, env: dict[str, Operand]) -> list[Operand]:
        op = node.op_type
        if op in NONDETERMINISTIC:
            raise node.fail("random ops are not supported")
        if op == "If":
            return self._inline_if(node, env)
        if any(not isinstance(v, (int, float, str, list, np.ndarray)) for v in node.attrs.values()):
            raise node.fail("attributes holding graphs or types are not supported")
        given = [x for x in node.inputs if x is not None]
        if given and all(isinstance(x, Known) for x in given):
            if any(x.symbolic for x in given):
                out = fold_symbolic(node, self.ctx)
                if out is not None:
                    return out
            elif op not in NO_REFERENCE_FOLD:
                out = self._fold_reference(node)
                if out is not None:
                    return out
        convert = CONVERTERS.get(op)
        if convert is None:
            raise UnsupportedError(f"ONNX op {op!r} ({node.label}) is not supported by aotc")
        return list(convert(self, node))

    def _fold_reference(self, node: OnnxNode) -> list[Operand] | None:
        """Outputs of a node whose inputs are all constants, by ONNX's reference implementation."""
        import onnx
        from onnx.reference import ReferenceEvaluator

        names = [f"in{i}" if x is not None else "" for i, x in enumerate(node.inputs)]
        proto = onnx.helper.make_node(node.op_type, names, [f"out{i}" if o else "" for i, o in enumerate(node.outputs)])
        proto.attribute.extend(node.proto.attribute)
        feeds = {n: x.array for n, x in zip(names, node.inputs) if n}
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                results = ReferenceEvaluator(proto, opsets={"": self.opset}).run(None, feeds)
        except Exception:  # any failure means "not foldable": import it as runtime ops instead
            return None
        outs: list[Operand] = []
        for r in results:
            if not isinstance(r, np.ndarray) or r.dtype == object or r.size > MAX_FOLD_ELEMENTS:
                return None
            outs.append(Known.of(r))
        return outs

    def _inline_if(self, node: OnnxNode, env: dict[str, Operand]) -> list[Operand]:
        cond = node.input(0)
        if not isinstance(cond, Known) or cond.symbolic or cond.array.size != 1:
            raise node.fail("If with a condition computed at run time is not supported")
        branch = node.attrs["then_branch" if bool(cond.array.reshape(-1)[0]) else "else_branch"].g
        inner = dict(env)
        self._add_initializers(branch, inner)
        self.run_nodes(branch.node, inner)
        outs = []
        for vi in branch.output:
            if vi.name not in inner:
                raise ModelError(f"{node.label}: branch output {vi.name!r} is not defined")
            outs.append(inner[vi.name])
        return outs


def _live_nodes(nodes: list[Node], outputs: list[Value]) -> list[Node]:
    live = {v.id for v in outputs}
    keep = []
    for n in reversed(nodes):
        if any(o.id in live for o in n.outputs):
            keep.append(n)
            live.update(v.id for v in n.inputs)
    return keep[::-1]
