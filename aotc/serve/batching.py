"""Dynamic batching: concurrent requests that share every non-batch dim run as one call along the batch dim.

Two schedulers use the pieces here: ``Batcher``, the asyncio queue behind ``aotc serve``, and the Ray Serve
deployment, where Ray's ``@serve.batch`` collects the requests and ``group`` / ``concat`` / ``split`` do the rest.

The batcher keeps at most one model call in flight per model. A request that arrives while the model is idle
runs at once (after waiting up to ``timeout_s`` for others to join it, 0 by default, as Triton Inference Server's
``max_queue_delay``); requests that arrive during a call queue up and run together when it ends. A batch takes
the oldest request and every queued request with the same key (the non-batch dims and dtypes of each input),
oldest first, while its rows fit the batch's cap and the model's guards (``Executable.check`` on the merged
shapes). The cap is ``max_batch``, or with ``adaptive`` (the default) the size that has served the key's rows
fastest, at most ``max_batch`` (``batch_size.BatchSizer``: on a CPU the largest batch is often not the
fastest). Batched outputs equal the rows of separate calls up to floating-point rounding (a matmul over more rows
may sum in another order). When a batched call fails, each of its requests is run again alone, so a bad token id
in one request fails that request only.

Model calls run in the event loop's default executor, so the server answers health checks while a call runs.
Imports numpy and asyncio only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.serve.batch_size import BatchSizer
from aotc.serve.signature import Signature

Feeds = Mapping[str, np.ndarray]
Outputs = list[np.ndarray]


@dataclass(frozen=True)
class BatchAxes:
    """Where the batch dim sits in each input (by name) and each output (by flat index)."""

    inputs: Mapping[str, int]
    outputs: tuple[int, ...]

    @classmethod
    def of(cls, sig: Signature) -> BatchAxes | None:
        if sig.batch is None:
            return None
        ins = {t.name: t.batch_axis for t in sig.inputs}
        outs = tuple(t.batch_axis for t in sig.outputs)
        if None in ins.values() or None in outs:
            return None
        return cls(ins, outs)  # type: ignore[arg-type]

    def rows(self, feeds: Feeds) -> int:
        name, axis = next(iter(self.inputs.items()))
        return int(feeds[name].shape[axis])

    def key(self, feeds: Feeds) -> tuple[Any, ...]:
        """Requests with equal keys can be concatenated: every input's dtype and non-batch dims."""
        return tuple(
            (n, feeds[n].dtype.str, feeds[n].shape[:a] + feeds[n].shape[a + 1 :]) for n, a in self.inputs.items()
        )


def concat(axes: BatchAxes, batch: Sequence[Feeds]) -> dict[str, np.ndarray]:
    if len(batch) == 1:
        return dict(batch[0])
    return {n: np.concatenate([f[n] for f in batch], axis=a) for n, a in axes.inputs.items()}


def split(axes: BatchAxes, outputs: Outputs, rows: Sequence[int]) -> list[Outputs]:
    """Each request's rows of each output, in request order (views, no copies)."""
    if len(rows) == 1:
        return [list(outputs)]
    cuts = np.cumsum(rows)[:-1]
    per_output = [np.split(o, cuts, axis=a) for o, a in zip(outputs, axes.outputs)]
    return [list(parts) for parts in zip(*per_output)]


def merged_standins(axes: BatchAxes, first: Feeds, rows: int) -> dict[str, np.ndarray]:
    """Zero-stride stand-ins of a batch of ``rows`` rows shaped like ``first``, to check guards before copying."""
    out = {}
    for n, a in axes.inputs.items():
        shape = list(first[n].shape)
        shape[a] = rows
        out[n] = np.broadcast_to(np.zeros((), first[n].dtype), shape)
    return out


def first_batch(
    axes: BatchAxes,
    head: Feeds,
    keys: Sequence[tuple[Any, ...]],
    rows: Sequence[int],
    max_batch: int,
    check: Callable[[Feeds], None],
) -> list[int]:
    """Indices of the batch that the first item (its feeds: ``head``) heads, given each item's key and rows: the
    items with its key, oldest first, while their rows fit ``max_batch`` and the merged shapes meet the model's
    guards (``check`` raises when they don't)."""
    batch, total = [0], rows[0]
    for i in range(1, len(keys)):
        if keys[i] == keys[0] and total + rows[i] <= max_batch and _fits(check, axes, head, total + rows[i]):
            batch.append(i)
            total += rows[i]
    return batch


