"""``out=``: the caller's own GPU tensors as a call's outputs, each checked like an input (dtype, shape, device,
contiguity, alignment) and against every input and other output for overlap, with a GuardError naming it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aotc.errors import GuardError
from aotc.runtime.backends.cuda.arrays import DeviceInput
from aotc.runtime.backends.cuda.delivery import Delivery
from aotc.runtime.backends.cuda.plan import POINTER_ALIGN


@dataclass(frozen=True, slots=True)
class OutputBinding:
    ptrs: tuple[int, ...]  # where each output is written
    results: tuple[Any, ...]  # what the call returns: the caller's own objects


def bind_out(call: Delivery, out: Any) -> OutputBinding:

    program, shape = call.program, call.shape
    results = program.results
    if not isinstance(out, Sequence) or isinstance(out, (str, bytes)):
        raise GuardError(f"out= takes a list of {len(results)} GPU tensors (one per output), got {type(out).__name__}")
    if len(out) != len(results):
        raise GuardError(f"out= has {len(out)} tensors, the model has {len(results)} outputs")
    ptrs: list[int] = []
    spans = feeds_spans(call)
    for i, (t, o) in enumerate(zip(out, results)):
        what = f"out[{i}]"
        d = program.adopt_out(t)
        if d is None:
            raise GuardError(f"{what} is {type(t).__name__}, expected a GPU tensor (outputs are written in place)")
        want_shape, want_dtype = shape.out_shapes[i], o.type.dtype.np
        if d.dtype != want_dtype:
            raise GuardError(f"{what} has dtype {d.dtype.name}, expected {o.type.dtype.value}")
        if tuple(d.shape) != want_shape:
            raise GuardError(f"{what} has shape {tuple(d.shape)}, expected {want_shape}")
        program.check_device(what, d)
        if not d.contiguous():
            raise GuardError(
                f"{what} has strides {d.strides} (bytes) for shape {d.shape}, expected a C-contiguous tensor"
            )
        if d.ptr % POINTER_ALIGN:
            raise GuardError(
                f"{what} starts at {d.ptr:#x}, which is not {POINTER_ALIGN}-byte aligned as the kernels need"
            )
        n = shape.out_nbytes[i]
        for lo, hi, other in spans:
            if n and d.ptr < hi and lo < d.ptr + n:
                raise GuardError(
                    f"{what} overlaps {other}: an output must not share memory with an input or another output"
                )
        spans.append((d.ptr, d.ptr + n, what))
        ptrs.append(d.ptr)
    return OutputBinding(tuple(ptrs), tuple(out))


def feeds_spans(call: Delivery) -> list[tuple[int, int, str]]:
    """The device memory this call's inputs are read from (in place or staged)."""
    names = call.program.graph.input_names
    return [
        (ptr, ptr + n, f"input {names[i]!r}")
        for i, (ptr, (_, n)) in enumerate(zip(call.bound_in, call.shape.inputs))
        if n
    ]


__all__ = ["DeviceInput", "OutputBinding", "bind_out"]
