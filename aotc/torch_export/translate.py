"""Walk an ExportedProgram's graph on aotc's tracer: parameters and constants once each, every call through the
ATen table at its node's source line, and the outputs in the module's structure.

The walk runs inside an active trace whose user inputs are already aotc ``Tensor``s (``run``); who set up the
trace (``importer`` for an ExportedProgram, ``module`` for a torch.nn.Module) decides the symbols.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from aotc.errors import AotcError, ShapeError, TraceError, UnsupportedError
from aotc.frontend import elementwise as ew
from aotc.frontend import functions as T
from aotc.frontend.context import Tracer, source_loc
from aotc.frontend.symint import SymInt, as_dim
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.symbolic_values import evaluate
from aotc.torch_export._torch import aotc_dtype, require_torch, to_numpy
from aotc.torch_export.inplace import functional_twin, inplace_plan, link
from aotc.torch_export.local_writes import Followed, read, write_back
from aotc.torch_export.locations import node_loc, node_module, storage_key
from aotc.torch_export.ops_complex import Complex, ComplexOf, is_complex_op, touches_complex, translation
from aotc.torch_export.state_writes import (
    IDENTITY_ALIASES,
    VIEWS,
    ImportedState,
    alias_path,
    compose,
    read_alias,
    write_through,
    writes_first,
    written_placeholders,
)
from aotc.torch_export.table import ATEN, nearby, target_name


@contextlib.contextmanager
def _at_first_use(placeholder: Any) -> Iterator[None]:
    """A parameter, buffer or constant that cannot be stored (a complex64 buffer) is refused at the model's
    source line that first reads it, naming the op that does: the placeholder itself has no line."""
    try:
        yield
    except UnsupportedError as e:
        found = next(((u, loc) for u in placeholder.users if u.op == "call_function" and (loc := node_loc(u))), None)
        if found is None:
            raise
        user, loc = found
        raise UnsupportedError(f"{loc}: {user.target}: {e}") from None


def refuse_mutations(ep: Any) -> None:
    """An export that writes to an input is refused: a call may change the state it keeps (buffers it writes become
    states, aotc/torch_export/state_writes.py), never the caller's arrays."""
    sig = ep.graph_signature
    written = [f"input {i!r}" for i in sig.user_inputs_to_mutate.values()]
    if written:
        raise UnsupportedError(
            f"the exported program mutates {', '.join(written)}: aotc's calls never write their inputs; keep the "
            "state in a buffer of the module (registered with register_buffer), which becomes a state of a session"
        )
    kinds = {str(s.kind).rsplit(".", 1)[-1] for s in sig.output_specs} - {"USER_OUTPUT", "BUFFER_MUTATION"}
    if kinds:
        raise UnsupportedError(f"the exported program has {', '.join(sorted(kinds))} outputs; aotc compiles inference")


