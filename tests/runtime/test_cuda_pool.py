"""Outputs kept on the GPU come from aotc's own stream-ordered pool: after the first calls, a call allocates
nothing from the driver (cuMemAlloc and the synchronizing cuMemFree cost more than a small model's whole call
on a real GPU), the memory stays steady, and closing gives it all back. A driver without pools still works."""

from __future__ import annotations

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries

from aotc.ir.evaluate import GraphRunner
from aotc.ir.variant import Variant
from aotc.runtime.backends.cuda import CudaBackend
from aotc.runtime.guards import Binder
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")


def _run(fake: FakeDriver, calls: int) -> tuple[list[int], int]:
    """Driver allocations after each call (each output freed before the next call), and the pools made."""
    binaries = fake_binaries(SCHEDULE)
    fake.register(SCHEDULE, binaries)
    counts = []
    with CudaBackend(driver=fake) as backend:
        program = backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
        for i in range(calls):
            feeds = _feeds(5 + i % 2, [1, 2, 3])
            env = Binder(GRAPH).bind(feeds)
            got = program.run(feeds, env, outputs="device")
            for a, b in zip(got, GraphRunner(GRAPH).run(feeds, env)):
                np.testing.assert_allclose(a.numpy(), b, rtol=1e-6)
                a.free()
            counts.append(len(fake.allocs))
        pools = len(fake.pools)
    return counts, pools


def test_outputs_reuse_pooled_memory_and_closing_returns_it() -> None:
    fake = FakeDriver()
    counts, pools = _run(fake, 8)
    assert pools == 1 and len(set(counts[4:])) == 1  # steady once each shape's graph and outputs were made
    assert fake.pools == {} and fake.live()["allocations"] == 0


def test_a_driver_without_pools_falls_back_to_plain_allocations() -> None:
    fake = FakeDriver()
    fake.cuMemPoolCreate = lambda props: (fake.CUresult.CUDA_ERROR_NOT_SUPPORTED, None)
    counts, pools = _run(fake, 8)
    assert pools == 0 and len(set(counts[4:])) == 1 and fake.live()["allocations"] == 0
