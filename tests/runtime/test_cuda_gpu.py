"""Issue 9's GPU checks, written once and run on two drivers: the fake one (here, small counts) and the real GPU
(when cuda-bindings and a GPU are present; skipped otherwise). Artifacts come from aotc.compile with real
ahead-of-time kernels: every example model == the cpu backend at two values of each dynamic dim; graph replay
== eager launches bit for bit; many calls leak no device memory (driver-reported free memory); 8 threads x
many mixed-shape calls on one Executable (200 each on the GPU); a bad token id raises and the next call is right;
and on the real GPU, torch tensors in and out without copies (pointer equality), and a prepared call on a torch
stream with out= tensors, node-updating replays and an unsynchronized bad id raised at synchronize() (issue 26)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest
from fake_cuda import FakeDriver

import aotc
from aotc.artifact.reader import Artifact, read_artifact
from aotc.errors import ExecError
from aotc.lowering.options import CompileOptions
from aotc.runtime import Executable
from aotc.runtime.backends.cuda import CudaBackend, probe
from aotc_cli.loader import import_file
from tests.kernel_layer.model_kit import CONFIGS, DIMS, MODELS, feeds

pytest.importorskip("triton")

REAL = probe()
TOL = {"rtol": 2e-4, "atol": 2e-4}
DIMS_MIX = [(1, 1), (2, 9), (1, 5)]  # (batch, seq) for gpt2


def _arch() -> str:
    if REAL is None:
        return "sm_90"
    return "sm_90" if REAL.capability == (9, 0) else REAL.arch


@cache
def _artifact(name: str) -> Artifact:
    model, inputs = import_file(MODELS / f"{name}.py").build(**CONFIGS[name])
    options = CompileOptions(targets=tuple(sorted({"sm_80", _arch()})))
    return read_artifact(aotc.compile(model, inputs, name=name, options=options).artifact_bytes)


class Target:
    """A driver to run on: the fake (kernels under the interpreter) or the real GPU."""

    def __init__(self, real: bool) -> None:
        self.real = real
        self.fake = None if real else FakeDriver()

    def backend(self, art: Artifact, **kwargs: Any) -> CudaBackend:
        if self.fake is not None:
            for v in art.variants:
                if v.plan is not None:
                    self.fake.register(v.plan, art.kernels)
        return CudaBackend(driver=self.fake, **kwargs)

    def calls(self, real: int, fake: int) -> int:
        return real if self.real else fake


@pytest.fixture(params=["fake", "gpu"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "gpu" and REAL is None:
        pytest.skip("no GPU with cuda-bindings here")
    yield Target(request.param == "gpu")


@pytest.mark.parametrize("name", sorted(DIMS))
def test_every_example_model_matches_the_cpu_backend(target: Target, name: str) -> None:
    art = _artifact(name)
    cpu = Executable(art, "cpu")
    with Executable(art, target.backend(art)) as exe:
        for i, dims in enumerate(DIMS[name]):
            named = dict(zip(exe.input_names, feeds(name, art.variants[0].graph, dims, seed=i)))
            eager = exe.run(named)
            for a, b in zip(eager, cpu.run(named)):
                assert a.shape == b.shape and a.dtype == b.dtype
                np.testing.assert_allclose(a, b, **TOL)
            replayed = exe.run(named, outputs="device")  # from the CUDA graph, kept on the device
            assert [d.numpy().tobytes() for d in replayed] == [a.tobytes() for a in eager]


def test_graph_replay_equals_eager_launches_bit_for_bit(target: Target) -> None:
    art = _artifact("gpt2")
    xs = dict(zip(("input_ids",), feeds("gpt2", art.variants[0].graph, DIMS["gpt2"][1])))
    with Executable(art, target.backend(art, graph_cache=0)) as eager, Executable(art, target.backend(art)) as graphs:
        want = [a.tobytes() for a in eager.run(xs)]
        for _ in range(3):
            assert [a.tobytes() for a in graphs.run(xs)] == want


def test_many_calls_leak_no_device_memory(target: Target) -> None:
    art = _artifact("mlp")
    backend = target.backend(art, graph_cache=2)
    with Executable(art, backend) as exe:
        cases = [feeds("mlp", art.variants[0].graph, {"batch": b}, seed=b) for b in (1, 3, 7)]
        for i in range(6):
            exe.run({"x": cases[i % 3][0]}, outputs="device" if i % 2 else "numpy")
        free = backend.device.memory_info()[0]
        for i in range(target.calls(1_000, 60)):
            exe.run({"x": cases[i % 3][0]}, outputs="device" if i % 2 else "numpy")
        assert backend.device.memory_info()[0] == free


def test_eight_threads_share_one_executable(target: Target) -> None:
    art = _artifact("gpt2")
    cpu = Executable(art, "cpu")
    cases = [
        {"input_ids": feeds("gpt2", art.variants[0].graph, {"batch": b, "seq": s}, seed=s)[0]} for b, s in DIMS_MIX
    ]
    wants = [cpu.run(c) for c in cases]
    errors: list[BaseException] = []
    with Executable(art, target.backend(art, graph_cache=2)) as exe:

        def work(t: int) -> None:
            try:
                for i in range(target.calls(200, 1)):
                    k = (t + i) % len(cases)
                    for a, b in zip(exe.run(cases[k]), wants[k]):
                        np.testing.assert_allclose(a, b, **TOL)
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_a_bad_token_id_raises_and_the_next_call_is_right(target: Target) -> None:
    art = _artifact("gpt2")
    cpu = Executable(art, "cpu")
    good = feeds("gpt2", art.variants[0].graph, {"batch": 2, "seq": 5})[0]
    bad = good.copy()
    bad[1, 3] = 10**6
    with Executable(art, target.backend(art)) as exe:
        for _ in range(3):  # eager, capture, replay
            with pytest.raises(ExecError, match="outside the valid range"):
                exe(bad)
            np.testing.assert_allclose(exe(good), cpu(good), **TOL)


def test_torch_tensors_in_and_out_without_copies() -> None:
    if REAL is None:
        pytest.skip("no GPU with cuda-bindings here")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    art = _artifact("mlp")
    x = torch.randn(4, *art.variants[0].graph.inputs[0].type.shape[1:], device="cuda")
    with Executable(art, CudaBackend(), outputs="device") as exe:
        (out,) = exe.run({"x": x})
        y = torch.from_dlpack(out)
        assert y.data_ptr() == out.ptr and y.is_cuda
        np.testing.assert_allclose(y.cpu().numpy(), Executable(art, "cpu")(x.cpu().numpy()), **TOL)


def test_a_prepared_call_on_a_torch_stream_writes_out_tensors_and_raises_by_the_contract() -> None:
    """Issue 26 on the GPU: a prepared call on a torch stream (no synchronize of its own), torch tensors read in
    place, out= tensors written in place, a device output read through DLPack on another stream, replays that
    update the graph's nodes, and a bad id raised at synchronize() with the next call right."""
    if REAL is None:
        pytest.skip("no GPU with cuda-bindings here")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    art = _artifact("mlp")
    cpu = Executable(art, "cpu")
    d_in = art.variants[0].graph.inputs[0].type.shape[1]
    with Executable(art, CudaBackend(), outputs="device") as exe:
        call = exe.prepare({"x": (4, d_in)})
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(4):  # eager, captured, replayed with a new tensor each time (node updates)
                x = torch.randn(4, d_in, device="cuda")
                (y,) = call.run({"x": x})
                got = torch.from_dlpack(y).clone()  # ordered on the current (this) stream
                np.testing.assert_allclose(got.cpu().numpy(), cpu(x.cpu().numpy()), **TOL)
            out = torch.empty_like(got)
            assert exe.run({"x": x}, out=[out])[0] is out
            stream.synchronize()
            np.testing.assert_allclose(out.cpu().numpy(), cpu(x.cpu().numpy()), **TOL)
        assert exe._variants[0][1].stats["replay"] >= 2
    gpt2 = _artifact("gpt2")
    good = feeds("gpt2", gpt2.variants[0].graph, {"batch": 2, "seq": 5})[0]
    bad = good.copy()
    bad[0, 1] = 10**6
    with Executable(gpt2, CudaBackend(), outputs="device") as exe:
        exe.run({"input_ids": torch.from_numpy(bad).cuda()})
        with pytest.raises(ExecError, match="outside the valid range"):
            exe.synchronize()
        got = exe.run({"input_ids": torch.from_numpy(good).cuda()}, sync=True)
        for a, b in zip(got, Executable(gpt2, "cpu").run({"input_ids": good})):
            np.testing.assert_allclose(a.numpy(), b, **TOL)
