"""The batch size the server learns (aotc.serve.batch_size): on a device where size costs nothing it keeps the
largest batch, where rows cost more in big batches (a CPU whose cache they leave) it settles on the fastest size,
and it follows the machine when costs change. Costs here are functions of the rows, timed on a virtual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from aotc.serve.batch_size import BatchSizer
from aotc.serve.batching import BatchAxes, Batcher

Cost = Callable[[int], float]  # seconds for a call of this many rows


def gpu_like(rows: int) -> float:
    return 1e-3 + 1e-5 * rows  # launch-bound: 64 rows cost little more than one


def cache_cliff(rows: int) -> float:
    """Seconds per row fall up to 8 rows (fixed costs shared), then rise as the activations leave the cache:
    0.32 ms a row at 8 rows, ~1.5 ms at 64, as the example BERT at seq 128 on onnxruntime."""
    per_row = 0.30e-3 + 0.2e-3 / rows if rows <= 8 else 0.325e-3 * (rows / 8) ** 0.75
    return per_row * rows


def drive(sizer: BatchSizer, cost: Cost, waiting: int, calls: int, key: Any = "k") -> list[int]:
    """A closed loop with ``waiting`` rows always queued: each call takes min(cap, waiting) rows. The caps used."""
    caps = []
    for _ in range(calls):
        cap = sizer.cap(key)
        rows = min(cap, waiting)
        sizer.observe(key, cap, rows, cost(rows))
        caps.append(cap)
    return caps


def test_sizes_are_powers_of_two_and_the_max() -> None:
    assert BatchSizer(64).sizes == [1, 2, 4, 8, 16, 32, 64]
    assert BatchSizer(48).sizes == [1, 2, 4, 8, 16, 32, 48]
    assert BatchSizer(1).sizes == [1]
    with pytest.raises(ValueError, match="max_batch must be at least 1, got 0"):
        BatchSizer(0)


def test_where_size_costs_nothing_the_largest_batch_stays() -> None:
    sizer = BatchSizer(64)
    caps = drive(sizer, gpu_like, waiting=64, calls=400)
    assert sizer.best("k") == 64
    assert caps[0] == 64 and caps.count(64) >= 0.95 * len(caps)  # the rest are the periodic probes of 32


def test_where_big_batches_cost_more_per_row_the_cap_settles_on_the_fastest_size() -> None:
    sizer = BatchSizer(64)
    caps = drive(sizer, cache_cliff, waiting=64, calls=400)
    assert caps[:6] == [64, 32, 16, 8, 4, 8]  # halves while each step is faster; 4 is slower, so back to 8
    assert sizer.best("k") == 8
    assert caps[6:].count(8) >= 0.95 * len(caps[6:])
    fixed = 64 / cache_cliff(64)
    learnt = 8 / cache_cliff(8)
    assert learnt > 4 * fixed  # what the closed loop gains in rows per second


def test_a_light_load_keeps_the_largest_cap() -> None:
    sizer = BatchSizer(64)
    drive(sizer, cache_cliff, waiting=1, calls=200)  # every call one row, whatever the cap
    assert sizer.best("k") == 64 and sizer.cap("k") in (32, 64)
    caps = drive(sizer, gpu_like, waiting=64, calls=50)  # then the load rises on a device where size is free
    assert caps.count(64) >= 45


def test_the_cap_follows_a_change_in_costs() -> None:
    sizer = BatchSizer(64, probe_every=16)
    drive(sizer, cache_cliff, waiting=64, calls=100)
    assert sizer.best("k") == 8
    drive(sizer, gpu_like, waiting=64, calls=16 * 12)  # the machine's other load went away, say
    assert sizer.best("k") == 64


def test_keys_learn_apart_and_the_least_used_is_forgotten() -> None:
    sizer = BatchSizer(64, keys=2)
    drive(sizer, cache_cliff, waiting=64, calls=50, key="seq128")
    drive(sizer, gpu_like, waiting=64, calls=50, key="seq16")
    assert (sizer.best("seq128"), sizer.best("seq16")) == (8, 64)
    drive(sizer, gpu_like, waiting=64, calls=1, key="seq32")  # a third key: seq128 was used least recently
    assert sizer.best("seq128") == 64 and sizer.cap("seq128") == 64  # starts again from the max


def test_calls_that_say_nothing_are_ignored() -> None:
    sizer = BatchSizer(64)
    sizer.observe("k", 64, 0, 1.0)
    sizer.observe("k", 64, 3, 0.0)
    sizer.observe("k", 5, 5, 1.0)  # not a cap this sizer gives
    assert sizer.cap("k") == 64 and sizer._shapes == {}


# -- in the batcher ----------------------------------------------------------------------------------------------
AXES = BatchAxes({"x": 0}, (0,))


class CliffModel:
    """Doubles x; each call advances a virtual clock by cache_cliff(rows) scaled to the cliff at 4 rows."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[int] = []

    def clock(self) -> float:
        return self.now

    def __call__(self, feeds: Any) -> list[np.ndarray]:
        rows = feeds["x"].shape[0]
        self.calls.append(rows)
        self.now += cache_cliff(2 * rows)
        return [feeds["x"] * 2]


async def closed_loop(batcher: Batcher, clients: int, requests: int) -> list[bool]:
    """``clients`` tasks, each sending its next request when the last is answered; whether each answer was right."""
    sent = iter(range(requests))
    ok: list[bool] = []

    async def client() -> None:
        for i in sent:
            x = np.full((1, 3), float(i), np.float32)
            (y,) = await batcher({"x": x})
            ok.append(bool((y == 2 * x).all()))

    await asyncio.gather(*(client() for _ in range(clients)))
    return ok


def test_the_batcher_learns_the_cap_from_its_calls() -> None:
    model = CliffModel()
    batcher = Batcher(model, AXES, max_batch=32, clock=model.clock)
    ok = asyncio.run(closed_loop(batcher, clients=32, requests=2000))
    assert len(ok) == 2000 and all(ok)
    assert batcher.sizer is not None and batcher.sizer.best(AXES.key({"x": np.zeros((1, 3), np.float32)})) == 4
    late = model.calls[len(model.calls) // 2 :]
    assert sum(r <= 4 for r in late) >= 0.9 * len(late)


def test_a_fixed_batcher_fills_up_to_max_batch() -> None:
    model = CliffModel()
    batcher = Batcher(model, AXES, max_batch=32, clock=model.clock, adaptive=False)
    ok = asyncio.run(closed_loop(batcher, clients=32, requests=500))
    assert all(ok) and batcher.sizer is None
    assert max(model.calls) > 16