class Translator:
    """Translates one ExportedProgram's nodes onto ``tracer``."""

    def __init__(self, ep: Any, tracer: Tracer, sym_of: Any = None) -> None:
        self.ep = ep
        self.tracer = tracer
        self.sym_of = sym_of  # torch symbol name -> aotc dim, for sizes aotc's arithmetic can't derive itself
        self.env: dict[str, Any] = {}
        self.node: Any = None
        self._stored: dict[tuple, Tensor] = {}
        self._first_name: dict[tuple, str] = {}
        self.written = written_placeholders(ep)  # buffers (and lifted tensors) the program writes: states
        plan = inplace_plan(ep.graph, self.written)
        self.inplace = plan.twins if plan else frozenset()  # in-place nodes run as their functional twins
        self.local_roots = plan.local_roots if plan else frozenset()  # fresh tensors written in place
        self.local: dict[str, tuple[Followed, tuple[Any, ...], int]] = {}  # FX node -> (root, chain, version read)
        self.alias: dict[str, tuple[ImportedState, tuple[Any, ...]]] = {}  # FX node -> the state (and index) it views

    # -- what translations ask ----------------------------------------------------------------------------
    def torch_size(self) -> Any:
        """The node's result, a size, as torch computed it (its sympy expression over the input symbols), or None."""
        val = self.node.meta.get("val")
        expr = getattr(getattr(val, "node", None), "expr", None)
        if expr is None or self.sym_of is None:
            return None
        from aotc.torch_export.symbols import Untranslatable, to_dim

        try:
            d = to_dim(expr, self.sym_of)
        except (Untranslatable, KeyError):
            return None
        return d if isinstance(d, int) else SymInt(d, self.tracer.ctx)

    def out_dtype(self) -> DType | None:
        val = self.node.meta.get("val")
        return aotc_dtype(val.dtype) if hasattr(val, "dtype") else None

    def out_torch_dtype(self) -> str | None:
        """The name of the torch dtype of the node's result ("uint8"), which a narrow carried dtype may hide."""
        val = self.node.meta.get("val")
        return str(val.dtype).removeprefix("torch.") if hasattr(val, "dtype") else None

    # -- the walk -----------------------------------------------------------------------------------------
    def run(self, user_inputs: Sequence[Tensor]) -> Any:
        """The module's outputs (a tensor, or tuples, lists and dicts of them) for these input tensors."""
        graph = self.ep.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        specs = {s.arg.name: s for s in self.ep.graph_signature.input_specs}
        users = iter(user_inputs)
        for node in placeholders:  # each storage's first name, read or not: the name it is stored under
            spec = specs[node.name]
            t = self._stored_value(spec.target, str(spec.kind).rsplit(".", 1)[-1]) if spec.target else None
            if t is not None:
                self._first_name.setdefault(storage_key(t), spec.target)
        for node in placeholders:
            spec = specs[node.name]
            kind = str(spec.kind).rsplit(".", 1)[-1]
            if kind == "USER_INPUT":
                self.env[node.name] = next(users)
            elif kind in ("BUFFER", "CONSTANT_TENSOR") and node.name in self.written:
                with _at_first_use(node):
                    self.env[node.name] = self._state(spec.target, kind)
                self.alias[node.name] = (self.env[node.name], ())
            elif kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR") and not node.users:
                continue  # read by no node (a vision tower's weights under text-only inputs): nothing to store
            elif kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                with _at_first_use(node):
                    self.env[node.name] = self._stored_tensor(spec.target, kind)
            else:
                raise UnsupportedError(f"input {node.name!r} of kind {kind} is not supported")
        out_node = None
        for node in graph.nodes:
            if node.op == "call_function":
                self.env[node.name] = self._call(node)
                self._follow(node)
            elif node.op == "output":
                out_node = node
            elif node.op == "get_attr":
                raise UnsupportedError(f"{node_loc(node) or node.name}: a graph attribute {node.target!r} (a "
                                       "submodule of a higher-order op) is not supported")  # fmt: skip
            elif node.op != "placeholder":
                raise UnsupportedError(f"{node_loc(node) or node.name}: FX node kind {node.op!r} is not supported")
        assert out_node is not None, "an FX graph always has an output node"
        specs_out = self.ep.graph_signature.output_specs
        leaves = []
        for i, (x, spec) in enumerate(zip(out_node.args[0], specs_out)):
            if str(spec.kind).endswith("BUFFER_MUTATION"):
                self._set_buffer(spec.target, x)
            else:
                leaves.append(self._output(x, i))
        return _unflatten(self.ep.call_spec.out_spec, iter(leaves))

    def _state(self, target: str, kind: str) -> ImportedState:
        t = self._stored_value(target, kind)
        if t is None:
            raise UnsupportedError(f"{kind.lower()} {target!r} has no stored value in the exported program")
        arr = to_numpy(t, f"buffer {target!r}")
        return ImportedState(self.tracer, target, arr, aotc_dtype(t.dtype))

    def _set_buffer(self, target: str, x: Any) -> None:
        """A functionalized program's new value of buffer ``target``: it must be the buffer with writes into it."""
        state = next((st for st, path in self.alias.values() if st.name == target and not path), None)
        value = self.env.get(getattr(x, "name", ""))
        if state is None or not isinstance(value, Tensor):
            raise UnsupportedError(f"buffer {target!r} is set to {x}, which aotc cannot keep as a state")
        if value is state:
            return
        v = value._v()
        latest = self.tracer.state_value(state)
        producer = next((n for n in reversed(self.tracer.builder.nodes) if v in n.outputs), None)
        if producer is None or producer.op is not Op.SCATTER or producer.inputs[0] is not latest:
            made = getattr(x, "target", x)
            raise UnsupportedError(
                f"{node_loc(x) if hasattr(x, 'meta') else ''}: buffer {target!r} is set to the result of {made}, which "
                "is not a write into it (index_copy, index_put, copy into a slice)"
            )
        self.tracer.write_state(state, v)

    def _stored_value(self, target: str, kind: str) -> Any:
        t = self.ep.state_dict.get(target) if kind != "CONSTANT_TENSOR" else None
        return self.ep.constants.get(target) if t is None else t

    def _stored_tensor(self, target: str, kind: str) -> Tensor | Complex:
        """A parameter, buffer or lifted constant, stored once however many names share its storage, under the
        first of them (a tied embedding is "embed.weight", whichever name the graph reads)."""
        t = self._stored_value(target, kind)
        if t is None:
            raise UnsupportedError(f"{kind.lower()} {target!r} has no stored value in the exported program")
        name = self._first_name.get(storage_key(t), target)
        if t.is_complex():  # carried as its two float parts (ops_complex.py)
            return Complex(
                self._stored_part(t.real, f"{name}.real", kind), self._stored_part(t.imag, f"{name}.imag", kind)
            )
        return self._stored_part(t, name, kind)

    def _stored_part(self, t: Any, name: str, kind: str) -> Tensor:
        key = storage_key(t)
        if key not in self._stored:
            arr = to_numpy(t, f"{kind.lower()} {name!r}", share=True)
            self._stored[key] = ew.wrap(self.tracer.constant(t, arr, name=name), self.tracer)
        return self._stored[key]

    def _value(self, a: Any) -> Any:
        torch = require_torch()
        if isinstance(a, torch.fx.Node):
            v = self.env[a.name]
            seen = self.local.get(a.name)
            if seen is not None and seen[2] < seen[0].version:  # a view of a local tensor written since: reread
                root, chain, _ = seen
                v = self.env[a.name] = read(self, root, chain)
                self.local[a.name] = (root, chain, root.version)
                return v
            if a.name in self.alias and isinstance(v, Tensor) and self.tracer.is_stale(v._v()):
                # a view of a buffer written since: torch's view shows the write
                state, path = self.alias[a.name]
                val = a.meta.get("val")
                return read_alias(state, path, aotc_dtype(val.dtype) if hasattr(val, "dtype") else None)
            return v
        if isinstance(a, (list, tuple)):
            return [self._value(x) for x in a]
        if isinstance(a, torch.dtype):
            return ComplexOf(aotc_dtype(a.to_real())) if a.is_complex else aotc_dtype(a)
        if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
            return None
        if isinstance(a, torch.Tensor) and a.is_complex():
            return Complex(self._value(a.real.clone()), self._value(a.imag.clone()))
        if isinstance(a, torch.Tensor):
            return ew.wrap(self.tracer.constant(a, to_numpy(a, "a tensor argument")), self.tracer)
        return a

    def _args(self, node: Any) -> list[Any]:
        """The op's schema arguments in order, defaults filled in (so a translation reads them positionally)."""
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            return [self._value(a) for a in node.args] + [self._value(v) for v in node.kwargs.values()]
        out = []
        for i, arg in enumerate(schema.arguments):
            if i < len(node.args):
                v = node.args[i]
            elif arg.name in node.kwargs:
                v = node.kwargs[arg.name]
            elif arg.has_default_value():
                v = arg.default_value
            else:
                v = None
            out.append(self._value(v))
        return out

    def _call(self, node: Any) -> Any:
        self.node = node
        name = target_name(node.target)
        loc = node_loc(node)
        where = f"{loc}: " if loc else ""
        _refuse_data_dependent(node, name, where)
        base = node.args[0] if node.args else None
        if getattr(base, "name", None) in self.alias:
            done, out = self._state_op(node, name, loc, where)
            if done:
                return out
        if getattr(base, "name", None) in self.local and writes_first(node):
            return self._local_write(node, name, loc, where)
        fn = ATEN.get(name)
        if fn is None and node.name in self.inplace:
            fn = ATEN.get(functional_twin(name) or "")
        if touches_complex(node) and (fn is not None or is_complex_op(name)):  # else: not an op aotc has at all
            fn = self._complex_translation(node, name, where)
        if fn is None:
            near = nearby(name)
            hint = (
                f"supported ops of the same name: {', '.join(near)}"
                if near
                else "no supported op shares its name; aotc/torch_export/table.py lists those that are"
            )
            raise UnsupportedError(f"{where}{name} is not supported by aotc ({hint})")
        module = node_module(node)
        with source_loc(f"{loc} ({module})" if loc and module else loc):
            try:
                args = self._args(node)  # inside: an argument aotc cannot hold (a complex dtype) names the line
                out = fn(self, *args)
                return self._conform(node, name, out)
            except TraceError as e:
                msg = str(e)
                raise TraceError(msg if name in msg else f"{msg} (in {name})") from None
            except AotcError as e:
                raise type(e)(f"{where}{name}: {e}") from None

    def _complex_translation(self, node: Any, name: str, where: str) -> Any:
        """An op on complex tensors, which aotc carries as their float parts: written in place, it is refused."""
        base = getattr(node.args[0] if node.args else None, "name", None)
        if node.name in self.local_roots or base in self.local or base in self.alias:
            raise UnsupportedError(f"{where}{name}: writing a complex tensor in place is not supported by aotc")
        if node.name in self.inplace:
            name = functional_twin(name) or name
        return translation(name, where)

    def _state_op(self, node: Any, name: str, loc: str, where: str) -> tuple[bool, Any]:
        """An op on a state or a view of one: a write (done, its result a fresh read), or a view recorded as one."""
        state, path = self.alias[node.args[0].name]
        module = node_module(node)
        with source_loc(f"{loc} ({module})" if loc and module else loc):
            if writes_first(node):
                args = self._args(node)[1:]
                twin = ATEN.get(functional_twin(name) or "")
                functional = None if twin is None else (lambda x, *rest: twin(self, x, *rest))
                try:
                    write_through(state, path, name, args, where, functional)
                except AotcError as e:
                    raise type(e)(
                        str(e) if str(e).startswith(where) else f"{where}{name} into buffer {state.name!r}: {e}"
                    ) from None
                self.alias[node.name] = (state, path)
                return True, read_alias(state, path, None)
            rank = len(getattr(node.args[0].meta.get("val"), "shape", ()))
            inner = (
                alias_path(name, [self._value(a) for a in node.args], rank)
                if name in IDENTITY_ALIASES | VIEWS
                else None
            )
            joined = compose(path, inner) if inner is not None else None
            if joined is not None:
                self.alias[node.name] = (state, joined)
        return False, None

    def _local_write(self, node: Any, name: str, loc: str, where: str) -> Tensor:
        """An in-place op on a local tensor or a view of one: its functional twin, written back into the tensor."""
        root, chain, _ = self.local[node.args[0].name]
        module = node_module(node)
        with source_loc(f"{loc} ({module})" if loc and module else loc):
            try:
                view, *rest = self._args(node)
                new = ATEN[functional_twin(name) or ""](self, view, *rest)
                new = new if new.dtype is view.dtype else ew.cast(new, view.dtype)
                write_back(self, root, chain, new)
            except AotcError as e:
                raise type(e)(f"{where}{name}: {e}") from None
        self.local[node.name] = (root, chain, root.version)
        return new

    def _follow(self, node: Any) -> None:
        """A local tensor as it is made, and each view of one with the path from it (local_writes.py)."""
        if node.name in self.local_roots:
            self.local[node.name] = (Followed(self.env[node.name]), (), 0)
            return
        base = node.args[0] if node.args else None
        seen = self.local.get(getattr(base, "name", ""))
        kind = None if seen is None or writes_first(node) else link(node)
        if kind is None:
            return
        root, chain, _ = seen
        step = (target_name(node.target), tuple(self._args(node)[1:])) if kind == "view" else ("same", ())
        self.local[node.name] = (root, (*chain, step), root.version)

    def _conform(self, node: Any, name: str, out: Any) -> Any:
        """Cast to torch's dtype where aotc's promotion differs; a shape that differs from torch's at the example
        sizes is a bug in a translation and stops the import."""
        torch = require_torch()
        val = node.meta.get("val")
        if isinstance(out, Complex) and isinstance(val, torch.Tensor) and val.is_complex():
            part = val.dtype.to_real()
            return Complex(
                self._conform_tensor(out.real, part, val.shape), self._conform_tensor(out.imag, part, val.shape)
            )
        if isinstance(out, Tensor) and isinstance(val, torch.Tensor):
            return self._conform_tensor(out, val.dtype, val.shape)
        if isinstance(out, (tuple, list)) and isinstance(val, (tuple, list)) and len(out) == len(val):
            return type(out)(self._conform_item(node, name, o, v) for o, v in zip(out, val))
        return out

    def _conform_tensor(self, out: Tensor, dtype: Any, shape: Sequence[Any]) -> Tensor:
        want = aotc_dtype(dtype)
        if out.dtype is not want:
            out = ew.cast(out, want)
        got = out._v().type.shape
        hints = self.tracer.ctx.hints
        if len(got) != len(shape):
            raise UnsupportedError(f"aotc's translation has rank {len(got)}, torch's result rank {len(shape)}")
        for a, b in zip(got, shape):
            hint = _hint(b)
            if hint is not None and evaluate(a, hints) != hint:
                raise UnsupportedError(
                    f"aotc's translation has shape {tuple(str(d) for d in got)} where torch has "
                    f"{tuple(shape)} at the example sizes"
                )
        return out

    def _conform_item(self, node: Any, name: str, out: Any, val: Any) -> Any:
        torch = require_torch()
        if isinstance(out, Tensor) and isinstance(val, torch.Tensor):
            want = aotc_dtype(val.dtype)
            return out if out.dtype is want else ew.cast(out, want)
        return out

    def _output(self, x: Any, i: int) -> Any:
        torch = require_torch()
        v = self._value(x) if isinstance(x, torch.fx.Node) else x
        if isinstance(v, Tensor):
            return v
        if isinstance(v, Complex):
            loc = node_loc(x) if hasattr(x, "meta") else ""
            raise UnsupportedError(
                f"{loc + ': ' if loc else ''}output {i} is a complex tensor: aotc's outputs are real "
                "tensors; return torch.view_as_real(...) of it (its real and imaginary parts in a last dim of 2)"
            )
        if isinstance(v, (int, SymInt)):
            return T.full((), v, dtype=DType.int64)
        if v is None:
            return None
        raise UnsupportedError(f"output {i} is a {type(v).__name__}; aotc models return tensors")


