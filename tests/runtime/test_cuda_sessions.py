"""Sessions on the cuda backend (issue 29), over the fake driver: the states live in device memory the session
owns, each call's state writes land in it in place (no copy of a cache per token: the bytes a step moves do not
depend on the cache's length), and a session decodes the example GPT-2 as the cpu backend does."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries
from test_sessions import Cache, _calls, _oracle, _specs

import aotc
from aotc import Dim, TensorSpec, nn
from aotc.artifact.reader import read_artifact
from aotc.errors import AotcError, ExecError
from aotc.runtime import Executable
from aotc.runtime.backends.cuda import CudaBackend

pytest.importorskip("triton")

MODELS = Path(__file__).resolve().parents[2] / "models"


class CountingDriver(FakeDriver):
    """The fake driver, counting the bytes every copy it runs moves (eager or replayed in a graph)."""

    def __init__(self) -> None:
        super().__init__()
        self.copied = 0

    def _execute(self, op: tuple[Any, ...]) -> Any:
        if op[0] == "memcpy":
            self.copied += op[3]
        return super()._execute(op)


def _exe(compiled: aotc.CompiledModel, fake: FakeDriver | None = None) -> tuple[FakeDriver, Executable]:
    fake = fake or FakeDriver()
    art = read_artifact(compiled.artifact_bytes)
    for v in art.variants:
        fake.register(v.plan, fake_binaries(v.plan))
    binaries = {k: b for v in art.variants for k, b in fake_binaries(v.plan).items()}

    class Wired(CudaBackend):
        def prepare(self, variant: Any, _binaries: Any) -> Any:
            return super().prepare(variant, binaries)

    return fake, Executable(art, Wired(driver=fake))


@pytest.fixture(scope="module")
def compiled() -> aotc.CompiledModel:
    return aotc.compile(Cache(), _specs(), options=aotc.CompileOptions(targets=()))


def test_a_session_keeps_its_state_on_the_device(compiled: aotc.CompiledModel) -> None:
    fake, exe = _exe(compiled)
    with exe:
        s = exe.session()
        assert s.state_bytes == 0
        for (x, pos), (want, step) in zip(_calls(), _oracle(_calls())):
            got = s(x=x, pos=pos)
            np.testing.assert_allclose(got["total"], want, rtol=1e-5, atol=1e-6)
            assert got["steps"].tolist() == [step]
        assert s.state_bytes == 2 * 6 * 3 * 4 + 8
        assert s.state("steps").tolist() == [3]
        k = s.state("k")
        assert k.shape == (2, 6, 3) and k[:, 4].tolist() == [[0.5] * 3] * 2  # untouched rows keep the init
        s.reset()
        (x, pos), (want, _) = _calls(batch=3)[0], _oracle(_calls(batch=3))[0]
        np.testing.assert_allclose(s(x=x, pos=pos)["total"], want, rtol=1e-5, atol=1e-6)
        live = fake.live()["allocations"]
        s.close()
        assert fake.live()["allocations"] < live  # the states and the session's preparations are freed
        with pytest.raises(AotcError, match="closed"):
            s(x=x, pos=pos)
    assert fake.live()["allocations"] == 0


def test_a_bad_position_is_refused_and_the_session_stays_usable(compiled: aotc.CompiledModel) -> None:
    _, exe = _exe(compiled)
    with exe:
        s = exe.session()
        x, pos = _calls()[0]
        s(x=x, pos=pos)
        k = s.state("k")
        for bad in (6, -1):
            with pytest.raises(ExecError, match=rf"index {bad} in input 'pos' .*\[0, 6\)"):
                s(x=x[:, :1], pos=np.array([bad]))
        np.testing.assert_array_equal(s.state("k"), k)
        s(x=x[:, :1], pos=np.array([5]))
        assert s.state("steps").tolist() == [2]


def test_reset_then_the_same_calls_give_the_same_results(compiled: aotc.CompiledModel) -> None:
    _, exe = _exe(compiled)
    with exe:
        s = exe.session()
        first = [s(x=x, pos=p)["total"] for x, p in _calls()]
        s.reset()
        again = [s(x=x, pos=p)["total"] for x, p in _calls()]
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)


def _cache_of(length: int) -> aotc.CompiledModel:
    batch = Dim("batch", min=1, max=2)

    class Long(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.k = self.state("k", (batch, length, 4), "float32")

        def forward(self, x, pos):
            self.k.index_copy_(1, pos, x)
            return self.k.sum(dim=1)

    specs = {"x": TensorSpec((batch, 1, 4), "float32"), "pos": TensorSpec((1,), "int64")}
    return aotc.compile(Long(), specs, options=aotc.CompileOptions(targets=()))


def test_the_bytes_a_step_moves_do_not_depend_on_the_cache_length() -> None:
    moved = {}
    for length in (8, 64):
        fake, exe = _exe(_cache_of(length), CountingDriver())
        with exe:
            s = exe.session()
            x = np.ones((1, 1, 4), np.float32)
            s(x=x, pos=np.array([0]))  # the first call allocates and fills the cache
            per_step = []
            for i in range(1, 5):
                before = fake.copied
                got = s(x=x * i, pos=np.array([i]))
                per_step.append(fake.copied - before)
                np.testing.assert_allclose(got, [[1.0 + sum(range(i + 1))] * 4])
            moved[length] = per_step
    assert moved[8] == moved[64], moved
    # the inputs up (16 + 8 bytes), the output down (16) and the error flags: far less than one cache (128 bytes)
    assert max(moved[8]) < 8 * 4 * 4, moved


def test_sessions_run_concurrently_each_with_its_own_state(compiled: aotc.CompiledModel) -> None:
    _, exe = _exe(compiled)
    rng = np.random.default_rng(1)
    plans = [
        [(rng.standard_normal((1, 1, 3)).astype(np.float32), np.array([i % 6])) for i in range(5)] for _ in range(4)
    ]

    def run(calls: list, s: Any = None) -> list[np.ndarray]:
        s = s or exe.session()
        return [s(x=x, pos=p)["total"] for x, p in calls]

    with exe:
        serial = [run(c) for c in plans]
        a, b = exe.session(), exe.session()  # two sessions interleaved
        got_a, got_b = [], []
        for (xa, pa), (xb, pb) in zip(plans[0], plans[1]):
            got_a.append(a(x=xa, pos=pa)["total"])
            got_b.append(b(x=xb, pos=pb)["total"])
        np.testing.assert_array_equal(np.stack(got_a), np.stack(serial[0]))
        np.testing.assert_array_equal(np.stack(got_b), np.stack(serial[1]))
        results: list = [None] * 4
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, run(plans[i]))) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for got, want in zip(results, serial):
            np.testing.assert_array_equal(np.stack(got), np.stack(want))


@pytest.mark.parametrize("new", [4, pytest.param(64, marks=pytest.mark.slow)])
def test_gpt2_decode_on_cuda_equals_the_cpu_backend_token_for_token(new: int) -> None:
    from aotc_cli.loader import import_file

    m = import_file(MODELS / "gpt2_decode.py")
    model = m.GPT2Decoder(64, 16 if new <= 13 else 72, 16, 1, 2, max_batch=2)
    rng = np.random.default_rng(0)
    model.load_state_dict({k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32)
                           for k, v in model.state_dict().items()})  # fmt: skip
    compiled = aotc.compile(model, m.inputs_of(model), options=aotc.CompileOptions(targets=()))
    prompt = rng.integers(1, 64, (2, 3))
    want_logits: list[np.ndarray] = []
    want = aotc.generate(aotc.load(compiled.artifact_bytes, device="cpu"), prompt, new,
                         on_step=lambda _, x: want_logits.append(x))  # fmt: skip
    _, exe = _exe(compiled)
    with exe:
        logits: list[np.ndarray] = []
        s = exe.session()
        got = aotc.generate(s, prompt, new, on_step=lambda _, x: logits.append(x))
        np.testing.assert_array_equal(got, want)
        for step, (a, b) in enumerate(zip(logits, want_logits)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
        stats = [p.stats for _, p in exe._variants]
        assert sum(st["replay"] for st in stats) >= 1, stats  # the one-token steps replay their CUDA graph
        s.close()
