"""``load()`` and ``Executable``: a verified artifact bound to a backend, called like the model."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from aotc.artifact.reader import Artifact, check_signature, read_artifact
from aotc.errors import AotcError, ArtifactError, GuardError, UnsupportedError
from aotc.ir.graph import unflatten_tree
from aotc.runtime.backends import Backend, CpuSettings, Program, default_backend, get_backend
from aotc.runtime.guards import Binder, InputGatherer, InputSpec, input_specs
from aotc.runtime.prepared_call import PreparedCall, stream_handle
from aotc.runtime.state import StateMemory, StateSpec, position_checks, state_specs, state_symbols

if TYPE_CHECKING:
    from aotc.artifact.signing import KeySource

# The most input shapes whose variant and bound symbols an Executable remembers (see Executable._select).
CHOSEN_SHAPES = 1024


def load(
    source: str | os.PathLike[str] | bytes | Artifact,
    device: str | None = None,
    *,
    outputs: str = "numpy",
    allow_unverified_weights: bool = False,
    trusted_keys: KeySource | Sequence[KeySource] | None = None,
    require_signature: bool | None = None,
    threads: int | None = None,
    spin: bool = True,
) -> Executable:
    """Map and verify an artifact (a path, its bytes, or an already read Artifact) and bind it to ``device``.

    ``device``: "cpu" (onnxruntime when installed and the file stores an ONNX model, else the numpy references),
    "reference" (the numpy references), "cuda" (or "cuda:N"), "interpret", or None for the best one available.
    ``threads``: onnxruntime's intra-op threads for "cpu" (None: onnxruntime's default). ``spin``: whether those
    threads spin waiting for work after a call (onnxruntime's default, the fastest for back-to-back calls); a server
    passes False so that between calls they leave the cores to its request handling. ``outputs``: "numpy"
    (default) or "device" (cuda only: outputs stay on the GPU as arrays exposing ``__dlpack__`` and
    ``__cuda_array_interface__``). Raises ArtifactError for a bad file and AotcError for a device this
    build or artifact can't run on. An Artifact read with ``verify_weights=False`` is refused unless
    ``allow_unverified_weights``.

    ``trusted_keys`` (Ed25519 public keys: paths, bytes or key objects) requires a signature by one of
    them over every byte of the file, else SignatureError; ``require_signature=False`` with keys also
    loads unsigned files. These are plain arguments, read from no environment: a serving layer passes its
    policy here. Without keys, signed and unsigned files load alike. See read_artifact.
    """
    if isinstance(source, Artifact):
        artifact = source
        check_signature(artifact, trusted_keys, require_signature)
    else:
        artifact = read_artifact(source, trusted_keys=trusted_keys, require_signature=require_signature)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0):
        raise AotcError(f"threads must be a non-negative integer (0: onnxruntime's default), got {threads!r}")
    if not isinstance(spin, bool):
        raise AotcError(f"spin must be True or False, got {spin!r}")
    cpu = CpuSettings(threads, spin)
    if device is None:
        backend = default_backend(artifact.kernels.values() if artifact.kernels else None, artifact, cpu=cpu)
    else:
        backend = get_backend(device, artifact, cpu=cpu)
    return Executable(artifact, backend, outputs=outputs, allow_unverified_weights=allow_unverified_weights)


class Executable:
    """Runs an artifact: checks inputs against the guards of each variant and runs the first that accepts.

    All state is fixed at construction, so one Executable may be called from many threads at once.
    On a GPU backend, ``close()`` (or a ``with`` block) frees its device memory and modules.
    """

    def __init__(
        self,
        artifact: Artifact,
        backend: Backend | str | None = None,
        *,
        outputs: str = "numpy",
        allow_unverified_weights: bool = False,
    ) -> None:
        if not isinstance(artifact, Artifact):
            raise AotcError(f"Executable needs an Artifact, got {type(artifact).__name__}; use aotc.load(path)")
        if not artifact.weights_verified and not allow_unverified_weights:
            raise ArtifactError(
                f"artifact {artifact.name!r} was read with verify_weights=False, so its weights are unchecked; "
                "read it again with verification (read_artifact(path)) or pass allow_unverified_weights=True"
            )
        self._artifact = artifact
        self._backend = (
            backend if backend is not None and not isinstance(backend, str) else get_backend(backend, artifact)
        )
        self._outputs = self._check_outputs(outputs)
        try:
            self._variants: tuple[tuple[Binder, Program], ...] = tuple(
                (Binder(v.graph), self._backend.prepare(v, artifact.kernels)) for v in artifact.variants
            )
        except BaseException:
            self.close()  # a GPU backend frees what the variants prepared so far
            raise
        first = artifact.variants[0].graph
        self._inputs = input_specs(first)
        self._output_tree = first.output_tree
        self._gather_inputs = InputGatherer(self._inputs)
        self._names = tuple(s.name for s in self._inputs)
        self._wants = tuple((s.dtype.np, len(s.shape)) for s in self._inputs)
        self._gpu = self._backend.name == "cuda"
        # input shapes -> the variant whose guards they meet and its bound symbols (see _select)
        self._chosen: dict[tuple[tuple[int, ...], ...], tuple[Program, dict[str, int]]] = {}
        # states that live across calls (a KV cache): a Session holds them (exe.session())
        self._state_specs = state_specs(first)
        self._state_symbols = state_symbols(self._state_specs)
        self._position_checks = position_checks(first) if first.states else ()

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inputs by position (in ``input_names`` order) or by name; returns the model's output structure."""
        return unflatten_tree(self._output_tree, self._run(*self._gather(args, kwargs)))

    def run(
        self,
        feeds: Mapping[str, Any],
        *,
        outputs: str | None = None,
        out: Sequence[Any] | None = None,
        stream: Any = None,
        sync: bool | None = None,
    ) -> list[Any]:
        """Inputs by name; returns the flat list of outputs (``outputs``: "numpy" or "device" for this call).

        GPU callers (cuda; see README, "Serving from a GPU"): ``out`` writes the outputs into the caller's own GPU
        tensors (one per output, checked like inputs) and returns them; ``stream`` (a handle, a torch or CuPy
        stream) is the stream to run on, else the stream the first GPU input was produced on; ``sync`` waits for
        the call and raises its own errors (default: for numpy outputs only; device outputs return while the
        GPU works, and an error flag of theirs is raised by a later call at the same shapes, ``synchronize()``
        or a host copy of an output). Device outputs not given by ``out`` are static buffers of the shapes:
        valid until the next call at the same shapes on the same thread."""
        if type(feeds) is not dict and not isinstance(feeds, Mapping):  # a dict skips the ABC check: every call pays
            raise GuardError(f"run() takes a mapping of input name to array, got {type(feeds).__name__}")
        mode = (self._outputs if out is None else "device") if outputs is None else self._check_outputs(outputs)
        if out is None and stream is None and sync is None:
            return self._run(*self._gather((), feeds), outputs=mode)
        if self._backend.name != "cuda":
            raise AotcError(f"out=, stream= and sync= are for device='cuda'; this executable runs on {self.device}")
        return self._run(*self._gather((), feeds), outputs=mode, out=out, stream=stream_handle(stream), sync=sync)

    def _refuse_stateful(self) -> None:
        raise AotcError(
            f"artifact {self._artifact.name!r} keeps state across calls ({', '.join(str(s) for s in self._state_specs)}): "
            "call it through a session, which owns that state: s = exe.session(); s(...) or s.run(feeds)"
        )

    def prepare(self, shapes: Mapping[str, Sequence[int]], *, outputs: str | None = None) -> PreparedCall:
        """A call prepared once for inputs of these shapes (by input name): its variant chosen and guards
        checked, and on cuda its memory, packed launches and CUDA graph made now, so that each call only binds
        its tensors and launches (what a server does per request; TensorRT's execution context). A call through
        ``exe.run`` at shapes seen before takes the same path implicitly. See ``PreparedCall``."""
        if self._state_specs:
            self._refuse_stateful()
        return PreparedCall(self, shapes, self._outputs if outputs is None else self._check_outputs(outputs))

    def synchronize(self) -> None:
        """Wait for the GPU work of every call made so far and raise the ExecError of one whose error flags were
        not read yet (an unsynchronized call with a bad index); a no-op off the GPU."""
        for _, program in self._variants:
            sync = getattr(program, "synchronize", None)
            if sync is not None:
                sync()

    def check(self, feeds: Mapping[str, Any]) -> None:
        """Raise GuardError unless some variant accepts inputs of these names, dtypes and shapes; runs nothing.

        Only dtypes and shapes are read, so zero-stride stand-ins (``np.broadcast_to(np.zeros((), dt), shape)``)
        let a caller check sizes before it builds inputs that large.
        """
        if not isinstance(feeds, Mapping):
            raise GuardError(f"check() takes a mapping of input name to array, got {type(feeds).__name__}")
        self._select(self._gather((), feeds)[0])

    def _run(self, arrays: list[Any], feeds: list[Any], outputs: str | None = None, **gpu: Any) -> list[Any]:
        if self._state_specs:
            self._refuse_stateful()
        key = tuple([a.shape for a in arrays])
        chosen = self._chosen.get(key)
        if chosen is None:
            chosen = self._remember(key, arrays)
        program = chosen[0]
        mode = self._outputs if outputs is None else outputs
        if self._gpu:  # the program keeps its own per-shape state: no copy of the bound symbols per call
            return program.run(feeds, chosen[1], mode, key=key, **gpu)  # type: ignore[call-arg]
        if mode == "numpy":
            return program.run(feeds, dict(chosen[1]))
        return program.run(feeds, dict(chosen[1]), outputs=mode)  # type: ignore[call-arg]

    def _gather(self, args: Any, kwargs: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
        """Arrays for the guards, and what the program reads: a GPU tensor stays on the GPU when the backend
        takes one (``adopt``). The guards read only dtypes and shapes: a GPU input whose dtype and rank are the
        input's goes as it is; any other call is checked through zero-stride stand-ins, for the messages."""
        adopt = getattr(self._backend, "adopt", None)
        if adopt is None:
            arrays = self._gather_inputs(args, kwargs)
            return arrays, arrays
        values = None
        if not kwargs:
            if len(args) == len(self._wants):
                values = args
        elif not args and type(kwargs) is dict and len(kwargs) == len(self._wants):
            values = [kwargs.get(name) for name in self._names]
        if values is not None:
            out = []
            for v, (dtype, rank) in zip(values, self._wants):
                d = adopt(v)
                x = v if d is None else d
                if (d is None and type(x) is not np.ndarray) or x.dtype != dtype or len(x.shape) != rank:
                    break
                out.append(x)
            else:
                return out, out
        on_device = [adopt(a) for a in args]
        named = {k: adopt(v) for k, v in kwargs.items()}
        arrays = self._gather_inputs(
            [a if d is None else d.standin() for a, d in zip(args, on_device)],
            {k: v if named[k] is None else named[k].standin() for k, v in kwargs.items()},
        )
        given = dict(zip(self.input_names, on_device)) | named
        return arrays, [a if given.get(n) is None else given[n] for n, a in zip(self.input_names, arrays)]

    def _check_outputs(self, outputs: str) -> str:
        if outputs not in ("numpy", "device"):
            raise AotcError(f"outputs must be 'numpy' or 'device', got {outputs!r}")
        if outputs == "device" and self._backend.name != "cuda":
            raise AotcError(f"outputs='device' needs device='cuda'; this executable runs on {self._backend.name}")
        return outputs

    # -- state -----------------------------------------------------------------------------------------
    def session(self) -> Any:
        """A new Session: one sequence of calls with its own copy of the model's states (a KV cache), which its
        calls update in place. Sessions of one Executable run concurrently; one session's calls run in order."""
        if not self._state_specs:
            raise AotcError(
                f"artifact {self._artifact.name!r} has no state to keep across calls; call the executable itself"
            )
        without = [self._backend.name for _, p in self._variants if not hasattr(p, "run_session")]
        if without:
            raise UnsupportedError(
                f"the {without[0]} backend does not keep state across calls yet; load this artifact with "
                "device='cpu', 'reference', 'interpret' or 'cuda' to run it in a session"
            )
        from aotc.runtime.session import Session

        return Session(self)

    @property
    def state_specs(self) -> tuple[StateSpec, ...]:
        """Name, type and initial value of each state (empty for a model without state)."""
        return self._state_specs

    @property
    def stateful(self) -> bool:
        return bool(self._state_specs)

    def _new_state_memory(self, env: dict[str, int], dims: tuple[int, ...]) -> StateMemory:
        make = getattr(self._backend, "state_memory", None)
        if make is not None:
            return make(self._state_specs, env, dims)
        return StateMemory(self._state_specs, env, dims)

    def _read_state(self, memory: StateMemory, index: int) -> np.ndarray:
        read = getattr(self._backend, "read_state", None)
        return read(memory, index) if read is not None else memory.arrays[index].copy()

    # -- lifetime ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Free what the backend holds on its device (GPU memory, modules, CUDA graphs); idempotent."""
        close = getattr(self._backend, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Executable:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _select(self, arrays: list[np.ndarray]) -> tuple[Program, dict[str, int]]:
        """The first variant whose guards these inputs meet, with its bound symbols (a dict of the caller's own).

        A variant's guards read nothing of the inputs but their shapes (their names, dtypes and ranks have been
        checked): the verdict for shapes seen before is remembered, for up to CHOSEN_SHAPES of them (then the
        memory starts over), so a server's repeated shapes skip the binding; shapes that fit no variant are bound
        again each call, to raise the same GuardError.
        """
        key = tuple([a.shape for a in arrays])
        chosen = self._chosen.get(key)
        if chosen is None:
            chosen = self._remember(key, arrays)
        return chosen[0], dict(chosen[1])

    def _remember(self, key: tuple[Any, ...], arrays: list[Any]) -> tuple[Program, dict[str, int]]:
        chosen = self._bind(arrays)
        if len(self._chosen) >= CHOSEN_SHAPES:
            self._chosen.clear()
        self._chosen[key] = chosen
        return chosen

    def _bind(self, arrays: list[np.ndarray]) -> tuple[Program, dict[str, int]]:
        errors: list[GuardError] = []
        for binder, program in self._variants:
            try:
                return program, binder.bind(arrays)
            except GuardError as e:
                errors.append(e)
        if len(errors) == 1:
            raise errors[0]
        lines = [f"  variant {i} ({b.graph.name}): {e}" for i, ((b, _), e) in enumerate(zip(self._variants, errors))]
        raise GuardError("the inputs fit no variant of the model:\n" + "\n".join(lines))

    # -- introspection -----------------------------------------------------------------------------
    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self._inputs)

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        """Name, dtype and symbolic shape of each input (of the first variant)."""
        return self._inputs

    @property
    def output_tree(self) -> Any:
        return self._output_tree

    @property
    def artifact(self) -> Artifact:
        return self._artifact

    @property
    def device(self) -> str:
        return self._backend.name

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self._inputs)
        return f"<Executable {self._artifact.name!r} on {self.device}: ({ins})>"
