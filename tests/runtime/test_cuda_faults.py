"""Failures while freeing GPU resources, over the fake driver. A CUDA graph whose destroy fails on eviction leaves
no lock held: the failing call raises an ExecError, the next call replays the new graph and close() returns,
freeing everything else before it raises the first error. After a kernel fault every later CUDA call fails: the
calls raise the fault and closing frees quietly, so the fault is what the caller sees."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries
from fake_cuda_types import CUresult

from aotc.errors import ExecError
from aotc.ir.evaluate import GraphRunner
from aotc.ir.variant import Variant
from aotc.runtime.backends.cuda import CudaBackend, CudaError
from aotc.runtime.backends.cuda.program import CudaProgram
from aotc.runtime.guards import Binder
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")


def _backend(graph_cache: int = 16) -> tuple[FakeDriver, CudaBackend, CudaProgram]:
    fake = FakeDriver()
    binaries = fake_binaries(SCHEDULE)
    fake.register(SCHEDULE, binaries)
    backend = CudaBackend(driver=fake, graph_cache=graph_cache)
    return fake, backend, backend.prepare(Variant(GRAPH, SCHEDULE), binaries)


def _call(program: CudaProgram, rows: int) -> list[np.ndarray]:
    feeds = _feeds(rows, [1, 2, 3])
    env = Binder(GRAPH).bind(feeds)
    got = program.run(feeds, env)
    for a, b in zip(got, GraphRunner(GRAPH).run(feeds, env)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    return got


_WORKER = ThreadPoolExecutor(1, thread_name_prefix="fault-test")  # one thread: its calls share their shapes


def _returns(fn: Callable[[], object], timeout: float = 30.0) -> BaseException | None:
    """What ``fn`` raised (None if nothing), run on one worker thread (the same for every call, so calls share
    their prepared shapes) so that a hang fails the test instead of hanging it."""

    def body() -> BaseException | None:
        try:
            fn()
        except BaseException as e:
            return e
        return None

    try:
        return _WORKER.submit(body).result(timeout)
    except FutureTimeout:
        raise AssertionError(f"{fn.__qualname__} did not return in {timeout} s: a lock was left held") from None


def test_a_graph_destroy_failing_on_eviction_leaves_no_lock_held() -> None:
    fake, backend, program = _backend(graph_cache=1)
    for rows in (3, 3, 4):  # 3: eager, then captured; 4: eager
        assert _returns(lambda rows=rows: _call(program, rows)) is None
    fake.fail(CUresult.CUDA_ERROR_INVALID_VALUE, "cuGraphExecDestroy")
    # The call capturing shape 4 evicts shape 3's graph, whose destroy fails: that call raises ...
    error = _returns(lambda: _call(program, 4))
    assert isinstance(error, ExecError) and "cuGraphExecDestroy" in str(error)
    # ... and leaves shape 4's new graph cached and unlocked: the next call replays it.
    replays = program.stats["replay"]
    assert _returns(lambda: _call(program, 4)) is None
    assert program.stats["replay"] == replays + 1

    error = _returns(program.close)
    assert isinstance(error, CudaError) and error.name == "CUDA_ERROR_INVALID_VALUE"
    live = fake.live()
    # Everything was tried: only the two executables whose destroy failed remain (and the model's weights).
    assert (live["graph_execs"], live["graphs"], live["streams"], live["events"]) == (2, 0, 0, 0)
    assert live["allocations"] == len(GRAPH.constants)
    assert _returns(backend.close) is None


def test_after_a_kernel_fault_calls_raise_it_and_closing_frees_quietly() -> None:
    fake, backend, program = _backend()
    for _ in range(3):  # eager, capture, replay: a graph and its slot to free at close
        _call(program, 5)
    # A weight address outside every allocation: the next eager call's first kernel faults, and the GPU with it.
    program.weights = dict.fromkeys(program.weights, 64)
    error = _returns(lambda: _call(program, 6))
    assert isinstance(error, CudaError) and error.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert fake.fault is CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    assert backend.device.fault == "CUDA_ERROR_ILLEGAL_ADDRESS"
    error = _returns(lambda: _call(program, 5))  # sticky: a replay of a good graph fails too
    assert isinstance(error, CudaError) and error.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    # Every free fails now too; closing still frees what it can and raises nothing over the fault.
    assert _returns(backend.close) is None


def test_closing_the_backend_frees_everything_else_when_one_free_fails() -> None:
    """A weight whose cuMemFree fails must not keep the modules loaded or the other programs' memory held."""
    fake, backend, program = _backend()
    _call(program, 5)
    second = backend.prepare(Variant(GRAPH, SCHEDULE), fake_binaries(SCHEDULE))
    _call(second, 7)
    free = fake.cuMemFree
    failed: list[int] = []

    def free_once(ptr: int) -> object:
        if not failed:
            failed.append(ptr)
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return free(ptr)

    fake.cuMemFree = free_once
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        backend.close()
    assert fake.live()["modules"] == 0 and fake.live()["allocations"] == 1  # only the one that failed
