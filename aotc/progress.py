"""Compile progress for a person watching (``aotc compile``, ``aotc.compile(verbose=True)``): each stage, and
counted work inside one (``compiled 12/40 kernels``) as it goes.

On a terminal it is one live line, rewritten in place and cleared at the end, so a fast compile leaves nothing
behind. Elsewhere (logs, CI) it writes plain lines: a stage that took at least ``threshold_s`` when it ends
(every stage as it starts with ``threshold_s=0``), and counts at most every ``COUNT_EVERY_S`` seconds once the
stage has run that long, so a cold compile that takes a minute says what it is doing while it does it. Once
ETA_AFTER of a counted stage's items are done (cache hits aside: they count at once), its line also says about
how long the rest will take, at the pace so far (``compiled 12/40 kernels, about 35 s left``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

COUNT_EVERY_S = 2.0
ETA_AFTER = 3  # items done in a counted stage before its line estimates the time left
# what a counted stage counts, for its line ("compiled 12/40 kernels"); others read "<stage> 12/40"
_COUNTED = {"compile kernels": ("compiled", "kernels")}


class StageTimer:
    """Pass as ``progress=``: called ``(stage)`` as each stage starts and ``(stage, done, total)`` as counted work
    in it advances; ``finish()`` ends the last stage. ``times`` holds each stage's seconds."""

    def __init__(
        self,
        threshold_s: float = 1.0,
        echo: Callable[[str], None] | None = None,
        *,
        stream: TextIO | None = None,
        live: bool | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.threshold_s = threshold_s
        self.stream = stream if stream is not None else sys.stderr
        self.echo = echo or (lambda line: print(line, file=self.stream, flush=True))
        self.live = bool(live if live is not None else echo is None and _is_tty(self.stream))
        self.times: dict[str, float] = {}
        self.clock = clock
        self._stage: str | None = None
        self._first: tuple[int, float] | None = None  # the stage's first count, and when it came
        self._start = 0.0
        self._counted_at = 0.0
        self._drawn = False

    def __call__(self, stage: str, done: int | None = None, total: int | None = None) -> None:
        if stage != self._stage:
            self.finish()
            self._stage, self._start = stage, self.clock()
            self._counted_at = self._start
            self._first = None
            if self.threshold_s <= 0 and not self.live:
                self.echo(f"  {stage}...")
        if done is None or total is None:
            self._draw(f"  {stage}...")
            return
        verb, noun = _COUNTED.get(stage, (stage, ""))
        text = f"  {verb} {done}/{total}{' ' + noun if noun else ''}"
        now = self.clock()
        if self._first is None:
            self._first = (done, now)
        first, since = self._first
        if ETA_AFTER <= done - first and done < total:
            text += f", about {_duration((now - since) / (done - first) * (total - done))} left"
        if self.live:
            self._draw(text)
        elif done < total and now - self._counted_at >= COUNT_EVERY_S and now - self._start >= self.threshold_s:
            self._counted_at = now
            self.echo(text)

    def finish(self) -> None:
        """End the current stage (if any): clear the live line, and report the stage when it was slow."""
        if self._stage is None:
            return
        elapsed = self.clock() - self._start
        self.times[self._stage] = self.times.get(self._stage, 0.0) + elapsed
        self._clear()
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

    def _draw(self, text: str) -> None:
        if self.live:
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
            self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


def _duration(seconds: float) -> str:
    """``35 s``, ``4 min``: as precise as an estimate deserves."""
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    return f"{round(seconds / 60)} min"


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
