"""When a CUDA graph is worth replaying (prepared.py's rule): eager costs a launch per launch; a replay costs one
graph launch, one node update per graph node whose pointers moved, and for each copy it needs (a pointer the graph
cannot take in place) a fixed cost plus its bytes. A one-launch plan never replays; host inputs and outputs cost
the same either way and replay; GPU inputs read in place replay while their node updates cost less than the
launches they save, and are copied (and weighed as copies) where the driver gives no nodes to update."""

from __future__ import annotations

import numpy as np
import pytest
from fake_cuda import FakeDriver, fake_binaries

from aotc.ir.evaluate import GraphRunner
from aotc.ir.variant import Variant
from aotc.runtime.backends.cuda import CudaBackend, prepared
from aotc.runtime.guards import Binder
from tests.runtime.test_interpret_backend import GRAPH, SCHEDULE, _feeds

pytest.importorskip("triton")


def _stats(monkeypatch: pytest.MonkeyPatch, gpu_inputs: bool, launch: float = 4e-6, copy: float = 4e-6,
           nodes: bool = True) -> dict[str, int]:  # fmt: skip
    monkeypatch.setattr(prepared, "LAUNCH_SECONDS", launch)
    monkeypatch.setattr(prepared, "COPY_SECONDS", copy)
    fake = FakeDriver()
    if not nodes:  # bindings without the call: nodes cannot be found, so replays copy what moved
        fake.cuStreamGetCaptureInfo = None
    binaries = fake_binaries(SCHEDULE)
    fake.register(SCHEDULE, binaries)
    with CudaBackend(driver=fake) as backend:
        prog = backend.prepare(Variant(GRAPH, SCHEDULE), binaries)
        for i in range(4):
            feeds = _feeds(37, [1, 2, 3], seed=i)
            env = Binder(GRAPH).bind(feeds)
            given = [fake.device_array(f) for f in feeds] if gpu_inputs else feeds  # a new address each call
            got = prog.run(given, env, outputs="device", sync=True)
            for a, b in zip(got, GraphRunner(GRAPH).run(feeds, env)):
                np.testing.assert_allclose(a.numpy(), b, rtol=1e-6)
        return dict(prog.stats)


def test_host_inputs_replay_from_the_second_call(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _stats(monkeypatch, gpu_inputs=False) == {"eager": 1, "replay": 3, "captures": 1}


def test_gpu_inputs_replay_while_their_node_updates_cost_less_than_the_launches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 3 launches; x is read by one node and ids by another: a replay is 1 + 2 updates = 3 calls, no gain
    assert _stats(monkeypatch, gpu_inputs=True) == {"eager": 4, "replay": 0, "captures": 0}
    # were a launch dearer than a graph launch and its updates (the rule's own constants moved), it replays
    monkeypatch.setattr(prepared.Prepared, "_cost", lambda self, updates, copies: (3.0, 1.0 + 0 * updates))
    assert _stats(monkeypatch, gpu_inputs=True) == {"eager": 1, "replay": 3, "captures": 1}


def test_without_nodes_to_update_copies_are_weighed_with_a_fixed_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    # two input copies at a fixed 4 us each outweigh the two launches a replay saves: eager
    assert _stats(monkeypatch, gpu_inputs=True, nodes=False) == {"eager": 4, "replay": 0, "captures": 0}
    # free copies: replay, copying each input into the graph's staging
    assert _stats(monkeypatch, gpu_inputs=True, copy=0.0, nodes=False) == {"eager": 1, "replay": 3, "captures": 1}


def test_a_one_launch_plan_never_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    import aotc
    from aotc import Dim, TensorSpec, nn
    from aotc.artifact.reader import read_artifact
    from aotc.lowering.options import CompileOptions

    x = TensorSpec((Dim("batch", min=1, max=8), 16), "float32")
    compiled = aotc.compile(nn.Linear(16, 16), {"x": x}, name="linear", options=CompileOptions(targets=()))
    variant = read_artifact(compiled.artifact_bytes).variants[0]
    assert len(variant.plan.kernels) == 1
    fake = FakeDriver()
    binaries = fake_binaries(variant.plan)
    fake.register(variant.plan, binaries)
    monkeypatch.setattr(prepared, "LAUNCH_SECONDS", 1.0)  # even were a launch very dear
    with CudaBackend(driver=fake) as backend:
        prog = backend.prepare(variant, binaries)
        feeds = [np.ones((3, 16), np.float32)]
        env = Binder(variant.graph).bind(feeds)
        for _ in range(3):
            prog.run(feeds, env, outputs="device", sync=True)
        assert prog.stats == {"eager": 3, "replay": 0, "captures": 0}
