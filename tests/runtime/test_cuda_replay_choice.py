"""When a CUDA graph is worth replaying: replay copies GPU inputs into the graph's buffers and device outputs
out of them, which an eager call does not, so a call whose copies cost more than its launches would runs
eagerly (and is never captured); host inputs and outputs cost the same either way and keep replaying."""

from __future__ import annotations

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries

from aotc.ir.evaluate import GraphRunner
from aotc.ir.variant import Variant
from aotc.runtime.backends.cuda import CudaBackend, program
from aotc.runtime.guards import Binder
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")


def _stats(monkeypatch: pytest.MonkeyPatch, launch_seconds: float, outputs: str) -> dict[str, int]:
    monkeypatch.setattr(program, "LAUNCH_SECONDS", launch_seconds)
    fake = FakeDriver()
    binaries = fake_binaries(SCHEDULE)
    fake.register(SCHEDULE, binaries)
    with CudaBackend(driver=fake) as backend:
        prog = backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
        feeds = _feeds(37, [1, 2, 3])
        env = Binder(GRAPH).bind(feeds)
        for _ in range(4):
            got = prog.run(feeds, env, outputs=outputs)
            for a, b in zip(got, GraphRunner(GRAPH).run(feeds, env)):
                np.testing.assert_allclose(a if outputs == "numpy" else a.numpy(), b, rtol=1e-6)
        return dict(prog.stats)


def test_device_outputs_whose_copy_costs_more_than_the_launches_run_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _stats(monkeypatch, 1e-15, "device") == {"eager": 4, "replay": 0, "captures": 0}


def test_cheap_copies_or_host_outputs_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _stats(monkeypatch, 1.0, "device") == {"eager": 1, "replay": 3, "captures": 1}
    assert _stats(monkeypatch, 1e-15, "numpy") == {"eager": 1, "replay": 3, "captures": 1}