def _hint(d: Any) -> int | None:
    if isinstance(d, int):
        return d
    try:
        h = d.node.hint
    except AttributeError:
        return None
    return int(h) if h is not None else None


def _refuse_data_dependent(node: Any, name: str, where: str) -> None:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    val = node.meta.get("val")
    try:
        unbacked = free_unbacked_symbols(val) if val is not None else set()
    except (TypeError, AttributeError):
        unbacked = set()
    if unbacked:
        names = ", ".join(sorted(str(s) for s in unbacked))
        raise TraceError(
            f"{where}{name} gives a data-dependent shape (its size {names} depends on tensor values, known only "
            "at run time): aotc compiles shapes that follow from the input sizes"
        )


def _unflatten(spec: Any, leaves: Any) -> Any:
    """The output structure: dicts, ModelOutputs and dataclasses as dicts of their keys, tuples and lists as such."""
    if spec.is_leaf():
        return next(leaves)
    kids = [_unflatten(c, leaves) for c in spec.children()]
    typ, ctx = spec.type, spec.context
    if typ is tuple or (isinstance(typ, type) and issubclass(typ, tuple) and not hasattr(typ, "_fields")):
        return tuple(kids)  # a torch.return_types struct sequence (topk's, max's values and indices) as a tuple
    if typ is list:
        return kids
    if typ is type(None):
        return None
    keys = list(ctx) if isinstance(ctx, (list, tuple)) else list(getattr(typ, "_fields", ()))
    if len(keys) != len(kids) or not all(isinstance(k, str) for k in keys):
        raise UnsupportedError(f"outputs of type {typ.__name__} are not supported (tensors, tuples, lists, dicts)")
    return {k: v for k, v in zip(keys, kids) if v is not None}


def size_of_input(user_inputs: Sequence[Tensor], names: Sequence[str]) -> Any:
    """``size_of(source, axis)`` for guard code: ``L['x'].size()[1]`` is dim 1 of the input named x."""
    by_source: dict[str, int] = {}
    for i, n in enumerate(names):
        by_source[f"L['{n}']"] = i
        by_source[f"L['args'][{i}]"] = i
        by_source[f"L['kwargs']['{n}']"] = i

    def size_of(source: str, axis: int) -> Any:
        from aotc.torch_export.symbols import Untranslatable

        if source not in by_source:
            raise Untranslatable(f"{source} is not one of the inputs {list(names)}")
        d = user_inputs[by_source[source]]._v().type.shape[axis]
        return as_dim(d)

    return size_of


def require(tracer: Tracer, lhs: Any, rel: str, rhs: Any, what: str) -> None:
    """A fact torch recorded: proven by aotc's ranges, or a guard; one false at the example sizes is an error."""
    try:
        tracer.ctx.require(lhs, rel, rhs, what)
    except ShapeError as e:
        raise TraceError(str(e)) from None
