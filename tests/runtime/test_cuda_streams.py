"""Independent branches on separate streams: the dependency analysis and stream assignment, and end to end over
the fake driver, whose queued work runs in an adversarial order (so a missing event wait gives wrong numbers,
which the sabotage test shows) while a copy to the host is done when it returns, as into pageable memory;
profiling a fresh program whose plan forks over several streams."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries

from aotc.ir.evaluate import GraphRunner
from aotc.ir.variant import Variant
from aotc.runtime.backends.cuda import CudaBackend
from aotc.runtime.backends.cuda.driver import Device
from aotc.runtime.backends.cuda.profile import profile
from aotc.runtime.backends.cuda.streams import SEQUENTIAL, dependencies, plan_streams
from aotc.runtime.guards import Binder
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")


def _rw(reads: list[int], writes: list[int]) -> tuple[list, list]:
    """Accesses to whole storage groups (one space each) by group number."""
    return [(g, 0, 1) for g in reads], [(g, 0, 1) for g in writes]


def test_a_chain_stays_on_one_stream() -> None:
    chain = [_rw([1], [2]), _rw([2], [3]), _rw([3], [4])]
    assert dependencies(chain) == [set(), {0}, {1}]
    assert plan_streams(chain, 4) is SEQUENTIAL
    assert plan_streams([_rw([1], [2]), _rw([1], [3])], 1) is SEQUENTIAL  # streams=1 turns it off


def test_two_branches_fork_and_join() -> None:
    # a: 1 -> 2 ; b: 1 -> 3 (independent of a) ; c: 2, 3 -> 4 ; d: 3 -> 5 ; e: 1 -> 6 (independent of all)
    launches = [_rw([1], [2]), _rw([1], [3]), _rw([2, 3], [4]), _rw([3], [5]), _rw([1], [6])]
    plan = plan_streams(launches, 4)
    assert plan.count == 3
    assert plan.stream_of == (0, 1, 0, 1, 2)  # c continues a's chain, d b's; e gets a stream of its own
    assert plan.waits == ((), (), (1,), (), ())  # only c crosses streams: it waits for b
    assert plan.tails == (3, 4) and plan.records == frozenset({1, 3, 4})  # the main stream joins d and e
    assert plan_streams(launches, 2).stream_of == (0, 1, 0, 1, 0)  # out of streams: e queues behind c


def test_overlapping_arena_ranges_are_dependencies() -> None:
    # the second kernel writes where the first one read (a reused arena slot): write-after-read
    launches = [([(0, 0, 256)], [(5, 0, 1)]), ([(6, 0, 1)], [(0, 128, 384)]), ([(7, 0, 1)], [(0, 512, 768)])]
    assert dependencies(launches) == [set(), {0}, set()]


def test_the_hand_schedule_runs_its_gather_beside_the_chain() -> None:
    fake = FakeDriver()
    binaries = fake_binaries(SCHEDULE)
    fake.register(SCHEDULE, binaries)
    with CudaBackend(driver=fake) as backend:
        program = backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
        feeds = _feeds(7, [4, 2, 0])
        env = Binder(GRAPH).bind(feeds)
        for _ in range(3):  # eager, capture, replay: the graph keeps the fork and join
            for a, b in zip(program.run(feeds, env), GraphRunner(GRAPH).run(feeds, env)):
                np.testing.assert_allclose(a, b, rtol=1e-6)
        plan = program._shape((7,), env).streams
        assert plan.count == 2 and plan.stream_of == (0, 0, 1)
        assert program.stats["replay"] == 2
        assert fake.live()["streams"] == 2  # the shape's own stream and its auxiliary one, eager and replayed alike


def test_a_missing_wait_is_caught_by_the_adversarial_fake() -> None:
    """Sanity of the fake itself: put row_sum on its own stream without waiting for add_bias."""
    fake = FakeDriver()
    binaries = fake_binaries(SCHEDULE)
    fake.register(SCHEDULE, binaries)
    with CudaBackend(driver=fake, graph_cache=0) as backend:
        program = backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
        feeds = _feeds(5, [1, 2, 3])
        env = Binder(GRAPH).bind(feeds)
        key = (5,)
        shape = program._shape(key, env)
        broken = dataclasses.replace(
            shape.streams, count=3, stream_of=(0, 2, 1), waits=((), (), ()), records=frozenset({1, 2}), tails=(2, 1)
        )
        program._shapes[key] = dataclasses.replace(shape, streams=broken)
        got = program.run(feeds, env)
        assert not np.allclose(got[0], GraphRunner(GRAPH).run(feeds, env)[0])


def test_profile_times_every_launch_with_its_bytes_and_flops() -> None:
    from aotc.kernels.scheduler import schedule_graph
    from tests.kernel_layer.model_kit import DIMS, feeds, lowered

    g = lowered("mlp")
    schedule = schedule_graph(g)
    binaries = fake_binaries(schedule)
    fake = FakeDriver()
    fake.register(schedule, binaries)
    with CudaBackend(driver=fake) as backend:
        program = backend.prepare(Variant(g, schedule), binaries)
        xs = feeds("mlp", g, DIMS["mlp"][1])
        rows = profile(program, xs, Binder(g).bind(xs), repeats=2)
    assert [r.name for r in rows] == [k.name for k in schedule.kernels]
    first = rows[0]
    batch, k_in = xs[0].shape
    m, n, k = first.mnk  # type: ignore[misc]
    assert (m, k) == (batch, k_in) and first.flops == 2 * m * n * k
    # x, the weight, the bias and the output, float32
    assert first.bytes == 4 * (batch * k_in + k_in * n + n + batch * n)
    assert first.ms == 0.25 and first.gbps == first.bytes / 0.25 / 1e6
    assert fake.live()["events"] == 0


def test_a_copy_to_the_host_is_done_when_it_returns() -> None:
    """Into pageable host memory a real cuMemcpyDtoHAsync returns once the copy ran, after the work queued
    before it: the destination holds the data before any synchronize (and is never written after the caller
    may have freed it)."""
    fake = FakeDriver()
    dev = Device(driver=fake)
    main, side, event = dev.stream(), dev.stream(), dev.event()
    data = np.arange(16, dtype=np.int32)
    ptr = dev.alloc(data.nbytes, "a test buffer")
    dev.upload(ptr, data.ctypes.data, data.nbytes, side)
    dev.record(event, side)
    dev.wait_event(main, event)  # the memset follows the upload on the other stream, the copy the memset
    dev.check("cuMemsetD32Async", fake.cuMemsetD32Async(ptr, 7, 4, main))
    out = np.zeros_like(data)
    dev.download(out.ctypes.data, ptr, out.nbytes, main)
    np.testing.assert_array_equal(out, [7, 7, 7, 7, *range(4, 16)])
    dev.free(ptr)
    dev.destroy_event(event)
    for stream in (main, side):
        dev.destroy_stream(stream)
    dev.release()
    assert fake.live() == dict.fromkeys(fake.live(), 0)


def test_profile_of_a_fresh_program_forks_over_its_streams() -> None:
    """BERT's plan uses 4 streams: profiling before any call must create them (it raised KeyError: -1)."""
    from aotc.kernels.scheduler import schedule_graph
    from tests.kernel_layer.model_kit import DIMS, feeds, lowered

    g = lowered("bert")
    schedule = schedule_graph(g)
    binaries = fake_binaries(schedule)
    fake = FakeDriver()
    fake.register(schedule, binaries)
    with CudaBackend(driver=fake) as backend:
        program = backend.prepare(Variant(g, schedule), binaries)
        xs = feeds("bert", g, DIMS["bert"][0])
        env = Binder(g).bind(xs)
        rows = profile(program, xs, env, repeats=1)
        assert [r.name for r in rows] == [k.name for k in schedule.kernels]
        assert program._shape(tuple(env[s] for s in program._symbols), env).streams.count == 4
        # the slot profiling used goes back ready for calls, which still match the cpu runner
        for a, b in zip(program.run(xs, env), GraphRunner(g).run(xs, env)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert fake.live()["streams"] == 0
