"""Issue 26's prepared calls, over the fake driver with its calls counted (fake_cuda_calls.Counted; counts are
exact, times are never asserted): a prepared call with GPU inputs and device outputs makes at most 2 driver calls
replayed and one launch per launch plus one eagerly, none of them an allocation, a free, a synchronize or a copy;
numpy outputs add their downloads and one synchronize. The call runs on the caller's stream (the fake records
the order work ran in), an index error is raised by the contract (sync=True at once, else by the next call,
synchronize() or a host copy) and the next good call succeeds; out= tensors are checked and written in place."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries
from fake_cuda_calls import ALLOCATIONS, COPIES, FREES, SYNCS, Counted

from aotc.artifact.reader import Artifact, read_artifact
from aotc.errors import ExecError, GuardError
from aotc.ir.variant import Variant
from aotc.runtime import Executable
from aotc.runtime.backends.cuda import CudaBackend, DeviceArray
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")


@cache
def _mlp() -> Artifact:
    """The example MLP compiled with no GPU target (the fake binaries stand in): 3 launches, no index checks."""
    import aotc
    from aotc.lowering.options import CompileOptions
    from aotc_cli.loader import import_file
    from tests.kernel_layer.model_kit import MODELS

    model, inputs = import_file(MODELS / "mlp.py").build()
    return read_artifact(aotc.compile(model, inputs, name="mlp", options=CompileOptions(targets=())).artifact_bytes)


class Wired(CudaBackend):
    """A backend whose kernels are the fake's (registered with it)."""

    def __init__(self, fake: FakeDriver, driver: Any, plan: Any = None, **kwargs: Any) -> None:
        super().__init__(driver=driver, **kwargs)
        self.fake, self.plan = fake, plan

    def prepare(self, variant: Variant, binaries: Any) -> Any:
        variant = variant if self.plan is None else variant.replace(plan=self.plan)
        fakes = fake_binaries(variant.plan)
        self.fake.register(variant.plan, fakes)
        return super().prepare(variant, fakes)


@pytest.fixture
def mlp() -> Iterator[tuple[FakeDriver, Counted, Executable]]:
    fake = FakeDriver()
    counted = Counted(fake)
    with Executable(_mlp(), Wired(fake, counted)) as exe:
        yield fake, counted, exe


def _hand(**kwargs: Any) -> tuple[FakeDriver, Counted, Executable]:
    """The hand schedule of test_interpret_backend: an index check on 'ids', an output that views another."""
    from tests.runtime.runtime_graphs import artifact_bytes

    fake = FakeDriver()
    counted = Counted(fake)
    return fake, counted, Executable(read_artifact(artifact_bytes(GRAPH)), Wired(fake, counted, SCHEDULE, **kwargs))


def _x(fake: FakeDriver, batch: int, seed: int = 0) -> tuple[np.ndarray, Any]:
    x = np.random.default_rng(seed).standard_normal((batch, 32)).astype(np.float32)
    return x, fake.device_array(x)


@pytest.fixture
def torch_inputs(monkeypatch: pytest.MonkeyPatch) -> Any:
    """torch tensors on the fake GPU (fake_torch), torch's current stream being the legacy default one."""
    pytest.importorskip("torch")
    import fake_torch

    from aotc.runtime.backends.cuda import arrays

    monkeypatch.setattr(arrays, "torch_stream", lambda device: 0)
    return fake_torch


