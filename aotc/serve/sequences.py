"""Stateful serving: one Session per sequence for an artifact that keeps state across calls (a decoder's KV cache).

Requests name their sequence as Triton Inference Server's sequence batcher has them do, in the v2 request's
parameters: ``sequence_id`` (an int or a string), ``sequence_start`` (true on its first request: a session is opened,
or reset if the id is live) and ``sequence_end`` (true on its last: the session closes after that request).
``tritonclient``'s ``infer(..., sequence_id=, sequence_start=, sequence_end=)`` sends exactly these. Each refusal is
aotc's (an ``AotcError``, so the server answers 400): a request without a ``sequence_id``, one for an id that no
``sequence_start`` opened (or that ended, or idled out), a start beyond ``max_sequences`` live ones.

A sequence's requests run one at a time in the order they arrived (an ``asyncio.Lock`` per sequence, which wakes
its waiters first come, first served), each on a worker thread; sequences run concurrently. A session unused for
``idle_timeout_s`` is closed when the next request of any sequence arrives, so an abandoned sequence frees its
state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aotc.errors import AotcError

SEQUENCE_ID, SEQUENCE_START, SEQUENCE_END = "sequence_id", "sequence_start", "sequence_end"


class SequenceError(AotcError):
    """A request's sequence parameters do not name a sequence the server can run it in (HTTP 400)."""


@dataclass(frozen=True)
class SequenceParams:
    id: int | str
    start: bool
    end: bool


def sequence_params(parameters: Mapping[str, Any] | None, model: str) -> SequenceParams:
    """The sequence parameters of a v2 request (REST: plain values; gRPC: InferParameter messages)."""
    params = {k: _plain(v) for k, v in (parameters or {}).items()}
    seq = params.get(SEQUENCE_ID)
    if seq is None or seq == 0 or seq == "":
        raise SequenceError(
            f"model {model!r} keeps state across requests: each request needs the parameter {SEQUENCE_ID!r} (an "
            f"int or string naming its sequence; tritonclient: infer(..., sequence_id=N)), with {SEQUENCE_START!r}: "
            f"true on the sequence's first request and {SEQUENCE_END!r}: true on its last"
        )
    if isinstance(seq, bool) or not isinstance(seq, (int, str)):
        raise SequenceError(f"parameter {SEQUENCE_ID!r} must be an int or a string, got {seq!r}")
    flags = []
    for key in (SEQUENCE_START, SEQUENCE_END):
        v = params.get(key, False)
        if not isinstance(v, bool):
            raise SequenceError(f"parameter {key!r} must be true or false, got {v!r}")
        flags.append(v)
    return SequenceParams(seq, flags[0], flags[1])


def _plain(v: Any) -> Any:
    """A gRPC InferParameter as the value it holds; any other value as it is."""
    which = getattr(v, "WhichOneof", None)
    if which is None:
        return v
    kind = which("parameter_choice")
    return getattr(v, kind) if kind else None


@dataclass
class _Live:
    session: Any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    used: float = field(default_factory=time.monotonic)
    busy: int = 0  # requests holding or waiting for the lock


class Sequences:
    """The live sequences of one model: ``open_session()`` makes a session (``exe.session``)."""

    def __init__(
        self, open_session: Callable[[], Any], model: str, *, max_sequences: int = 64, idle_timeout_s: float = 600.0
    ) -> None:
        if max_sequences < 1:
            raise AotcError(f"max_sequences must be at least 1, got {max_sequences}")
        self._open = open_session
        self.model = model
        self.max_sequences = max_sequences
        self.idle_timeout_s = idle_timeout_s
        self._live: dict[int | str, _Live] = {}

    def __len__(self) -> int:
        return len(self._live)

    async def run(self, params: SequenceParams, call: Callable[[Any], Any]) -> Any:
        """``call(session)`` on a worker thread, in the sequence's order; the session opens on a start and closes
        after an end (or after a failed start)."""
        self._expire()
        live = self._live.get(params.id)
        if live is None:
            if not params.start:
                raise SequenceError(
                    f"model {self.model!r}: no live sequence {params.id!r} (start one with {SEQUENCE_START!r}: true; "
                    f"a sequence ends with {SEQUENCE_END!r} or after {self.idle_timeout_s:g} s idle)"
                )
            if len(self._live) >= self.max_sequences:
                raise SequenceError(
                    f"model {self.model!r} has {len(self._live)} live sequences, its maximum: end one (with "
                    f"{SEQUENCE_END!r}: true) before starting sequence {params.id!r}"
                )
            live = self._live[params.id] = _Live(self._open())
        live.busy += 1
        try:
            async with live.lock:
                loop = asyncio.get_running_loop()
                if params.start:
                    await loop.run_in_executor(None, live.session.reset)
                result = await loop.run_in_executor(None, call, live.session)
        finally:
            live.busy -= 1
            live.used = time.monotonic()
        if params.end:
            self._close(params.id, live)
        return result

    def _expire(self) -> None:
        now = time.monotonic()
        for sid, live in list(self._live.items()):
            if not live.busy and now - live.used > self.idle_timeout_s:
                self._close(sid, live)

    def _close(self, sid: int | str, live: _Live) -> None:
        if self._live.get(sid) is live:
            del self._live[sid]
        live.session.close()

    def close(self) -> None:
        for sid, live in list(self._live.items()):
            self._close(sid, live)
