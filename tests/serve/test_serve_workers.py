"""The REST worker supervisor of ``aotc serve --workers N`` leaves a starting worker to start (the SDK's killed
every worker that took over 5 s to import and load, forever, on a busy machine), then holds it to the SDK's ping."""

from __future__ import annotations

import multiprocessing as mp
from types import SimpleNamespace

import pytest

pytest.importorskip("kserve")

from aotc.serve import workers


class _Process:
    """A worker as the supervisor sees it: a process that lives, and the parent's end of its ping pipe."""

    def __init__(self) -> None:
        self._parent_conn, self.child = mp.Pipe()
        self.alive = True
        self.pings = 0
        self._process = SimpleNamespace(is_alive=lambda: self.alive)

    def is_alive(self) -> bool:  # the SDK's check once the worker has started: a ping answered in time
        self.pings += 1
        return self.alive


def _supervisor(process: _Process) -> workers.Workers:
    sup = workers.Workers.__new__(workers.Workers)  # no REST server: only the keep-alive bookkeeping is used
    sup._processes = [process]
    sup._starting = {process: [0.0, False]}
    return sup


def test_a_starting_worker_is_left_to_start_until_its_first_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    process = _Process()
    sup = _supervisor(process)
    monkeypatch.setattr(workers, "monotonic", lambda: 30.0)  # 30 s in: far past the SDK's 5 s ping
    assert sup._alive(process) and sup._alive(process)
    assert process.child.recv() == b"ping" and not process.child.poll(0)  # asked once, not once per check
    process.child.send(b"pong")
    assert sup._alive(process)
    assert process not in sup._starting and process.pings == 0
    assert sup._alive(process) and process.pings == 1  # started: the SDK's own ping from now on


def test_a_worker_that_never_starts_or_exits_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    process = _Process()
    sup = _supervisor(process)
    monkeypatch.setattr(workers, "monotonic", lambda: workers.STARTUP_S + 1)
    assert not sup._alive(process)
    monkeypatch.setattr(workers, "monotonic", lambda: 1.0)
    process.alive = False
    assert not sup._alive(process)