def test_prepared_replay_is_two_driver_calls_and_eager_one_launch_per_launch(mlp, torch_inputs) -> None:
    fake, counted, exe = mlp
    cpu = Executable(_mlp(), "cpu")
    want = {}
    for i in range(4):  # a new torch tensor (a new address) each call
        x, _ = _x(fake, 3, seed=i)
        gx = torch_inputs.cuda_tensor(fake, x)
        counted.reset()
        (y,) = exe.run({"x": gx}, outputs="device")
        calls = list(counted.calls)
        np.testing.assert_allclose(y.numpy(), cpu(x), rtol=2e-5, atol=2e-5)
        want[i] = calls
    program = exe._variants[0][1]
    assert program.stats == {"eager": 1, "replay": 3, "captures": 1}
    # the first call prepares the shape (its memory, stream and events: made once), then launches eagerly
    assert want[0][-3:] == ["cuLaunchKernel"] * 3 and set(want[0][:-3]) <= {"cuMemAlloc", "cuStreamCreate",
                                                                             "cuEventCreate"}  # fmt: skip
    for calls in (want[2], want[3]):  # replayed: the first node's input pointer updated, then one graph launch
        assert calls == ["cuGraphExecKernelNodeSetParams", "cuGraphLaunch"]
    gx_same = torch_inputs.cuda_tensor(fake, _x(fake, 3, seed=9)[0])
    exe.run({"x": gx_same}, outputs="device")
    counted.reset()
    exe.run({"x": gx_same}, outputs="device")  # the same tensor again: nothing to update
    assert counted.calls == ["cuGraphLaunch"]
    nothing = ALLOCATIONS | FREES | SYNCS | COPIES
    assert not [c for c in (*want[2], *want[3]) if c in nothing]


def test_a_prepared_eager_call_is_one_launch_per_launch(torch_inputs) -> None:
    fake = FakeDriver()
    counted = Counted(fake)
    with Executable(_mlp(), Wired(fake, counted, graph_cache=0)) as exe:
        for i in range(3):
            x, _ = _x(fake, 2, seed=i)
            counted.reset()
            (y,) = exe.run({"x": torch_inputs.cuda_tensor(fake, x)}, outputs="device")
            if i:  # no flags in this plan: nothing but its launches
                assert counted.calls == ["cuLaunchKernel"] * 3
            np.testing.assert_allclose(y.numpy(), Executable(_mlp(), "cpu")(x), rtol=2e-5, atol=2e-5)


def test_numpy_outputs_add_their_downloads_and_one_synchronize(mlp) -> None:
    fake, counted, exe = mlp
    _, gx = _x(fake, 2)
    for _ in range(3):
        exe.run({"x": gx})
    counted.reset()
    exe.run({"x": gx})
    assert counted.counts() == {"cuGraphLaunch": 1, "cuMemcpyDtoHAsync": 1, "cuStreamSynchronize": 1}


def test_an_eager_call_with_index_checks_reads_its_flags_back_with_one_copy() -> None:
    fake, counted, exe = _hand(graph_cache=0)
    with exe:
        x, ids = _feeds(4, [1, 2, 3])
        gpu = {"x": fake.device_array(x), "ids": fake.device_array(ids)}
        exe.run(gpu, outputs="device", sync=True)
        counted.reset()
        exe.run(gpu, outputs="device")
        launches = len(exe._variants[0][1].launches)
        kinds = counted.counts()
        # the plan forks its gather onto a second stream: one record and a wait each way (the fork and join);
        # its output that views another is copied into its own buffer
        assert kinds == {"cuLaunchKernel": launches, "cuMemcpyDtoHAsync": 1, "cuEventRecord": 2,
                         "cuStreamWaitEvent": 2, "cuMemcpyDtoDAsync": 1}  # fmt: skip
        exe.synchronize()


def test_a_call_runs_on_the_callers_stream_in_order_after_its_producer(mlp) -> None:
    fake, _counted, exe = mlp
    x, gx = _x(fake, 4)
    stream = fake.cuStreamCreate(1)[1]
    handle = int(stream)
    ones = np.ones_like(x)
    for _ in range(3):  # eager, then captured and replayed: each on the caller's stream
        # the producer: an upload queued on the caller's stream, not run until someone synchronizes
        fake.cuMemcpyHtoDAsync(gx.ptr, ones.ctypes.data, ones.nbytes, stream)
        fake.executed.clear()
        (y,) = exe.run({"x": gx}, stream=stream)  # numpy outputs: synchronizes the caller's stream
        np.testing.assert_allclose(y, Executable(_mlp(), "cpu")(ones), rtol=2e-5, atol=2e-5)
        ran = [(s, kind) for s, kind, _ in fake.executed]
        assert ran[0] == (handle, "memcpy")  # the producer's copy first, then aotc's work, all on that stream
        assert ran[1:] and all(s == handle for s, _ in ran[1:])
        assert [k for _, k in ran[1:]] == ["launch"] * 3 + ["memcpy"]
    fake.cuStreamDestroy(stream)


