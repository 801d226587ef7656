"""``exe.prepare(shapes)``: a call prepared once for inputs of fixed shapes, for servers (TensorRT's execution
context, torch.compile's "reduce-overhead" static buffers): the variant is chosen and the guards checked once;
on cuda the shapes' memory, packed launches and CUDA graph are made now and owned by this object, so a call
only binds its tensors and launches on the caller's stream.

    call = exe.prepare({"x": (8, 256)})
    y, = call.run({"x": x_gpu}, stream=torch.cuda.current_stream())   # or out=[y_gpu]; call(x_gpu) too

Device outputs (cuda, unless ``out=``) are this object's static buffers, overwritten by its next call. One
thread at a time calls it (a second waits); prepare one per serving thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aotc.errors import AotcError, ExecError, GuardError
from aotc.ir.graph import unflatten_tree


class PreparedCall:
    """See the module docstring. ``close()`` (or a ``with`` block) frees what it holds on the device."""

    def __init__(self, exe: Any, shapes: Mapping[str, Sequence[int]], outputs: str) -> None:
        if not isinstance(shapes, Mapping):
            raise GuardError(f"prepare() takes a mapping of input name to shape, got {type(shapes).__name__}")
        names = exe.input_names
        unknown = [k for k in shapes if k not in names]
        missing = [n for n in names if n not in shapes]
        if unknown or missing:
            what = f"unknown input(s) {', '.join(map(repr, unknown))}" if unknown else ""
            what += ("; " if what else "") + (f"missing input(s) {', '.join(map(repr, missing))}" if missing else "")
            raise GuardError(f"prepare(): {what}; the model takes {', '.join(names)}")
        try:
            self._shapes = tuple(tuple(int(d) for d in shapes[n]) for n in names)
        except (TypeError, ValueError):
            raise GuardError(f"prepare() takes each input's shape as a tuple of ints, got {dict(shapes)!r}") from None
        stand_ins = [np.broadcast_to(np.zeros((), s.dtype.np), shape) for s, shape in zip(exe.inputs, self._shapes)]
        self._exe = exe
        self._program, self._env = exe._select(stand_ins)  # GuardError when no variant takes these shapes
        self._outputs = outputs
        prepare = getattr(self._program, "prepare", None)
        self._call = prepare(self._env) if prepare is not None else None

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(zip(self._exe.input_names, self._shapes))

    @property
    def outputs(self) -> list[Any]:
        """The static device outputs this call writes (cuda): what each call returns unless ``out=``."""
        if self._call is None:
            raise ExecError(f"prepared outputs live on the GPU; this executable runs on {self._exe.device}")
        return list(self._call.outputs)

    def run(
        self,
        feeds: Mapping[str, Any],
        *,
        out: Sequence[Any] | None = None,
        stream: Any = None,
        sync: bool | None = None,
    ) -> list[Any]:
        """Inputs by name (of the prepared shapes), outputs as a flat list: see ``Executable.run``."""
        return self._run(*self._exe._gather((), feeds), out, stream, sync)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inputs by position or by name; the model's output structure."""
        return unflatten_tree(self._exe.output_tree, self._run(*self._exe._gather(args, kwargs), None, None, None))

    def _run(self, arrays: list[Any], feeds: list[Any], out: Any, stream: Any, sync: bool | None) -> list[Any]:
        for name, a, want in zip(self._exe.input_names, arrays, self._shapes):
            if tuple(a.shape) != want:
                raise GuardError(f"input {name!r} has shape {tuple(a.shape)}; this call was prepared for {want}")
        if self._call is None:
            if out is not None or stream is not None or sync is not None:
                raise ExecError(f"out=, stream= and sync= are for device='cuda'; this runs on {self._exe.device}")
            if self._outputs == "numpy":
                return self._program.run(feeds, dict(self._env))
            return self._program.run(feeds, dict(self._env), outputs=self._outputs)  # type: ignore[call-arg]
        from aotc.runtime.backends.cuda.prepared import Retired

        mode = "device" if out is not None else self._outputs
        if out is not None and self._outputs == "numpy":
            mode = "device"
        try:
            return self._call.run(feeds, mode, out, stream_handle(stream), sync)
        except Retired:
            raise ExecError("this prepared call was closed") from None

    def synchronize(self) -> None:
        """Wait for this call's queued work and raise its pending ExecError, if any."""
        if self._call is not None:
            self._call.synchronize()

    def close(self) -> None:
        if self._call is not None:
            self._program.forget(self._call)
            self._call.close()

    def __enter__(self) -> PreparedCall:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}={list(s)}" for n, s in self.shapes.items())
        return f"<PreparedCall {self._exe.artifact.name!r} on {self._exe.device}: {shapes}>"


def stream_handle(stream: Any) -> int | None:
    """A caller's stream as the driver's handle: an int, a torch stream (``cuda_stream``), a CUDA Python
    stream (``__cuda_stream__``), a CuPy stream (``ptr``) or a bindings CUstream (``int()``)."""
    if stream is None or isinstance(stream, int):
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        return int(protocol()[1])
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise AotcError(
            f"stream= takes a CUDA stream (a handle, or a torch/CuPy stream), got {type(stream).__name__}"
        ) from None
