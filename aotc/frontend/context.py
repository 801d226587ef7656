"""The state of one trace: the builder, the guard-recording shape context, constants and the user's location."""

from __future__ import annotations

import contextvars
import functools
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import numpy as np

from aotc.errors import ShapeError, TraceError
from aotc.frontend.source_paths import source_path
from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType, dtype_of
from aotc.ir.graph import Guard
from aotc.ir.ops import VIEWS, Op
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic import SymExpr, mod, to_infix
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import ShapeDim, Value

_AOTC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NEGATE = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_CMP = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


@functools.cache
def _in_aotc(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_AOTC_DIR)


# Set while an importer translates one node of an external graph: that node's source line stands for the user's.
_SOURCE_LOC: contextvars.ContextVar[str | None] = contextvars.ContextVar("aotc_source_loc", default=None)


@contextmanager
def source_loc(loc: str) -> Iterator[None]:
    """Within this block, ``user_loc()`` (guards, node locations, trace errors) is ``loc``: the line an importer
    read off the external graph (a torch.export node's stack trace) rather than a frame of the importer."""
    token = _SOURCE_LOC.set(loc)
    try:
        yield
    finally:
        _SOURCE_LOC.reset(token)


def user_loc() -> str:
    """``file:line`` of the innermost frame outside the aotc package: the user's model code."""
    forced = _SOURCE_LOC.get()
    if forced is not None:
        return forced
    f = sys._getframe(1)
    while f is not None and _in_aotc(f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return ""
    return f"{source_path(f.f_code.co_filename)}:{f.f_lineno}"


def traceback_loc(tb: TracebackType | None) -> str:
    """``file:line`` of the innermost user frame in a traceback."""
    loc = ""
    for frame, lineno in traceback.walk_tb(tb):
        if not _in_aotc(frame.f_code.co_filename):
            loc = f"{source_path(frame.f_code.co_filename)}:{lineno}"
    return loc


def trace_error(msg: str) -> TraceError:
    loc = user_loc()
    return TraceError(f"{loc}: {msg}" if loc else msg)


class TraceShapeCtx(ShapeCtx):
    """Decides dim facts with the symbols' hints: a fact that holds at the hints but can't be
    proven for the whole range becomes a guard at the user's line; one that fails at the hints
    is an error."""

    def __init__(self, ranges: Mapping[str, tuple[int, int]], multiples: Mapping[str, int], hints: Mapping[str, int]):
        super().__init__(ranges, multiples)
        self.hints = dict(hints)
        self.guards: list[Guard] = []
        self._seen: set[tuple[Any, str, Any]] = set()

    def hint(self, e: ShapeDim) -> int:
        return evaluate(e, self.hints)

    def proves(self, lhs: ShapeDim, rel: str, rhs: ShapeDim) -> bool:
        if (lhs, rel, rhs) in self._seen:
            return True
        if rel == "==":
            return self.known_equal(lhs, rhs)
        if rel == "!=":
            return self.proves(lhs, "<", rhs) or self.proves(lhs, ">", rhs)
        try:
            super().check_true(lhs, rel, rhs, "")
        except ShapeError:
            return False
        return True

    def decide(self, lhs: ShapeDim, rel: str, rhs: ShapeDim) -> bool:
        """Answer ``lhs rel rhs`` as Python needs it, guarding the answer unless it holds everywhere."""
        if self.proves(lhs, rel, rhs):
            return True
        if self.proves(lhs, _NEGATE[rel], rhs):
            return False
        answer = _CMP[rel](self.hint(lhs), self.hint(rhs))
        self.record(lhs, rel if answer else _NEGATE[rel], rhs)
        return answer

    def record(self, lhs: ShapeDim, rel: str, rhs: ShapeDim) -> None:
        lhs, rel, rhs = _tidy(lhs, rel, rhs)
        if (lhs, rel, rhs) in self._seen:
            return
        self._seen.add((lhs, rel, rhs))
        self.guards.append(Guard(lhs, rel, rhs, user_loc()))
        self.add_fact(lhs, rel, rhs)

    def require(self, lhs: ShapeDim, rel: str, rhs: ShapeDim, what: str) -> None:
        """Require ``lhs rel rhs``: proven, or true at the hints (guarded), else a ShapeError."""
        if self.proves(lhs, rel, rhs):
            return
        if not _CMP[rel](self.hint(lhs), self.hint(rhs)):
            raise ShapeError(f"{what}: {to_infix(lhs)} {_NEGATE[rel]} {to_infix(rhs)}{self._at_hints(lhs, rhs)}")
        self.record(lhs, rel, rhs)

    def _at_hints(self, *es: ShapeDim) -> str:
        names = sorted({n for e in es if isinstance(e, SymExpr) for n in e.free_symbols()})
        return " at the trace hints (" + ", ".join(f"{n}={self.hints[n]}" for n in names) + ")" if names else ""

    # -- the hooks the op table's shape rules call ---------------------------------------------
    def require_equal(self, a: ShapeDim, b: ShapeDim, what: str) -> None:
        self.require(a, "==", b, what)

    def check_true(self, lhs: ShapeDim, rel: str, rhs: ShapeDim, what: str) -> None:
        self.require(lhs, rel, rhs, what)


_MIRROR = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _tidy(lhs: ShapeDim, rel: str, rhs: ShapeDim) -> tuple[ShapeDim, str, ShapeDim]:
    """The same fact, written to read well: the symbolic side first, ``x % k == 0`` for ``c*(x % k) == 0``."""
    if isinstance(lhs, int) and isinstance(rhs, SymExpr):
        lhs, rel, rhs = rhs, _MIRROR[rel], lhs
    if rel in ("==", "!=") and rhs == 0 and isinstance(lhs, SymExpr) and not lhs.const and len(lhs.terms) == 1:
        mono, _ = lhs.terms[0]
        if len(mono) == 1 and mono[0].kind == "mod":
            return mod(*mono[0].args), rel, 0
    return lhs, rel, rhs


_ACTIVE: contextvars.ContextVar[Tracer | None] = contextvars.ContextVar("aotc_tracer", default=None)


def current_tracer() -> Tracer | None:
    """The trace running in this context, if any."""
    return _ACTIVE.get()


def active_tracer(what: str = "this operation") -> Tracer:
    tr = _ACTIVE.get()
    if tr is None:
        raise trace_error(f"{what} needs an active trace: call it inside forward() under aotc.trace/aotc.compile")
    return tr


class Tracer:
    """Owns the node list, the guards and the constants of the graph being traced."""

    def __init__(self, ctx: TraceShapeCtx, tensor_type: Callable[[Value, Tracer], Any]) -> None:
        self.ctx = ctx
        # the class of the tensors the trace hands out (tensor.Tensor): given here, since the op modules that
        # make tensors sit below the class whose methods call them
        self.tensor_type = tensor_type
        self.builder = Builder(ctx)
        self.constants: dict[str, np.ndarray] = {}
        self.param_names: dict[int, str] = {}  # id(Parameter/buffer) -> state_dict name
        self.module_names: dict[int, str] = {}  # id(submodule) -> its path in the traced module ("h.0.attn")
        self._modules: list[str] = []  # the paths of the submodules whose forward is running, innermost last
        self._const_values: dict[int, tuple[Any, Value]] = {}  # id(obj) -> (obj kept alive, value)
        self._taken: set[str] = set()
        self._anon = 0
        # States (frontend/state.py): id(StateTensor) -> [name, latest value]; the ids of the values that are a state's
        # latest value or a view of it -> the state's name; and of those a write has since overwritten -> the message.
        self._states: dict[int, list[Any]] = {}
        self._aliases: dict[int, str] = {}
        self._stale: dict[int, str] = {}

    def tensor(self, value: Value) -> Any:
        """A tensor of this trace over ``value``."""
        return self.tensor_type(value, self)

    @contextmanager
    def active(self) -> Iterator[Tracer]:
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    @contextmanager
    def in_module(self, module: object) -> Iterator[None]:
        """While ``module``'s forward runs, the nodes it records name its path after their source line
        (``models/gpt2.py:55 (h.0.attn)``), for --explain, dumped kernels and messages."""
        path = self.module_names.get(id(module))
        if path:
            self._modules.append(path)
        try:
            yield
        finally:
            if path:
                self._modules.pop()

    def emit(self, op: Op, inputs: Sequence[Value], **attrs: Any) -> tuple[Value, ...]:
        loc = user_loc()
        self.builder.loc = f"{loc} ({self._modules[-1]})" if self._modules and loc else loc
        if self._stale:
            for v in inputs:
                if v.id in self._stale:
                    raise trace_error(self._stale[v.id])
        try:
            outs = self.builder.emit(op, inputs, attrs)
        except ShapeError as e:
            msg = str(e)
            prefix = f"{op.value}: "
            if msg.startswith(prefix) and msg[len(prefix) :].startswith(op.value):
                msg = msg[len(prefix) :]  # the rule's message already names the op
            raise trace_error(msg) from None
        if self._aliases and op in VIEWS and inputs[0].id in self._aliases:
            # a view of a state shares its buffer (as in PyTorch), so a later write makes it stale too
            self._aliases.update(dict.fromkeys((o.id for o in outs), self._aliases[inputs[0].id]))
        return outs

    # -- states (frontend/state.py) -------------------------------------------------------------
    def open_state(self, state: object, name: str, value: Value) -> None:
        """``state`` (an object with ``init``: its initial array) is read as ``value`` as the call starts."""
        if any(slot[0] == name for slot in self._states.values()):
            raise trace_error(f"two states are named {name!r}")
        self._states[id(state)] = [name, value, state, value]
        self._aliases[value.id] = name

    def state_value(self, state: object) -> Value:
        """The latest value of ``state`` in this trace: reads see every write made before them."""
        slot = self._states.get(id(state))
        if slot is None:
            raise trace_error(
                "this state belongs to no module of the traced model: declare it with self.state(...) in a module "
                "that the model holds"
            )
        return slot[1]

    def write_state(self, state: object, value: Value) -> None:
        """``value`` (a write into the state's latest value) is the state's latest now; the values that were its
        latest or views of it are stale: reading one later is an error, as it would read the buffer just written."""
        slot = self._states[id(state)]
        name, loc = slot[0], user_loc()
        for vid, owner in list(self._aliases.items()):
            if owner == name:
                del self._aliases[vid]
                self._stale[vid] = (
                    f"this reads state {name!r} through a tensor taken before the write at {loc or 'an earlier line'}, "
                    "which overwrote it in place; read the state again after the write"
                )
        slot[1] = value
        self._aliases[value.id] = name

    def state_values(self) -> list[tuple[str, Value, Any, Value]]:
        """(name, latest value, the state object, its value as the call starts) of every state, in opening order."""
        return [(name, value, state, first) for name, value, state, first in self._states.values()]

    def is_stale(self, value: Value) -> bool:
        """Whether a write has overwritten ``value`` (a state's earlier value, or a view of it)."""
        return value.id in self._stale

    def finish_states(self) -> tuple[list[Value], list[str], list[Value], tuple[Any, ...]]:
        """The traced graph's states: their input values, names, final values and ``State`` records, each initial
        value stored as a constant named after the state."""
        from aotc.ir.graph import State

        ins, names, outs, records = [], [], [], []
        for name, latest, state, first in self.state_values():
            init = self.fresh_constant_name(f"{name}.init")
            self.constants[init] = np.array(state.init, order="C")  # (ascontiguousarray makes a 0-d array 1-d)
            ins.append(first)
            names.append(name)
            outs.append(latest)
            records.append(State(name, init))
        return ins, names, outs, tuple(records)

    def op(self, op: Op, *inputs: Value, **attrs: Any) -> Value:
        return self.emit(op, inputs, **attrs)[0]

    def require(self, lhs: ShapeDim, rel: str, rhs: ShapeDim, what: str) -> None:
        """``lhs rel rhs`` must hold: proven, guarded at the user's line, or a TraceError."""
        try:
            self.ctx.require(lhs, rel, rhs, what)
        except ShapeError as e:
            raise trace_error(str(e)) from None

    def decide(self, lhs: ShapeDim, rel: str, rhs: ShapeDim) -> bool:
        return self.ctx.decide(lhs, rel, rhs)

    def cast(self, v: Value, dtype: DType) -> Value:
        return v if v.type.dtype is dtype else self.op(Op.CAST, v, dtype=dtype)

    def full(self, value: Any, dtype: DType, shape: Sequence[ShapeDim] = ()) -> Value:
        if not isinstance(value, SymExpr):
            try:
                value = bool(value) if dtype is DType.bool else int(value) if dtype.is_int else float(value)
            except (OverflowError, ValueError):
                raise trace_error(f"the value {value!r} can't be represented as {dtype.value}") from None
        return self.op(Op.FULL, shape=tuple(shape), value=value, dtype=dtype)

    # -- constants ------------------------------------------------------------------------------
    def reserve_names(self, names: Iterator[str] | Sequence[str]) -> None:
        self._taken.update(names)

    def constant(self, obj: Any, array: np.ndarray, name: str | None = None) -> Value:
        """One CONSTANT node per captured object (a parameter, buffer or numpy array)."""
        hit = self._const_values.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        arr = as_supported_array(array)
        if name is None:
            name = self.param_names.get(id(obj)) or self._fresh_name()
        self.constants[name] = arr
        self._taken.add(name)
        v = self.op(Op.CONSTANT, name=name, shape=tuple(arr.shape), dtype=dtype_of(arr.dtype))
        self._const_values[id(obj)] = (obj, v)
        return v

    def fresh_constant_name(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``, ... when a parameter or constant has it."""
        name, n = base, 0
        while name in self._taken:
            n += 1
            name = f"{base}_{n}"
        self._taken.add(name)
        return name

    def _fresh_name(self) -> str:
        while True:
            name = f"_const{self._anon}"
            self._anon += 1
            if name not in self._taken:
                return name


def as_supported_array(array: Any) -> np.ndarray:
    """A C-contiguous array in a dtype aotc supports (float64 -> float32 and narrow ints widen, like
    torch's default dtypes)."""
    arr = np.asarray(array)
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    elif kind == "i" and size < 4:
        arr = arr.astype(np.int32)
    elif kind == "u":
        arr = arr.astype(np.int64)
    try:
        dtype_of(arr.dtype)
    except ShapeError:
        raise trace_error(f"arrays of dtype {arr.dtype} are not supported; use {[d.value for d in DType]}") from None
    return np.ascontiguousarray(arr).reshape(arr.shape)  # ascontiguousarray makes a 0-d array 1-d
