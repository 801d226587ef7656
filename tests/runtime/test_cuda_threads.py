"""Prepared calls under load, over the fake driver: 8 threads x mixed shapes (numpy outputs, device outputs
synchronized, out= tensors of each thread's own) all correct while 2 CUDA graphs are shared out among more shapes
and threads (graphs dropped and captured under load); 1,000 calls with no device-memory growth and no
allocation past the first call of each shape; the preparations' LRU evicting safely while other threads call.

The full count (8 threads x 200 calls, kernels under the Triton interpreter: minutes) is a slow test:
``pytest -m slow tests/runtime/test_cuda_threads.py``; the default run makes 8 x 12."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest
from fake_cuda import FakeDriver
from fake_cuda_calls import ALLOCATIONS, FREES, InstantDriver

from aotc.ir.evaluate import GraphRunner
from aotc.runtime.guards import Binder
from tests.runtime.test_cuda_prepared import Wired, _hand, _mlp
from tests.runtime.test_interpret_backend import GRAPH, _feeds

pytest.importorskip("triton")

SHAPES = [1, 4, 9, 16]


def _eight_threads(calls: int) -> None:
    fake, _, exe = _hand(graph_cache=2)
    cases = [dict(zip(("x", "ids"), _feeds(r, [r % 10, 9, 0], seed=r))) for r in SHAPES]
    wants = [GraphRunner(GRAPH).run(list(c.values()), Binder(GRAPH).bind(list(c.values()))) for c in cases]
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            outs = {k: [fake.device_array(np.zeros_like(w)) for w in wants[k]] for k in range(len(SHAPES))}
            for i in range(calls):
                k = (t + i) % len(SHAPES)
                mode = (t + i) % 3
                if mode == 0:
                    got = exe.run(cases[k])
                elif mode == 1:
                    got = [a.numpy() for a in exe.run(cases[k], outputs="device", sync=True)]
                else:
                    mine = outs[k]
                    assert exe.run(cases[k], out=mine, sync=True) == mine
                    got = [fake.read(o.ptr, w.shape, w.dtype) for o, w in zip(mine, wants[k])]
                for a, b in zip(got, wants[k]):
                    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        except BaseException as e:  # surfaced by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    with exe:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        program = exe._variants[0][1]
        assert len(program._graphed) <= 2
    assert not errors, errors[0]
    assert program.stats["replay"] > 0 and program.stats["captures"] >= 2


def test_eight_threads_with_mixed_shapes_and_outputs() -> None:
    _eight_threads(12)


@pytest.mark.slow
def test_eight_threads_times_two_hundred_mixed_shape_calls() -> None:
    _eight_threads(200)


def test_a_thousand_calls_grow_no_device_memory_and_allocate_nothing() -> None:
    """The driver computes nothing here (InstantDriver): what is counted is what aotc allocates and frees."""
    from fake_cuda_calls import Counted

    from aotc.runtime import Executable

    fake = InstantDriver()
    counted = Counted(fake)
    cases = [np.ones((b, 32), np.float32) for b in (1, 3, 7)]
    with Executable(_mlp(), Wired(fake, counted, graph_cache=2)) as exe:
        gpu = [fake.device_array(c) for c in cases]

        def calls(n: int) -> None:
            for i in range(n):
                k = i % 3
                exe.run({"x": gpu[k] if i % 2 else cases[k]}, outputs="device" if i % 4 < 2 else "numpy")

        calls(24)  # every shape prepared, captured and its numpy staging made
        gc.collect()
        settled, free = fake.live(), fake.cuMemGetInfo()[1]
        counted.reset()
        calls(1000)
        gc.collect()
        assert counted.of(ALLOCATIONS | FREES) == []
        assert fake.live() == settled and fake.cuMemGetInfo()[1] == free
    assert fake.live()["allocations"] == len(fake.allocs)


def test_preparations_evicted_while_other_threads_call_stay_correct() -> None:
    """At most 3 preparations kept, 4 threads x 4 shapes: every call may find its shape evicted meanwhile."""
    fake = FakeDriver()
    from aotc.runtime import Executable

    exe = Executable(_mlp(), Wired(fake, fake, graph_cache=1))
    program = exe._variants[0][1]
    program._max_prepared = 3
    cpu = Executable(_mlp(), "cpu")
    cases = [np.random.default_rng(b).standard_normal((b, 32)).astype(np.float32) for b in (1, 2, 3, 5)]
    wants = [cpu(c) for c in cases]
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(int(os.environ.get("AOTC_EVICT_CALLS", "6"))):
                k = (t + i) % 4
                np.testing.assert_allclose(exe(cases[k]), wants[k], rtol=2e-5, atol=2e-5)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    with exe:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(program._prepared) <= 3
    assert not errors, errors[0]
    assert fake.live()["graph_execs"] == 0 and fake.live()["streams"] == 0
