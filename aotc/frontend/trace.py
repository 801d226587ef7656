"""``trace(model, inputs)``: run the model once on symbolic tensors and capture a high-level Graph."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from aotc.errors import ShapeError, TraceError
from aotc.frontend.context import Tracer, TraceShapeCtx, traceback_loc
from aotc.frontend.module import Module
from aotc.frontend.spec import Dim, TensorSpec
from aotc.frontend.tensor import Tensor
from aotc.ir.graph import Graph, Symbol
from aotc.ir.symbolic import sym
from aotc.ir.types import TensorType, Value
from aotc.ir.verify import verify

_INPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def collect_dims(inputs: Mapping[str, TensorSpec]) -> dict[str, Dim]:
    """One Dim per name across all inputs; the same name with different settings is an error."""
    dims: dict[str, Dim] = {}
    for input_name, spec in inputs.items():
        for d in spec.dims():
            seen = dims.setdefault(d.name, d)
            if seen is not d and seen.key() != d.key():
                raise ShapeError(
                    f"input {input_name!r} uses Dim {d!r}, but another input uses {seen!r} under the same name"
                )
    return dims


def pick_hints(dims: Mapping[str, Dim]) -> dict[str, int]:
    """Explicit hints as given; the others distinct from every hint chosen so far (see ``Dim``)."""
    hints = {n: d.hint for n, d in dims.items() if d.hint is not None}
    for n, d in dims.items():
        if n not in hints:
            hints[n] = d.default_hint(taken=hints.values())
    return hints


def _check_inputs(inputs: Any) -> dict[str, TensorSpec]:
    if not isinstance(inputs, Mapping) or not inputs:
        raise ShapeError("inputs must be a non-empty mapping of input name -> TensorSpec")
    for name, spec in inputs.items():
        if not isinstance(name, str) or not _INPUT_NAME.match(name):
            raise ShapeError(f"input name {name!r} must be a Python identifier")
        if not isinstance(spec, TensorSpec):
            raise ShapeError(f"input {name!r} must be described by a TensorSpec, got {type(spec).__name__}")
    return dict(inputs)


def trace(model: Module | Callable[..., Any], inputs: Mapping[str, TensorSpec], name: str = "model") -> Graph:
    """Capture ``model`` (an ``nn.Module`` or a function of tensors) as a graph with symbols and guards.

    Inputs are passed by keyword: every key of ``inputs`` names a parameter of ``forward`` (or of the function),
    and every parameter without a default has an input.
    """
    specs = _check_inputs(inputs)
    if not callable(model):
        raise TraceError(f"model must be an nn.Module or a function, got {type(model).__name__}")
    dims = collect_dims(specs)
    states = _states(model, dims, specs)
    hints = pick_hints(dims)
    ctx = TraceShapeCtx(
        {n: (d.min, d.max) for n, d in dims.items()}, {n: d.multiple_of for n, d in dims.items()}, hints
    )
    tracer = Tracer(ctx, Tensor)
    if isinstance(model, Module):
        state = list(model.named_parameters()) + list(model.named_buffers())
        tracer.param_names.update({id(t): key for key, t in state})
        tracer.module_names.update({id(m): path for path, m in model.named_modules() if path})
        tracer.reserve_names([key for key, _ in state] + list(model.state_dict()))
    values = []
    for spec in specs.values():
        shape = tuple(sym(d.name) if isinstance(d, Dim) else d for d in spec.shape)
        values.append(tracer.builder.new_value(TensorType(spec.dtype, shape)))
    for state_name, st in states:
        shape = tuple(sym(d.name) if isinstance(d, Dim) else d for d in st.spec)
        tracer.open_state(st, state_name, tracer.builder.new_value(TensorType(st.state_dtype, shape)))

    with tracer.active():
        tensors = {n: Tensor(v, tracer) for n, v in zip(specs, values)}
        args, kwargs = _arguments(model, tensors)
        try:
            out = model(*args, **kwargs)
        except ShapeError as e:  # raised by shape code outside an op; name the user's line
            loc = traceback_loc(e.__traceback__)
            raise TraceError(f"{loc}: {e}" if loc else str(e)) from None
        leaves: list[Value] = []
        tree = _flatten(out, leaves, tracer)
    if not leaves:
        raise TraceError(f"{_name(model)} returned no tensors")
    state_inputs, state_names, state_outputs, graph_states = tracer.finish_states()
    taken = [n for n in state_names if n in specs]
    if taken:
        raise TraceError(f"state {taken[0]!r} has the name of an input; rename one of them")
    graph = Graph(
        inputs=(*values, *state_inputs),
        input_names=(*specs, *state_names),
        nodes=tuple(tracer.builder.nodes),
        outputs=(*leaves, *state_outputs),
        output_tree=tree,
        symbols=tuple(Symbol(n, d.min, d.max, d.multiple_of) for n, d in dims.items()),
        guards=tuple(ctx.guards),
        constants=tracer.constants,
        name=name,
        states=graph_states,
    )
    verify(graph, stage="trace")
    return graph


def _states(model: Any, dims: Mapping[str, Dim], specs: Mapping[str, TensorSpec]) -> list[tuple[str, Any]]:
    """The model's states (``Module.state``) by path; each Dim in a state's shape must be one an input declares."""
    if not isinstance(model, Module):
        return []
    states = list(model.named_states())
    for path, st in states:
        if path in specs:
            raise TraceError(f"state {path!r} has the name of an input; rename one of them")
        for d in st.spec:
            if isinstance(d, Dim) and (d.name not in dims or dims[d.name].key() != d.key()):
                raise TraceError(
                    f"state {path!r} has the dynamic dim {d!r}, which no input declares: a call binds a dim from "
                    "its inputs' shapes, so give some input that Dim"
                )
    return states


def _name(model: Any) -> str:
    return type(model).__name__ if isinstance(model, Module) else getattr(model, "__name__", repr(model))


def _arguments(model: Any, tensors: dict[str, Tensor]) -> tuple[tuple, dict]:
    """``tensors`` as keyword arguments of forward. Only names bind: matching by position would let a spec named
    ``a`` feed a parameter ``b`` and give a wrong answer with no error."""
    fn = model.forward if isinstance(model, Module) else model
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise TraceError(
            f"cannot read the parameters of {_name(model)}, so the inputs {list(tensors)} cannot be matched to them "
            "by name; wrap it in a function whose parameters are named like the inputs"
        ) from None
    params = list(sig.parameters.values())
    named = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    missing = [p.name for p in params if p.name in named and p.default is p.empty and p.name not in tensors]
    unknown = [k for k in tensors if k not in named and not takes_any]
    if missing or unknown:
        what = [f"no input for parameter(s) {missing}"] if missing else []
        what += [f"input(s) {unknown} name no parameter"] if unknown else []
        raise TraceError(
            f"the inputs {list(tensors)} do not match the parameters of {_name(model)}{sig} by name: "
            f"{'; '.join(what)} (inputs bind by name only; name each input after its forward parameter)"
        )
    # a positional-only parameter (``operator.add(a, b, /)``) still binds by its name, but is passed by position
    positional = [p.name for p in params if p.kind is p.POSITIONAL_ONLY and p.name in tensors]
    return tuple(tensors[n] for n in positional), {n: t for n, t in tensors.items() if n not in positional}


def _flatten(obj: Any, leaves: list[Value], tracer: Tracer) -> Any:
    """The output tree (see ``Graph``) of what forward returned, collecting its tensors."""
    if isinstance(obj, Tensor):
        if obj._t() is not tracer:
            raise TraceError("forward returned a tensor from another trace (one kept from an earlier call?)")
        leaves.append(obj._v())
        return len(leaves) - 1
    if isinstance(obj, np.ndarray):
        leaves.append(tracer.constant(obj, obj))
        return len(leaves) - 1
    if isinstance(obj, tuple):
        return {"tuple": [_flatten(o, leaves, tracer) for o in obj]}
    if isinstance(obj, list):
        return {"list": [_flatten(o, leaves, tracer) for o in obj]}
    if isinstance(obj, dict):
        bad = [k for k in obj if not isinstance(k, str)]
        if bad:
            raise TraceError(f"output dict keys must be strings, got {bad[0]!r}")
        return {"dict": [[k, _flatten(v, leaves, tracer)] for k, v in obj.items()]}
    raise TraceError(
        f"forward returned a {type(obj).__name__}; outputs must be tensors, or tuples, lists and dicts of tensors"
    )
