"""A ``torch.nn.Module`` as a function of aotc tensors: called inside an aotc trace, ``TorchModel`` exports the
module with ``torch.export`` at the trace's hint sizes (each dynamic dim ``Dim.DYNAMIC`` over its range), binds each
torch symbol to the aotc dim at the same input position, turns torch's guards and ranges into aotc facts and
translates the program onto the trace. ``aotc.compile(module, inputs)`` and ``aotc compile model.py`` both trace it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import logging
import math
import os
import re
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from aotc.errors import AotcError, TraceError
from aotc.frontend.context import Tracer, active_tracer, source_loc
from aotc.frontend.source_paths import source_path
from aotc.frontend.spec import Dim, TensorSpec
from aotc.frontend.symint import as_dim
from aotc.frontend.tensor import Tensor
from aotc.frontend.trace import collect_dims
from aotc.ir.symbolic import SymExpr, to_infix
from aotc.ir.symbolic_values import evaluate
from aotc.torch_export._torch import require_torch
from aotc.torch_export.inplace import inplace_plan
from aotc.torch_export.state_writes import written_placeholders
from aotc.torch_export.symbols import Untranslatable, finite_int, guard_facts, to_dim
from aotc.torch_export.table import decomposition_table
from aotc.torch_export.translate import Translator, refuse_mutations, require, size_of_input

_TORCH_DTYPES = {"float32", "float16", "bfloat16", "int64", "int32", "bool"}
# Example sizes for a dim without an explicit hint, as multiples of its multiple_of: divisible by the small factors
# a model reshapes by (heads, windows, patches), distinct per dim, never 0 or 1 (torch specializes those).
_EXAMPLE_FACTORS = (8, 16, 12, 24, 32, 4, 6, 10, 20, 40, 48, 64, 2, 3, 5, 7, 9, 11, 13)


def example_dims(inputs: Mapping[str, TensorSpec]) -> dict[str, TensorSpec]:
    """``inputs`` with every Dim given a hint (its example size) that torch.export traces well at."""
    dims = collect_dims(inputs)
    taken: set[int] = {d.hint for d in dims.values() if d.hint is not None}
    hinted: dict[str, Dim] = {}
    for name, d in dims.items():
        if d.hint is None:
            pick = next(
                (
                    d.multiple_of * k
                    for k in _EXAMPLE_FACTORS
                    if d.min <= d.multiple_of * k <= d.max and d.multiple_of * k not in taken
                ),
                None,
            )
            if pick is None:
                pick = d.default_hint(taken)
            taken.add(pick)
            d = Dim(d.name, d.min, d.max, d.multiple_of, hint=pick)
        hinted[name] = d
    return {
        n: TensorSpec(tuple(hinted[x.name] if isinstance(x, Dim) else x for x in s.shape), s.dtype)
        for n, s in inputs.items()
    }


class TorchModel:
    """A torch.nn.Module, traced by aotc through torch.export (see the module docstring)."""

    def __init__(self, module: Any, progress: Callable[[str], None] | None = None) -> None:
        self.module = module
        self.progress = progress
        self.__name__ = type(module).__name__
        try:  # the trace binds inputs to forward's parameters by name
            self.__signature__ = inspect.signature(module.forward)
        except (TypeError, ValueError):
            pass
        self.exported: Any = None  # the ExportedProgram of the last trace

    def __call__(self, *args: Tensor, **kwargs: Tensor) -> Any:
        tracer = active_tracer("a torch model")
        ep = export_at_hints(self.module, args, kwargs, tracer)
        self.exported = ep
        if self.progress is not None:
            self.progress("translate")
        tensors = [*args, *kwargs.values()]
        names = [n.name for n in user_placeholders(ep)]
        sym_of = bind_symbols(ep, tensors, names, tracer)
        return Translator(ep, tracer, sym_of).run(tensors)


def user_placeholders(ep: Any) -> list[Any]:
    users = {s.arg.name for s in ep.graph_signature.input_specs if str(s.kind).endswith("USER_INPUT")}
    return [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in users]


def export_at_hints(module: Any, args: Sequence[Tensor], kwargs: Mapping[str, Tensor], tracer: Tracer) -> Any:
    """torch.export of ``module`` on example tensors of the trace's hint sizes, each dynamic dim ``Dim.DYNAMIC`` over
    its range; then torch's decompositions for every op the ATen table does not keep whole."""
    torch = require_torch()
    ctx = tracer.ctx
    sources: dict[str, str] = {}  # torch source of a dynamic dim -> its aotc dim, for messages

    def example(name: str, t: Tensor) -> tuple[Any, dict[int, Any]]:
        dt = t.dtype.value
        if dt not in _TORCH_DTYPES:
            raise TraceError(f"input {name!r} has dtype {dt}, which torch models don't take")
        shape = [evaluate(as_dim(d), ctx.hints) for d in t._v().type.shape]
        tdt = getattr(torch, dt)
        value = torch.randn(shape, dtype=tdt) if t.dtype.is_float else torch.ones(shape, dtype=tdt)
        dyn = {}
        for axis, d in enumerate(t._v().type.shape):
            if isinstance(d, SymExpr):
                lo, hi = ctx.bounds(d)
                dyn[axis] = torch.export.Dim.DYNAMIC(min=lo, max=hi)
                sources[f"L['{name}'].size()[{axis}]"] = to_infix(d)
        return value, dyn

    # aotc's trace passes each input by name, or by position to a positional-only parameter (named like it)
    params = list(inspect.signature(module.forward).parameters)
    named = [(params[i] if i < len(params) else f"args_{i}", t) for i, t in enumerate(args)] + list(kwargs.items())
    examples = {name: example(name, t) for name, t in named}
    ex_args = tuple(examples[name][0] for name, _ in named[: len(args)])
    ex_kwargs = {name: examples[name][0] for name in kwargs}
    dyn = [examples[name][1] or None for name, _ in named]
    dynamic: Any = dict(zip(kwargs, dyn)) if kwargs else tuple(dyn)
    training = module.training
    module.eval()  # inference: dropout off, batch norm on its running statistics; the caller's mode comes back
    with _symbol_log() as log, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's and the model library's notices are not the user's problem here
        try:
            ep = torch.export.export(module, ex_args, ex_kwargs, dynamic_shapes=dynamic, strict=False)
        except AotcError:
            raise
        except Exception as e:
            raise _export_error(e, sources, log) from None
        finally:
            module.train(training)
    return decompose(ep)