def group(axes: BatchAxes, items: Sequence[Feeds], max_batch: int, check: Callable[[Feeds], None]) -> list[list[int]]:
    """``items``' indices in batches, each headed by the oldest item not yet in one."""
    keys, rows = [axes.key(f) for f in items], [axes.rows(f) for f in items]
    left, batches = list(range(len(items))), []
    while left:
        picked = first_batch(axes, items[left[0]], [keys[i] for i in left], [rows[i] for i in left], max_batch, check)
        chosen = [left[i] for i in picked]
        batches.append(chosen)
        left = [i for i in left if i not in chosen]
    return batches


def _fits(check: Callable[[Feeds], None], axes: BatchAxes, first: Feeds, rows: int) -> bool:
    try:
        check(merged_standins(axes, first, rows))
    except Exception:  # a guard on the batch dim (a range, multiple_of or relation) that the merge would break
        return False
    return True


def run_grouped(
    run: Callable[[Feeds], Outputs], axes: BatchAxes | None, batch: Sequence[Feeds]
) -> list[Outputs | BaseException]:
    """Run one batch as one call and split it; when the call fails, run each request alone. ``axes`` may be
    None for a batch of one."""
    if len(batch) == 1:
        try:
            return [run(batch[0])]
        except Exception as e:
            return [e]
    assert axes is not None
    try:
        outs = run(concat(axes, batch))
    except Exception:
        return [run_grouped(run, axes, [feeds])[0] for feeds in batch]
    return list(split(axes, outs, [axes.rows(f) for f in batch]))


@dataclass
class _Item:
    feeds: Feeds
    rows: int
    key: tuple[Any, ...]
    arrival: float
    future: asyncio.Future[Outputs]


class Batcher:
    """Queues requests for one model and runs them in batches, one call in flight at a time."""

    def __init__(
        self,
        run: Callable[[Feeds], Outputs],
        axes: BatchAxes,
        *,
        max_batch: int,
        timeout_s: float = 0.0,
        check: Callable[[Feeds], None] = lambda _feeds: None,
        executor: Executor | None = None,
        adaptive: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._run, self._axes, self._check, self._executor = run, axes, check, executor
        self.max_batch, self.timeout_s = max_batch, timeout_s
        self.sizer = BatchSizer(max_batch) if adaptive else None
        self._clock = clock  # times each call for the sizer (a test passes a clock its model advances)
        self._queue: list[_Item] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, feeds: Feeds) -> Outputs:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._serve())
        item = _Item(feeds, self._axes.rows(feeds), self._axes.key(feeds), time.monotonic(), loop.create_future())
        self._queue.append(item)
        assert self._wake is not None
        self._wake.set()
        return await item.future

    async def _serve(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            self._queue = [i for i in self._queue if not i.future.done()]  # drop requests whose client went away
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.timeout_s > 0:
                await self._fill(self._queue[0])
                self._queue = [i for i in self._queue if not i.future.done()]
                if not self._queue:
                    continue
            cap = self._cap(self._queue[0].key)
            queue = self._queue  # each request's key and rows were taken once, on arrival
            keys, rows = [i.key for i in queue], [i.rows for i in queue]
            chosen = set(first_batch(self._axes, queue[0].feeds, keys, rows, cap, self._check))
            batch = [item for i, item in enumerate(self._queue) if i in chosen]
            self._queue = [item for i, item in enumerate(self._queue) if i not in chosen]
            await self._call(loop, batch, cap)

    def _cap(self, key: tuple[Any, ...]) -> int:
        return self.max_batch if self.sizer is None else self.sizer.cap(key)

    async def _fill(self, head: _Item) -> None:
        """Wait until the head's batch is full or the head has waited ``timeout_s``."""
        assert self._wake is not None
        deadline = head.arrival + self.timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if sum(i.rows for i in self._queue if i.key == head.key) >= self._cap(head.key):
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                return

    async def _call(self, loop: asyncio.AbstractEventLoop, batch: list[_Item], cap: int) -> None:
        try:
            results, seconds = await loop.run_in_executor(self._executor, self._timed, [b.feeds for b in batch])
        except asyncio.CancelledError:
            for item in batch:
                item.future.cancel()
            raise
        except Exception as e:  # a failure outside the model calls: the whole batch gets it
            results, seconds = [e] * len(batch), None
        if self.sizer is not None and seconds is not None:
            self.sizer.observe(batch[0].key, cap, sum(b.rows for b in batch), seconds)
        for item, result in zip(batch, results):
            if item.future.done():  # the client went away
                continue
            if isinstance(result, BaseException):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)

    def _timed(self, batch: list[Feeds]) -> tuple[list[Outputs | BaseException], float | None]:
        """``run_grouped`` on a worker thread, and its seconds when every request succeeded (a failed batch runs
        its requests again one by one, which says nothing of the batch's size)."""
        start = self._clock()
        results = run_grouped(self._run, self._axes, batch)
        seconds = self._clock() - start
        return results, None if any(isinstance(r, BaseException) for r in results) else seconds
