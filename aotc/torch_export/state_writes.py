"""Buffers an exported program writes, as aotc states (aotc/frontend/state.py), and the in-place ATen ops that write
them as state writes.

A torch module that keeps a cache across calls (Hugging Face's ``StaticCache`` under ``torch.export``) writes tensors
it holds: in a functionalized program, buffers named in ``buffers_to_mutate`` whose new values are outputs; in
torch.export's training IR, in-place ops (``index_copy_``, ``copy_``, ``index_put_``, ``add_``, ...) on a buffer or a
lifted tensor constant, directly or through views of it. Each such tensor becomes a state whose initial value is its
value at export (stored as one element when all its elements are equal, a zero cache's case), and each write into
it a write into the state's latest value; a later read of it, or of a view of it, sees the writes before it, as in
torch. What cannot be expressed that way (a write through a view other than slices, selects and aliases, an
accumulating ``index_put_``, a buffer set to something not written into it) is refused naming the buffer and the op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aotc.errors import UnsupportedError
from aotc.frontend import elementwise as ew
from aotc.frontend.context import Tracer
from aotc.frontend.tensor import Tensor
from aotc.frontend.writes import write
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.types import TensorType, Value
from aotc.torch_export.table import target_name

# Ops whose result is the tensor they were given or a view of it (a write into the result writes the buffer).
# (Copies, such as _to_copy and clone, are not: a write into a copy leaves the buffer as it was.)
IDENTITY_ALIASES = frozenset(
    {"aten.alias.default", "aten.detach.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device",
     "aten.to.other"}
)  # fmt: skip
VIEWS = frozenset({"aten.slice.Tensor", "aten.select.int"})


class ImportedState(Tensor):
    """A torch buffer (or lifted tensor) the program writes: a state. A 0-d tensor is held as shape (1,) (a write
    needs an axis to address) and read back as 0-d."""

    __slots__ = ("init", "name", "scalar", "state_dtype", "tracer")

    def __init__(self, tracer: Tracer, name: str, array: np.ndarray, dtype: DType) -> None:
        self.tracer = tracer
        self.name = name
        self.scalar = array.ndim == 0
        self.state_dtype = dtype
        flat = array.reshape(-1)
        # one element where all are equal (a zero cache): the file stores it, broadcast to the state's shape
        self.init = (
            flat[:1].reshape(()) if flat.size and (flat == flat[0]).all() else array.reshape(array.shape or (1,))
        )
        shape = array.shape or (1,)
        tracer.open_state(self, name, tracer.builder.new_value(TensorType(dtype, tuple(shape))))

    def _t(self) -> Tracer:
        return self.tracer

    def _v(self) -> Value:
        v = self.tracer.state_value(self)
        return self.tracer.op(Op.RESHAPE, v, shape=()) if self.scalar else v

    @property
    def dtype(self) -> DType:
        return self.state_dtype

    def __repr__(self) -> str:
        return f"ImportedState({self.name!r})"


def written_placeholders(ep: Any) -> set[str]:
    """The placeholders (buffers and lifted constants) the program writes: the buffers to mutate, and every tensor an
    in-place op writes, directly or through the ops of IDENTITY_ALIASES and VIEWS."""
    sig = ep.graph_signature
    stored = {s.arg.name for s in sig.input_specs if str(s.kind).rsplit(".", 1)[-1] in ("BUFFER", "CONSTANT_TENSOR")}
    by_target = {s.target: s.arg.name for s in sig.input_specs if s.target is not None}
    out = {by_target[b] for b in sig.buffers_to_mutate.values() if b in by_target}
    base: dict[Any, str] = {}
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in stored:
            base[node] = node.name
        elif node.op == "call_function" and node.args:
            first = node.args[0]
            if first in base and (target_name(node.target) in IDENTITY_ALIASES | VIEWS or writes_first(node)):
                base[node] = base[first]
                if writes_first(node) and not copies_itself(node):
                    out.add(base[first])
    return out


def copies_itself(node: Any) -> bool:
    """``copy_(t, t.to(t's dtype))``: a tensor set to its own value, which writes nothing (CTRL sets its positional
    table buffer to ``self.pos_encoding.to(device, dtype)`` on every call; not a state)."""
    if target_name(node.target) != "aten.copy_.default" or len(node.args) < 2:
        return False
    dst = _itself(node.args[0])
    return dst is not None and dst is _itself(node.args[1])


def _itself(x: Any) -> Any:
    """The node whose tensor ``x`` is, through aliases that keep its dtype (None for a constant)."""
    while getattr(x, "op", None) == "call_function" and same_alias(x):
        x = x.args[0]
    return x if hasattr(x, "op") else None


def same_alias(node: Any) -> bool:
    """An identity alias that keeps its tensor's dtype: the tensor itself (``.to()`` of another dtype is a copy)."""
    if target_name(node.target) not in IDENTITY_ALIASES:
        return False
    dtype = getattr(node.meta.get("val"), "dtype", None)
    return dtype is not None and dtype == getattr(node.args[0].meta.get("val"), "dtype", None)


def writes_first(node: Any) -> bool:
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    info = schema.arguments[0].alias_info
    return bool(info is not None and info.is_write)


def alias_path(name: str, args: Sequence[Any], rank: int) -> tuple[Any, ...] | None:
    """The index (as for ``state[...]``) a view op selects of a tensor of rank ``rank``, () for an identity alias,
    None for a view a write cannot be aimed through."""
    if name in IDENTITY_ALIASES:
        return ()
    if name == "aten.slice.Tensor":
        dim, start, end, step = (list(args) + [0, None, None, 1])[1:5]
        dim = dim % rank
        return (slice(None),) * dim + (slice(start, _end(end), step or 1),)
    if name == "aten.select.int":
        dim, index = args[1], args[2]
        return (slice(None),) * (dim % rank) + (index,)
    return None


def _end(end: Any) -> Any:
    return None if isinstance(end, int) and end >= 2**62 else end  # torch's "to the end" sentinel


def compose(outer: tuple[Any, ...], inner: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``x[outer][inner]`` as one index of ``x`` where one of them is an identity alias; None for a view of a view."""
    if not outer:
        return inner
    return outer if not inner else None


def write_through(
    state: ImportedState, path: tuple[Any, ...], name: str, args: Sequence[Any], where: str, functional: Any
) -> None:
    """The in-place op ``name`` (args after its first) writing ``state`` at ``path``, as a write into the state."""
    target: Any = state
    if state.scalar:  # the (1,) value under a 0-d tensor
        if path:
            raise UnsupportedError(f"{where}{name} into a view of the 0-d buffer {state.name!r} is not supported")
        target = state.tracer.tensor(state.tracer.state_value(state))
    if name == "aten.index_copy_.default":
        dim, index, source = args[:3]
        if path:
            raise UnsupportedError(f"{where}index_copy_ into a view of buffer {state.name!r} is not supported")
        items = (slice(None),) * (dim % max(state.ndim, 1)) + (index,)
        new = write(target, items, source, exact=True)
    elif name == "aten.index_put_.default":
        indices, values, accumulate = (list(args) + [False])[:3]
        if accumulate:
            raise UnsupportedError(
                f"{where}index_put_ with accumulate=True into buffer {state.name!r} is not supported"
            )
        tensors = [i for i in indices if i is not None]
        if path or len(tensors) != 1:
            raise UnsupportedError(
                f"{where}index_put_ into buffer {state.name!r} takes one index tensor (the others ':'), got "
                f"{len(tensors)}{' through a view' if path else ''}"
            )
        items = tuple(slice(None) if i is None else i for i in indices)
        new = write(target, items, values, exact=False)
    elif name == "aten.copy_.default":
        new = write(target, path or (Ellipsis,), args[0], exact=False)
    elif functional is not None:
        result = functional(_read(state, path), *args)
        new = write(target, path or (Ellipsis,), result, exact=False)
    else:
        raise UnsupportedError(
            f"{where}{name} writes buffer {state.name!r} in place, which aotc cannot express as a state write "
            "(supported: index_copy_, index_put_, copy_ into the buffer or a slice of it, and in-place ops with a "
            "functional form)"
        )
    state.tracer.write_state(state, new)


def _read(state: ImportedState, path: tuple[Any, ...]) -> Any:
    return state[path] if path else state


def read_alias(state: ImportedState, path: tuple[Any, ...], dtype: DType | None) -> Any:
    """A fresh read of ``state`` at ``path`` (its latest value), in ``dtype``: what a view of a written buffer shows."""
    x = _read(state, path)
    return x if dtype is None or x.dtype is dtype else ew.cast(x, dtype)
