"""``torch.export.ExportedProgram`` -> aotc Graph, and the one entry point for both torch paths (``import_torch``).

An ExportedProgram brings its own symbols: each torch symbol of a user input's shape becomes an aotc symbol named
as the user named its ``torch.export.Dim`` (``batch``, never ``s72``), with torch's range; a derived dim (``2*b``)
becomes that expression over its root. A dim without a finite max is refused, saying how to give one. Then the
graph is translated like a module's (``module``), at the example sizes torch traced with.

A program ``torch.export.save`` wrote and ``torch.export.load`` read back has lost those names (torch keeps only
``s0``-style symbols): its dims are named after their input and axis (``x_0``) unless ``dim_names`` names them,
as ``{"x": {0: "batch"}}`` (the shape of torch's ``dynamic_shapes``; ``aotc compile model.pt2 --dim-name
x:0=batch``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from aotc.errors import ShapeError, TraceError
from aotc.frontend.context import Tracer, TraceShapeCtx
from aotc.frontend.elementwise import wrap
from aotc.frontend.pinned import warn_pinned
from aotc.frontend.spec import TensorSpec
from aotc.frontend.tensor import Tensor
from aotc.ir.graph import Graph, Symbol
from aotc.ir.symbolic import sym
from aotc.ir.types import TensorType
from aotc.ir.verify import verify
from aotc.torch_export._torch import aotc_dtype, is_exported_program, is_torch_module, require_torch
from aotc.torch_export.module import TorchModel, bind_symbols, decompose, example_dims, user_placeholders
from aotc.torch_export.symbols import finite_int, single_symbol_refinements
from aotc.torch_export.translate import Translator

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def import_torch(
    model: Any,
    inputs: Mapping[str, TensorSpec] | None = None,
    *,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
    dim_names: Mapping[str, Mapping[int, str]] | None = None,
) -> Graph:
    """The high-level Graph of a torch.nn.Module (``inputs``: an aotc.TensorSpec per forward argument, as for an
    aotc.nn model) or of a ``torch.export.ExportedProgram`` (no ``inputs``: dims come from its dynamic_shapes;
    ``dim_names`` names them where a saved program lost the names, see the module docstring).
    ``progress("translate")`` is called when torch.export is done and the ATen graph's translation starts."""
    if is_exported_program(model):
        if inputs:
            raise ShapeError("an ExportedProgram brings its own input shapes: pass no inputs")
        if progress is not None:
            progress("translate")
        return import_exported_program(model, name=name, dim_names=dim_names)
    if dim_names:
        raise ShapeError("dim_names names the dims of an ExportedProgram; a module's dims are its inputs' aotc.Dims")
    if not is_torch_module(model):
        raise TraceError(f"expected a torch.nn.Module or ExportedProgram, got {type(model).__name__}")
    if inputs is None:
        raise ShapeError("a torch.nn.Module needs inputs: a dict of forward argument name -> aotc.TensorSpec")
    from aotc.frontend.trace import _check_inputs, trace

    specs = example_dims(_check_inputs(inputs))
    graph = trace(TorchModel(model, progress), specs, name=name or _name(type(model).__name__))
    return _refined(graph)


def import_exported_program(
    ep: Any, *, name: str | None = None, dim_names: Mapping[str, Mapping[int, str]] | None = None
) -> Graph:
    """The high-level Graph of an ExportedProgram (see the module docstring)."""
    require_torch()
    ep = decompose(ep)
    users = user_placeholders(ep)
    names = [n.name for n in users]
    symbols, sym_of, hints = _symbols(ep, users, _given_names(users, dim_names or {}))
    ctx = TraceShapeCtx({s.name: (s.min, s.max) for s in symbols}, {s.name: s.multiple_of for s in symbols}, hints)
    tracer = Tracer(ctx, Tensor)
    values = []
    for node in users:
        val = node.meta["val"]
        shape = tuple(d if isinstance(d, int) else _dim(d.node.expr, sym_of) for d in val.shape)
        values.append(tracer.builder.new_value(TensorType(aotc_dtype(val.dtype, f"input {node.name!r}"), shape)))
    from aotc.frontend.trace import _flatten

    with tracer.active():
        tensors = [wrap(v, tracer) for v in values]
        sym = bind_symbols(ep, tensors, names, tracer)
        out = Translator(ep, tracer, sym).run(tensors)
        leaves: list[Any] = []
        tree = _flatten(out, leaves, tracer)
    state_inputs, state_names, state_outputs, states = tracer.finish_states()
    graph = Graph(
        inputs=(*values, *state_inputs),
        input_names=(*names, *state_names),
        nodes=tuple(tracer.builder.nodes),
        outputs=(*leaves, *state_outputs),
        output_tree=tree,
        symbols=tuple(symbols),
        guards=tuple(ctx.guards),
        constants=tracer.constants,
        name=name or "model",
        states=states,
    )
    verify(graph, stage="torch.export import")
    return _refined(graph)