def test_device_outputs_are_ordered_on_the_stream_without_a_synchronize(mlp) -> None:
    fake, counted, exe = mlp
    x, gx = _x(fake, 2)
    stream = fake.cuStreamCreate(1)[1]
    counted.reset()
    fake.executed.clear()
    (y,) = exe.run({"x": gx}, outputs="device", stream=int(stream))
    assert counted.of(SYNCS) == [] and fake.executed == []  # queued, not run
    assert y.__cuda_array_interface__["stream"] == int(stream)
    np.testing.assert_allclose(y.numpy(), Executable(_mlp(), "cpu")(x), rtol=2e-5, atol=2e-5)
    fake.cuStreamDestroy(stream)


def test_an_input_from_another_stream_is_waited_for_with_one_event(mlp) -> None:
    fake, counted, exe = mlp
    x, gx = _x(fake, 2)
    producer = fake.cuStreamCreate(1)[1]
    gx.stream = int(producer)  # version 3 array interface: the stream the producer queued its work on
    gx.__class__ = type("OnStream", (type(gx),), {"__cuda_array_interface__": property(
        lambda self: {**type(gx).__mro__[1].__cuda_array_interface__.fget(self), "stream": self.stream})})  # fmt: skip
    mine = fake.cuStreamCreate(1)[1]
    counted.reset()
    (y,) = exe.run({"x": gx}, stream=int(mine))
    assert counted.counts()["cuEventRecord"] == 1 and counted.counts()["cuStreamWaitEvent"] == 1
    np.testing.assert_allclose(y, Executable(_mlp(), "cpu")(x), rtol=2e-5, atol=2e-5)
    for s in (producer, mine):
        fake.cuStreamDestroy(s)


@pytest.mark.parametrize("graph_cache", [0, 4])
def test_index_errors_follow_the_contract_and_the_next_good_call_succeeds(graph_cache: int) -> None:
    fake, _, exe = _hand(graph_cache=graph_cache)
    message = re.escape("gather at test.py:7: an index in input 'ids' is outside the valid range [0, 10)")
    with exe:
        x, _ = _feeds(3, [1, 2, 3])
        good, bad = np.array([1, 9, 0], np.int64), np.array([1, 10, 0], np.int64)
        want = exe.run({"x": x, "ids": good})
        for _ in range(3):  # eager, captured, replayed
            with pytest.raises(ExecError, match=message):  # synchronized: this call raises
                exe.run({"x": x, "ids": bad}, outputs="device", sync=True)
            got = exe.run({"x": x, "ids": good}, outputs="device", sync=True)
            np.testing.assert_allclose(got[2].numpy(), want[2])
            exe.run({"x": x, "ids": bad}, outputs="device")  # not synchronized: returns
            exe.run({"x": x, "ids": good}, outputs="device")  # its flags have not landed: nothing to see yet
            fake.settle()  # the GPU gets there
            with pytest.raises(ExecError, match=r"an earlier call at these shapes .* input 'ids'"):
                exe.run({"x": x, "ids": good}, outputs="device")  # ... and the next call at these shapes raises
            np.testing.assert_allclose(exe.run({"x": x, "ids": good})[2], want[2])
            exe.run({"x": x, "ids": bad}, outputs="device")
            with pytest.raises(ExecError, match=message):
                exe.synchronize()
            exe.synchronize()  # raised once
            (*_, g) = exe.run({"x": x, "ids": bad}, outputs="device")
            with pytest.raises(ExecError, match=message):
                g.numpy()  # a host copy is a synchronize too
            np.testing.assert_allclose(exe.run({"x": x, "ids": good})[2], want[2])