def decompose(ep: Any) -> Any:
    """``ep`` with every op outside the ATen table decomposed by torch to core ATen (the table's ops stay whole).
    Unchanged when the table covers it already, in-place ops included where the Translator can run them
    (inplace.py: an op on a value nothing else sees, ``x = relu_(conv(x))``, or writes into a fresh tensor through
    slices and selects, ``out[:, i] = v``): torch's decomposition pass, the slowest step of an import, is skipped."""
    refuse_mutations(ep)
    if inplace_plan(ep.graph, written_placeholders(ep)) is not None:
        return ep
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation notices from inside run_decompositions
        ep = ep.run_decompositions(decomposition_table())
    refuse_mutations(ep)
    return ep


def bind_symbols(ep: Any, tensors: Sequence[Tensor], names: Sequence[str], tracer: Tracer) -> Any:
    """Each torch symbol -> the aotc dim at the input position where it first appears; torch's ranges and guard
    code become facts over those dims (proven, or guards). A guard aotc cannot express is refused."""
    torch = require_torch()
    sym_of: dict[str, Any] = {}
    deferred: list[tuple[Any, Any, str]] = []
    for t, name, node in zip(tensors, names, user_placeholders(ep)):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise TraceError(f"input {name!r} is not a tensor in the exported program")
        for axis, (mine, theirs) in enumerate(zip(t._v().type.shape, val.shape)):
            where = f"input {name!r} dim {axis}"
            if isinstance(theirs, int):
                if isinstance(mine, SymExpr):
                    raise TraceError(f"{where} ({to_infix(mine)}): torch specialized it to the constant {theirs}")
                continue
            expr = theirs.node.expr
            if expr.is_Symbol and expr.name not in sym_of:
                sym_of[expr.name] = mine
            else:
                deferred.append((expr, mine, where))

    def sym(name: str) -> Any:
        if name not in sym_of:
            raise Untranslatable(f"torch symbol {name} appears in no input shape")
        return sym_of[name]

    try:
        for expr, mine, where in deferred:
            with source_loc(f"torch's {where}: {expr}"):
                require(tracer, to_dim(expr, sym), "==", mine, f"{where} (torch: {expr})")
        for key, vr in ep.range_constraints.items():
            if any(s.name not in sym_of for s in key.free_symbols):
                continue  # a data-dependent size: the node that makes it is refused, naming its line
            e = to_dim(key, sym)
            if isinstance(e, int):
                continue
            lo, hi = finite_int(vr.lower) or 0, finite_int(vr.upper)
            # torch floors every Dim.DYNAMIC size at 2 (it traces sizes 0 and 1 as "any size", as a named Dim's
            # min=1 says): a min of 2 is that floor, not a fact about the model
            what = f"torch's range for {to_infix(e)}"
            with source_loc(what):
                if lo > 2 or not e.is_symbol():
                    require(tracer, e, ">=", lo, what)
                if hi is not None:
                    require(tracer, e, "<=", hi, what)
        size_of = size_of_input(tensors, names)
        for code in dict.fromkeys(getattr(ep, "_guards_code", None) or ()):
            for lhs, rel, rhs in guard_facts(code, size_of, lambda alts: _alternative(tracer, alts)):
                if not _holds_everywhere(tracer.ctx, lhs, rel, rhs):
                    with source_loc(f"torch guard {code}"):
                        require(tracer, lhs, rel, rhs, f"torch guard {code}")
    except Untranslatable as e:
        raise TraceError(
            f"torch recorded a shape fact aotc cannot express ({e}); refusing rather than dropping it"
        ) from None
    return sym