def _refined(graph: Graph) -> Graph:
    """Single-symbol guards folded into their dims' ranges and divisors, after a warning for each declared dim
    a guard pins or narrows (aotc/frontend/pinned.py)."""
    warn_pinned(graph.symbols, graph.guards, stacklevel=4)
    symbols, guards = single_symbol_refinements(graph.symbols, graph.guards)
    return graph.replace(symbols=tuple(symbols), guards=tuple(guards))


def _dim(expr: Any, sym_of: Mapping[str, Any]) -> Any:
    from aotc.torch_export.symbols import to_dim

    return to_dim(expr, lambda s: sym_of[s])


def _given_names(users: list[Any], dim_names: Mapping[str, Mapping[int, str]]) -> dict[str, str]:
    """``dim_names`` ({input: {axis: name}}) as torch symbol -> aotc name, each checked: a known input, an axis of
    it that is a dynamic dim of its own (not derived from another: name its root), one name per dim and per name."""
    by_input = {n.name: n for n in users}
    given: dict[str, str] = {}
    where: dict[str, str] = {}
    for input_name, axes in dim_names.items():
        node = by_input.get(input_name)
        if node is None:
            raise ShapeError(f"dim names: the program has no input {input_name!r}; its inputs are {list(by_input)}")
        shape = tuple(getattr(node.meta.get("val"), "shape", ()))
        for axis, dim_name in axes.items():
            at = f"{input_name}:{axis}"
            if isinstance(axis, bool) or not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                raise ShapeError(f"dim names: {at}: input {input_name!r} has {len(shape)} dims")
            if not isinstance(dim_name, str) or not dim_name.isidentifier() or dim_name in ("min", "max"):
                raise ShapeError(f"dim names: {at}={dim_name!r}: a dim name must be a Python identifier")
            d = shape[axis]
            if isinstance(d, int):
                raise ShapeError(f"dim names: {at} is static ({d}) in the program: only a dynamic dim takes a name")
            expr = d.node.expr
            if not expr.is_Symbol:
                raise ShapeError(f"dim names: {at} is {expr}, derived from another dim: name that dim instead")
            if given.get(expr.name, dim_name) != dim_name:
                raise ShapeError(f"dim names: {at} is the dim {where[expr.name]} named {given[expr.name]!r} already")
            if dim_name in given.values() and given.get(expr.name) != dim_name:
                raise ShapeError(f"dim names: {dim_name!r} names two different dims")
            given[expr.name], where[expr.name] = dim_name, at
    return given


def _symbols(
    ep: Any, users: list[Any], given: Mapping[str, str] | None = None
) -> tuple[list[Symbol], dict[str, Any], dict[str, int]]:
    """One aotc Symbol per torch root symbol of the input shapes, named after the user's torch Dim (or as
    ``given``: torch symbol -> name)."""
    given = given or {}
    shape_env = next(
        (d.node.shape_env for n in users for d in getattr(n.meta.get("val"), "shape", ()) if not isinstance(d, int)),
        None,
    )
    debug = dict(getattr(shape_env, "source_name_to_debug_name", None) or {})
    values = dict(getattr(shape_env, "backed_var_to_val", None) or getattr(shape_env, "var_to_val", None) or {})
    ranges = {str(k): v for k, v in ep.range_constraints.items()}
    named: dict[str, str] = {}  # torch symbol -> aotc name
    taken: set[str] = set(given.values())
    where: dict[str, str] = {}
    # plain symbols first: their position names them; roots seen only inside derived dims after
    for plain in (True, False):
        for node in users:
            for axis, d in enumerate(getattr(node.meta.get("val"), "shape", ())):
                if isinstance(d, int):
                    continue
                expr = d.node.expr
                if plain != bool(expr.is_Symbol):
                    continue
                label = debug.get(f"L['{node.name}'].size()[{axis}]", "")
                for s in sorted(expr.free_symbols, key=str):
                    if s.name in named:
                        continue
                    idents = _IDENT.findall(label)
                    want = idents[0] if len(idents) == 1 else f"{node.name}_{axis}"
                    name = given.get(s.name) or (want if want not in taken else f"{want}_{len(taken)}")
                    named[s.name] = name
                    taken.add(name)
                    where[s.name] = f"input {node.name!r} dim {axis}"
    symbols, hints = [], {}
    for s, name in named.items():
        vr = ranges.get(s)
        lo, hi = (finite_int(vr.lower) or 0, finite_int(vr.upper)) if vr is not None else (0, None)
        if hi is None:
            raise ShapeError(
                f"dim {name!r} ({where[s]}) has no finite max: aotc needs a range for every dynamic dim; give it one "
                f"in dynamic_shapes, e.g. torch.export.Dim({name!r}, min={max(lo, 1)}, max=4096)"
            )
        symbols.append(Symbol(name, lo, hi))
        hint = next((int(v) for k, v in values.items() if str(k) == s), None)
        hints[name] = hint if hint is not None else max(lo, min(hi, 2))
    return symbols, {s: sym(n) for s, n in named.items()}, hints


def _name(raw: str) -> str:
    return raw if raw.isidentifier() else "model"