def test_out_tensors_are_written_in_place_and_each_bad_one_is_refused(mlp) -> None:
    fake, counted, exe = mlp
    x, gx = _x(fake, 3)
    want = Executable(_mlp(), "cpu")(x)
    out = fake.device_array(np.zeros((3, 10), np.float32))
    for _ in range(4):
        counted.reset()
        (got,) = exe.run({"x": gx}, out=[out], sync=True)
        assert got is out
        np.testing.assert_allclose(fake.read(out.ptr, (3, 10), np.float32), want, rtol=2e-5, atol=2e-5)
    assert exe._variants[0][1].stats["replay"] >= 2
    assert counted.of(ALLOCATIONS | FREES | COPIES) == []
    bad = [
        (fake.device_array(np.zeros((3, 10), np.float64)), r"out\[0\] has dtype float64, expected float32"),
        (fake.device_array(np.zeros((3, 9), np.float32)), r"out\[0\] has shape \(3, 9\), expected \(3, 10\)"),
        (fake.device_array(np.zeros((10, 3), np.float32)).transposed(), r"out\[0\] has strides .* C-contiguous"),
        (np.zeros((3, 10), np.float32), r"out\[0\] is ndarray, expected a GPU tensor"),
        (gx, r"out\[0\] has shape \(3, 32\)"),
    ]
    for tensor, message in bad:
        with pytest.raises(GuardError, match=message):
            exe.run({"x": gx}, out=[tensor])
    alias = type(gx)(gx.ptr, (3, 10), np.dtype(np.float32))  # the input's own memory
    with pytest.raises(GuardError, match=r"out\[0\] overlaps input 'x'"):
        exe.run({"x": gx}, out=[alias])
    with pytest.raises(GuardError, match="out= has 2 tensors, the model has 1 outputs"):
        exe.run({"x": gx}, out=[out, out])
    misaligned = type(out)(out.ptr + 4, (3, 10), np.dtype(np.float32))
    with pytest.raises(GuardError, match="not 16-byte aligned"):
        exe.run({"x": gx}, out=[misaligned])
    (got,) = exe.run({"x": gx}, out=[out], sync=True)  # and the next good call succeeds
    np.testing.assert_allclose(fake.read(out.ptr, (3, 10), np.float32), want, rtol=2e-5, atol=2e-5)


def test_an_explicit_prepared_call_binds_only_its_shapes(mlp) -> None:
    fake, _counted, exe = mlp
    x, gx = _x(fake, 5)
    with exe.prepare({"x": (5, 32)}, outputs="device") as call:
        static = call.outputs
        for _ in range(3):
            (y,) = call.run({"x": gx})
            assert y is static[0]  # the static buffer, valid until this call's next run
            np.testing.assert_allclose(y.numpy(), Executable(_mlp(), "cpu")(x), rtol=2e-5, atol=2e-5)
        y2 = call(gx)  # by position too, as the model's output structure
        assert isinstance(y2, DeviceArray)
        with pytest.raises(GuardError, match=r"input 'x' has shape \(4, 32\); this call was prepared for \(5, 32\)"):
            call.run({"x": _x(fake, 4)[1]})
    with pytest.raises(GuardError, match="missing input"):
        exe.prepare({})
    with pytest.raises(GuardError, match=r"input 'x' dim 0 \(batch\)"):
        exe.prepare({"x": (0, 32)})


def test_numpy_inputs_on_the_cpu_backend_prepare_too() -> None:
    exe = Executable(_mlp(), "cpu")
    x = np.ones((2, 32), np.float32)
    call = exe.prepare({"x": (2, 32)})
    np.testing.assert_allclose(call.run({"x": x})[0], exe(x))
    with pytest.raises(Exception, match="for device='cuda'"):
        exe.run({"x": x}, sync=True)