def _alternative(tracer: Tracer, alternatives: list[list[Any]]) -> list[Any]:
    """What to require of ``a or b``: nothing when the ranges prove one alternative, else the one that holds at the
    example sizes (see ``symbols.guard_facts``)."""
    ctx = tracer.ctx
    for facts in alternatives:
        if all(ctx.proves(*f) for f in facts):
            return []
    for facts in alternatives:
        if all(_holds(ctx, *f) for f in facts):
            return facts
    raise Untranslatable("no alternative of a disjunction holds at the example sizes")


# Bindings enumerated at most to find that a torch guard holds at every size the ranges allow.
MAX_ENUMERATED = 1 << 12


def _holds_everywhere(ctx: Any, lhs: Any, rel: str, rhs: Any) -> bool:
    """Whether ``lhs rel rhs`` holds for every binding of its dims in their ranges, by enumeration where they are
    few (torch's guards are many and long; proving each symbolically against all the others is quadratic)."""
    names = sorted(set().union(*(d.free_symbols() for d in (lhs, rhs) if isinstance(d, SymExpr))))
    axes = []
    for n in names:
        lo, hi = ctx.ranges[n]
        step = ctx.multiples.get(n, 1)
        axes.append(range(-(-lo // step) * step, hi + 1, step))
    if math.prod(len(a) for a in axes) > MAX_ENUMERATED:
        return False
    hints = ctx.hints
    try:
        for values in itertools.product(*axes):
            ctx.hints = dict(zip(names, values))
            if not _holds(ctx, lhs, rel, rhs):
                return False
    except (ZeroDivisionError, AotcError):  # a divisor of 0 somewhere in the ranges: not for enumeration to decide
        return False
    finally:
        ctx.hints = hints
    return True


def _holds(ctx: Any, lhs: Any, rel: str, rhs: Any) -> bool:
    a, b = evaluate(lhs, ctx.hints), evaluate(rhs, ctx.hints)
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[rel]


# -- torch.export's errors as one line ---------------------------------------------------------------------------


class _Log(logging.Handler):
    """Keeps what torch's shape environment says while exporting: which symbol is which input dim, and where each
    guard was added (the user's line)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.source_of: dict[str, str] = {}
        self.guard_locs: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        msg = str(record.msg)
        if msg.startswith("create_symbol") and len(args) >= 3:
            self.source_of[str(args[0])] = str(args[2])
        elif "[guard added]" in msg and len(args) >= 3:
            # torch's own frame for the guard may be inside torch (an nn.GRU's aten call, torch/_ops.py): the
            # model's line is the innermost frame on the stack that is not torch's, aotc's or the standard library's
            self.guard_locs.append((str(args[1]), _model_frame() or _sloc(args[2])))


def _sloc(sloc: Any) -> str:
    frame = getattr(sloc, "framework_loc", None)
    if frame is not None and hasattr(frame, "filename"):
        return f"{source_path(frame.filename)}:{frame.lineno}"
    user = getattr(sloc, "maybe_user_loc", None)
    return str(user or "")


@functools.cache
def _not_model() -> tuple[str, ...]:
    """Where no model code lives: torch, aotc and the standard library (a Hugging Face or torchvision modeling
    file, in site-packages, is the model's)."""
    torch = require_torch()
    dirs = [os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    dirs.append(sysconfig.get_paths()["stdlib"])
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


def _model_frame() -> str:
    """``file:line`` of the innermost frame of the running stack in the model's code, or ""."""
    skip = _not_model()
    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if not path.startswith("<") and not os.path.realpath(path).startswith(skip):
            return f"{source_path(path)}:{f.f_lineno}"
        f = f.f_back
    return ""


def _model_line(frames: Sequence[tuple[str, str]]) -> str:
    """``file:line`` of the innermost of a traceback's ``(file, line)`` frames in the model's code, else of the
    innermost frame."""
    if not frames:
        return ""
    path, line = (_in_model(frames) or frames)[-1]
    return f"{source_path(path)}:{line}"


def _in_model(frames: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``(file, line)`` frames in the model's code: outside torch, aotc and the stdlib."""
    skip = _not_model()
    return [f for f in frames if not f[0].startswith("<") and not os.path.realpath(f[0]).startswith(skip)]


@contextlib.contextmanager
def _symbol_log() -> Iterator[_Log]:
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    handler = _Log()
    level, propagate, others = logger.level, logger.propagate, list(logger.handlers)
    for h in others:  # torch's own stderr handler would print every INFO line we ask for
        logger.removeHandler(h)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        for h in others:
            logger.addHandler(h)
        logger.setLevel(level)
        logger.propagate = propagate


_SPECIALIZED = re.compile(
    r"(L\[[^\]]+\]\.size\(\)\[\d+\]) as dynamic but your code specialized it to be a constant \((-?\d+)\)"
)
_ZERO_ONE = re.compile(r"0/1 specialized due to hint of (\d) for dimension inputs\['(\w+)'\]\.shape\[(\d+)\]")
_USER_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _export_error(e: Exception, sources: Mapping[str, str], log: _Log) -> AotcError:
    """torch.export's error as one aotc line naming the dim (by its aotc name) and the model's source line."""
    text = str(e)
    m = _SPECIALIZED.search(text)
    if m:
        source, value = m.group(1), m.group(2)
        dim = sources.get(source, source)
        sym = next((s for s, src in log.source_of.items() if src == source), None)
        loc = next((loc for expr, loc in log.guard_locs if sym and re.search(rf"\b{sym}\b", expr)), "")
        at = f"{loc}: " if loc else ""
        return TraceError(
            f"{at}dim {dim!r} ({source.replace('.size()', '.shape')}) is declared dynamic, but the model specialized "
            f"it to the constant {value} here; make the code size-generic, or declare the dim static"
        )
    m = _ZERO_ONE.search(text)
    if m:
        source = f"L['{m.group(2)}'].size()[{m.group(3)}]"
        return TraceError(
            f"dim {sources.get(source, source)!r} of input {m.group(2)!r} has the example size {m.group(1)}, which "
            "torch specializes (0 and 1 are special sizes): give the Dim a hint >= 2 or a min >= 2"
        )
    if "data-dependent" in text or type(e).__name__ in ("GuardOnDataDependentSymNode", "DataDependentOutputException"):
        frames = _USER_FRAME.findall(text.split("The following call raised this error:")[-1])
        at = f"{_model_line(frames)}: " if frames else ""
        first = text.strip().splitlines()[0]
        return TraceError(f"{at}the model's shapes depend on tensor values (data-dependent: {first}); aotc compiles "
                          "shapes that follow from the input sizes")  # fmt: skip
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(e).__name__)
    # the model's own line where torch's trace of it raised (a None where the model wants a tensor, ...)
    ours = _in_model([(f.filename, str(f.lineno)) for f in traceback.extract_tb(e.__traceback__)])
    at = f"{_model_line(ours)}: " if ours else ""
    return TraceError(f"{at}torch.export could not capture the model: {type(e).__name__}: {first}")
