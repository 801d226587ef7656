"""The cuda backend end to end over the fake driver (device memory is host memory, kernels run under the Triton
interpreter): the hand-built schedule of test_interpret_backend (arena intermediate, symbolic sizes, an output
view, an index check) matches the cpu runner eagerly and from CUDA graph replay, bit for bit between the two;
a flagged id fails that call only; 8 threads x 20 mixed-shape calls are right; close() frees every allocation."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries

from aotc.errors import ExecError, GuardError
from aotc.ir.evaluate import GraphRunner
from aotc.ir.variant import Variant
from aotc.runtime.backends.cuda import CudaBackend, DeviceArray, dlpack
from aotc.runtime.guards import Binder
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")


def _backend(graph_cache: int = 16, **fake_args: object) -> tuple[FakeDriver, CudaBackend, object]:
    fake = FakeDriver(**fake_args)  # type: ignore[arg-type]
    binaries = fake_binaries(SCHEDULE)
    fake.register(SCHEDULE, binaries)
    backend = CudaBackend(driver=fake, graph_cache=graph_cache)
    return fake, backend, backend.prepare(Variant(GRAPH, SCHEDULE), binaries)


def _want(feeds: list[np.ndarray]) -> list[np.ndarray]:
    return GraphRunner(GRAPH).run(feeds, Binder(GRAPH).bind(feeds))


def _env(feeds: list[np.ndarray]) -> dict[str, int]:
    return Binder(GRAPH).bind(feeds)


@pytest.mark.parametrize("rows", [1, 37])
def test_eager_and_replayed_calls_match_the_cpu_runner(rows: int) -> None:
    fake, backend, program = _backend()
    with backend:
        for call in range(3):
            feeds = _feeds(rows, [9, 0, 3], seed=call)
            got = program.run(feeds, _env(feeds))
            assert [a.shape for a in got] == [(rows,), (rows, 1), (3, 4)]
            for a, b in zip(got, _want(feeds)):
                assert a.dtype == b.dtype
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        # the first call of a shape runs eagerly, then one capture serves the next two calls
        assert program.stats == {"eager": 1, "replay": 2, "captures": 1}
        assert fake.live()["graph_execs"] == 1


def test_graph_replay_equals_eager_launches_bit_for_bit() -> None:
    _, eager_backend, eager = _backend(graph_cache=0)
    _, graph_backend, graphed = _backend()
    with eager_backend, graph_backend:
        for rows in (3, 11, 3, 11, 3):
            feeds = _feeds(rows, [1, 2, 9], seed=rows)
            a, b = eager.run(feeds, _env(feeds)), graphed.run(feeds, _env(feeds))
            for x, y in zip(a, b):
                assert x.tobytes() == y.tobytes()
        assert eager.stats["replay"] == 0 and graphed.stats["replay"] == 3


def test_launches_use_the_binary_geometry() -> None:
    fake, backend, program = _backend()
    with backend:
        feeds = _feeds(4, [1, 2, 3])
        program.run(feeds, _env(feeds))
    # add_bias: cdiv(4 * 8, 128) = 1 program; row_sum: one per row; gather: one per id; 4 warps each
    assert sorted((name, grid, block) for name, grid, block, _, _ in fake.launches) == [
        ("add_bias", (1, 1, 1), 128),
        ("gather_rows", (3, 1, 1), 128),
        ("row_sum", (4, 1, 1), 128),
    ]


@pytest.mark.parametrize("graph_cache", [0, 4])
def test_an_out_of_range_id_fails_that_call_only(graph_cache: int) -> None:
    _, backend, program = _backend(graph_cache)
    with backend:
        for _ in range(3):  # eager, capture, replay
            bad = _feeds(2, [1, 10, 0])
            with pytest.raises(ExecError) as err:
                program.run(bad, _env(bad))
            assert str(err.value) == "gather at test.py:7: an index in input 'ids' is outside the valid range [0, 10)"
            good = _feeds(2, [1, 9, 0])
            for a, b in zip(program.run(good, _env(good)), _want(good)):
                np.testing.assert_allclose(a, b, rtol=1e-6)


def test_eight_threads_with_mixed_shapes() -> None:
    _, backend, program = _backend(graph_cache=2)  # fewer graphs than shapes: eviction under load
    shapes = [1, 4, 9, 16]
    cases = [_feeds(r, [r % 10, 9, 0], seed=r) for r in shapes]
    wants = [_want(f) for f in cases]
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(20):
                k = (t + i) % len(shapes)
                for a, b in zip(program.run(cases[k], _env(cases[k])), wants[k]):
                    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        except BaseException as e:  # surfaced by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    with backend:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert program.stats["replay"] > 0


def test_the_graph_cache_is_bounded() -> None:
    fake, backend, program = _backend(graph_cache=2)
    with backend:
        for _ in range(2):
            for rows in (1, 2, 3, 4):
                feeds = _feeds(rows, [0, 0, 0])
                program.run(feeds, _env(feeds))
                assert fake.live()["graph_execs"] <= 2
        assert fake.live()["graph_execs"] == 2


def test_close_frees_every_allocation() -> None:
    fake, backend, program = _backend()
    before = fake.live()
    assert before["allocations"] == 2  # the two weights, uploaded once
    for rows in (2, 2, 5):
        feeds = _feeds(rows, [1, 2, 3])
        program.run(feeds, _env(feeds))
    kept = program.run(feeds, _env(feeds), outputs="device")
    backend.close()
    backend.close()  # idempotent
    live = fake.live()
    # only the static output block the caller's device outputs view is alive, with the context they need
    assert live == {"allocations": 1, "pinned": 0, "modules": 0, "streams": 0, "events": 0, "graphs": 0,
                    "graph_execs": 0, "contexts": 1}  # fmt: skip
    np.testing.assert_allclose(kept[0].numpy(), _want(feeds)[0], rtol=1e-6)
    del kept
    gc.collect()
    assert all(v == 0 for v in fake.live().values()), fake.live()
    with pytest.raises(ExecError, match="closed"):
        program.run(feeds, _env(feeds))


def test_out_of_memory_names_the_bytes_and_later_calls_work() -> None:
    fake, backend, program = _backend()
    with backend:
        small = _feeds(2, [0, 1, 2])
        program.run(small, _env(small))  # prepared: its memory is made once
        fake.memory = sum(a.size for a in fake.allocs.values()) + 1024  # no room for another shape's
        big = _feeds(64, [0, 1, 2])
        with pytest.raises(ExecError, match=r"cannot allocate \d+ bytes of GPU memory .*CUDA_ERROR_OUT_OF_MEMORY"):
            program.run(big, _env(big))
        for a, b in zip(program.run(small, _env(small)), _want(small)):
            np.testing.assert_allclose(a, b, rtol=1e-6)


def test_device_outputs_expose_cuda_array_interface_and_dlpack() -> None:
    fake, backend, program = _backend()
    with backend:
        feeds = _feeds(3, [4, 5, 6])
        s, r, g = program.run(feeds, _env(feeds), outputs="device", sync=True)  # done: its memory is read below
        want = _want(feeds)
        assert isinstance(g, DeviceArray) and g.shape == (3, 4) and g.dtype == np.float32
        cai = g.__cuda_array_interface__
        assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["data"][0] == g.ptr
        np.testing.assert_allclose(fake.read(g.ptr, g.shape, g.dtype), want[2], rtol=1e-6)
        capsule = g.__dlpack__()
        t = dlpack.read(capsule)
        assert (t.ptr, t.shape, t.strides, t.code, t.bits, t.device_type) == (g.ptr, (3, 4), None, 2, 32, 2)
        assert g.__dlpack_device__() == (2, 0)
        assert dlpack.live_exports() >= 1
        del capsule
        gc.collect()
        assert dlpack.live_exports() == 0  # an unconsumed capsule calls its deleter
        assert r.ptr != s.ptr  # an output that views another has its own static buffer
        np.testing.assert_allclose(r.numpy(), want[1], rtol=1e-6)


def test_device_inputs_are_read_in_place_and_checked() -> None:
    fake, backend, program = _backend()
    with backend:
        feeds = _feeds(6, [1, 2, 3])
        on_gpu = [fake.device_array(f) for f in feeds]
        for _ in range(3):  # eager in place, then staged copies for the graph
            got = program.run(on_gpu, _env(feeds))
            for a, b in zip(got, _want(feeds)):
                np.testing.assert_allclose(a, b, rtol=1e-6)
        with pytest.raises(GuardError, match=r"input 'x' on the GPU has strides .* expected a C-contiguous"):
            program.run([on_gpu[0].transposed(), on_gpu[1]], {"n": 8})
        with pytest.raises(GuardError, match="input 'ids' holds 16 bytes, the bound shapes need 24"):
            program.run([on_gpu[0], fake.device_array(feeds[1][:2])], _env(feeds))  # no guards ran: still caught
        stray = fake.device_array(feeds[0])
        fake.cuMemFree(stray.ptr)  # a pointer the driver does not know
        with pytest.raises(GuardError, match="input 'x' lives on memory the CUDA driver does not know"):
            program.run([stray, on_gpu[1]], _env(feeds))


def test_repeated_calls_leak_no_device_memory() -> None:
    fake, backend, program = _backend(graph_cache=2)
    with backend:
        cases = [_feeds(r, [1, 2, 3], seed=r) for r in (1, 6, 11)]  # three shapes, two graphs: eviction too

        def calls(n: int) -> None:
            for i in range(n):
                feeds = cases[i % 3]
                out = program.run(feeds, _env(feeds), outputs="device" if i % 2 else "numpy")
                del out

        calls(12)
        gc.collect()
        settled = fake.live()
        free = fake.cuMemGetInfo()[1]
        calls(60)
        gc.collect()
        assert fake.live() == settled
        assert fake.cuMemGetInfo()[1] == free


def test_a_tensor_with_both_interfaces_is_read_through_dlpack() -> None:
    """torch exports bfloat16 through __cuda_array_interface__ as '<V2' (raw bytes): DLPack, which names the
    type, is read first; an array interface alone with a raw-bytes typestr is refused, naming DLPack."""
    from aotc.runtime.backends.cuda.arrays import DeviceMemory, adopt

    _, backend, _ = _backend()
    with backend:
        bf16 = dlpack.np_dtype(4, 16)
        out = DeviceArray(backend.device, DeviceMemory(backend.device, 8, "a test tensor"), (4,), bf16)
        assert out.__cuda_array_interface__["typestr"].startswith("<V")  # what torch gives for bfloat16 too
        got = adopt(out)
        assert got is not None and got.dtype == bf16 and got.ptr == out.ptr and got.shape == (4,)

        class ArrayInterfaceOnly:
            __cuda_array_interface__ = out.__cuda_array_interface__

        with pytest.raises(GuardError, match=r"'<V2' \(raw bytes\).*through DLPack"):
            adopt(ArrayInterfaceOnly())
        out.free()
