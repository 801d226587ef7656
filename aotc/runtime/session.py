"""``Session``: one sequence of calls of a stateful artifact (a decoder and its KV cache), from ``exe.session()``.

A session owns one copy of every state tensor (runtime/state.py), allocated at its first call and kept for its
life: each call reads the states and updates them in place (onnxruntime: into a second buffer that swaps in), so
nothing of the state crosses the call boundary. Calls of one session are serialized (they are one sequence); many
sessions of one Executable run concurrently, each with its own state. ``reset()`` returns the states to their
initial values; ``close()`` frees them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from aotc.errors import AotcError, GuardError
from aotc.ir.graph import unflatten_tree
from aotc.runtime.state import StateMemory, check_positions, dims_mismatch


class Session:
    """A stateful artifact's calls in sequence, with its own state. Use ``exe.session()`` to make one."""

    def __init__(self, exe: Any) -> None:  # an Executable (runtime/executable.py, which imports this module)
        self._exe = exe
        self._specs = exe.state_specs
        self._symbols = exe._state_symbols
        self._memory: StateMemory | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.calls = 0  # calls that completed

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inputs by position or name, as ``Executable.__call__``; returns the model's output structure."""
        return unflatten_tree(self._exe.output_tree, self._run(args, kwargs))

    def run(self, feeds: Mapping[str, Any]) -> list[Any]:
        """Inputs by name; returns the flat list of outputs (the states' new values stay in the session)."""
        if type(feeds) is not dict and not isinstance(feeds, Mapping):
            raise GuardError(f"run() takes a mapping of input name to array, got {type(feeds).__name__}")
        return self._run((), feeds)

    def _run(self, args: Any, kwargs: Mapping[str, Any]) -> list[Any]:
        exe = self._exe
        with self._lock:
            if self._closed:
                raise AotcError("this session is closed; open another with exe.session()")
            arrays, fed = exe._gather(args, kwargs)
            program, env = exe._select(arrays)
            memory = self._memory_for(env)
            # A write's positions from an input are checked first: a bad one is refused with nothing written.
            check_positions(exe._position_checks, arrays, env)
            outs = program.run_session(fed, env, memory)  # type: ignore[attr-defined]
            self.calls += 1
            return outs

    def _memory_for(self, env: Mapping[str, int]) -> StateMemory:
        dims = tuple(env[n] for n in self._symbols)
        memory = self._memory
        if memory is None:
            memory = self._memory = self._exe._new_state_memory(env, dims)
        elif memory.dims != dims:
            raise dims_mismatch(self._specs, self._symbols, memory.dims, env)
        return memory

    # -- state ------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Every state back to its initial value (a state sized by a dynamic dim is freed, so the next call may
        bind another size)."""
        with self._lock:
            if self._memory is None:
                return
            if self._symbols:
                self._memory.close()
                self._memory = None
            else:
                self._memory.reset()

    def state(self, name: str) -> np.ndarray:
        """A copy of state ``name``'s current value (its initial value before the first call)."""
        with self._lock:
            for i, s in enumerate(self._specs):
                if s.name == name:
                    if self._memory is None:
                        if self._symbols:
                            raise AotcError(f"state {name!r} has no size before the session's first call")
                        return np.array(np.broadcast_to(s.init, s.shape({})))
                    return self._exe._read_state(self._memory, i)
            raise AotcError(f"no state named {name!r}; the states are {[s.name for s in self._specs]}")

    @property
    def state_bytes(self) -> int:
        """Bytes this session holds for its states (0 before its first call allocates them)."""
        return 0 if self._memory is None else self._memory.nbytes

    # -- lifetime ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the session's states; idempotent. A closed session refuses calls."""
        with self._lock:
            self._closed = True
            if self._memory is not None:
                self._memory.close()
                self._memory = None

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        states = ", ".join(str(s) for s in self._specs)
        return f"<Session of {self._exe.artifact.name!r} on {self._exe.device}: {self.calls} calls; states {states}>"
