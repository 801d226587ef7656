"""No allocation per call, and the pool's release threshold (issue 26). A call at a prepared shape allocates and
frees nothing from the driver, so device memory stays flat over many calls and closing gives it all back.

The ~0.3 ms an eager call with MB-sized device outputs paid on the H200 (run 2): outputs came from aotc's pool,
whose release threshold was set without reading the call's result. A pool at the default threshold (0) hands
every freed block back to the driver at each synchronize (the fake does as CUDA does), so each call's output
allocation mapped fresh memory. The threshold's result is now checked and read back: a pool whose threshold
does not take is not used, and says why."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries
from fake_cuda_calls import ALLOCATIONS, FREES, Counted
from fake_cuda_types import CUresult

from aotc.ir.evaluate import GraphRunner
from aotc.ir.variant import Variant
from aotc.runtime.backends.cuda import CudaBackend
from aotc.runtime.backends.cuda.driver import Device
from aotc.runtime.guards import Binder
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")


def test_calls_at_prepared_shapes_allocate_and_free_nothing() -> None:
    fake = FakeDriver()
    counted = Counted(fake)
    binaries = fake_binaries(SCHEDULE)
    fake.register(SCHEDULE, binaries)
    with CudaBackend(driver=counted) as backend:
        program = backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
        cases = [_feeds(rows, [1, 2, 3], seed=rows) for rows in (5, 6)]
        for feeds in cases * 2:  # each shape: eager, then captured; numpy outputs' pinned staging too
            for outputs in ("device", "numpy"):
                program.run(feeds, Binder(GRAPH).bind(feeds), outputs=outputs, sync=True)
        gc.collect()
        used = sum(a.size for a in fake.allocs.values())
        counted.reset()
        for i in range(40):
            feeds = cases[i % 2]
            env = Binder(GRAPH).bind(feeds)
            got = program.run(feeds, env, outputs="device" if i % 3 else "numpy", sync=True)
            for a, b in zip(got, GraphRunner(GRAPH).run(feeds, env)):
                np.testing.assert_allclose(a if isinstance(a, np.ndarray) else a.numpy(), b, rtol=1e-6)
        assert counted.of(ALLOCATIONS | FREES) == []
        gc.collect()
        assert sum(a.size for a in fake.allocs.values()) == used
    assert fake.live() == dict.fromkeys(fake.live(), 0)


def test_the_pool_release_threshold_is_checked_and_read_back() -> None:
    dev = Device(driver=FakeDriver())
    pool = dev.pool()
    assert pool is not None and pool.threshold == 2**64 - 1 and dev.pool_note == ""
    dev.release()

    fake = FakeDriver()
    fake.cuMemPoolSetAttribute = lambda *args: (CUresult.CUDA_ERROR_INVALID_VALUE,)
    dev = Device(driver=fake)
    assert dev.pool() is None  # a pool that would hand its memory back at every synchronize is not used
    assert "release threshold could not be set (CUDA_ERROR_INVALID_VALUE)" in dev.pool_note
    assert fake.pools == {}  # and it was destroyed
    dev.release()


def test_a_pool_at_threshold_zero_gives_its_memory_back_at_each_synchronize() -> None:
    """The fake models what made each call pay: with threshold 0 a freed block does not survive a synchronize,
    so the next allocation of the same size is a fresh one from the driver."""
    fake = FakeDriver()
    dev = Device(driver=fake)
    stream = dev.stream()
    for threshold, fresh in ((0, True), (2**64 - 1, False)):
        _, pool = fake.cuMemPoolCreate(_props(fake))
        fake.cuMemPoolSetAttribute(pool, fake.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                   fake.cuuint64_t(threshold))  # fmt: skip
        _, first = fake.cuMemAllocFromPoolAsync(1 << 20, pool, stream)
        fake.cuMemFreeAsync(first, stream)
        before = len(fake.allocs)
        dev.sync(stream)
        assert (len(fake.allocs) < before) == fresh  # threshold 0: the block went back at the synchronize
        _, again = fake.cuMemAllocFromPoolAsync(1 << 20, pool, stream)  # threshold 0: a fresh driver allocation
        fake.cuMemFreeAsync(again, stream)
        fake.cuMemPoolDestroy(pool)
    dev.destroy_stream(stream)
    dev.release()


def _props(fake: FakeDriver) -> object:
    props = fake.CUmemPoolProps()
    props.location.type = fake.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    return props
