"""Stage timing for ``aotc compile``: a line on stderr for each stage that took over a second."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click


class StageTimer:
    """Pass as ``progress=``; called with a stage name as each stage starts.

    Quiet for fast stages so a normal compile prints nothing but its result.
    """

    def __init__(self, threshold_s: float = 1.0, echo: Callable[[str], None] | None = None) -> None:
        self.threshold_s = threshold_s
        self.echo = echo or (lambda line: click.echo(line, err=True))
        self.times: dict[str, float] = {}
        self._stage: str | None = None
        self._start = 0.0

    def __call__(self, stage: str) -> None:
        self.finish()
        self._stage, self._start = stage, time.perf_counter()

    def finish(self) -> None:
        """End the current stage (if any) and report it when it was slow."""
        if self._stage is None:
            return
        elapsed = time.perf_counter() - self._start
        self.times[self._stage] = self.times.get(self._stage, 0.0) + elapsed
        if elapsed >= self.threshold_s:
            self.echo(f"  {self._stage}... done ({elapsed:.2f}s)")
        self._stage = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self(name)
        try:
            yield
        finally:
            self.finish()
