"""State that lives across calls (issue 29): Module.state, in-place writes, Session on every cpu-side backend.

Each model here is small enough to run on the reference, onnxruntime and the interpreted kernels; the numpy
oracle beside each keeps the state as a plain array and applies the writes in order.
"""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec, nn
from aotc.errors import AotcError, ExecError, GuardError, TraceError, VerifyError
from aotc.frontend.trace import trace
from aotc.ir.graph import Graph
from aotc.ir.state import state_chains

DEVICES = ["reference", "cpu", "interpret"]
SEQ = Dim("seq", min=1, max=6)
BATCH = Dim("batch", min=1, max=4)


class Cache(nn.Module):
    """A cache of 6 positions, written at ``pos``; reads before and after the write."""

    def __init__(self, read_before: bool = False) -> None:
        super().__init__()
        self.read_before = read_before
        self.k = self.state("k", (BATCH, 6, 3), "float32", init=np.full((1, 1, 3), 0.5, np.float32))
        self.steps = self.state("steps", (1,), "int64")

    def forward(self, x, pos):
        before = self.k.sum(dim=1) if self.read_before else None
        self.k.index_copy_(1, pos, x * 2.0)
        self.steps[0] = self.steps[0] + 1
        after = self.k.sum(dim=1)
        total = after if before is None else after - before
        return {"total": total, "steps": self.steps * 1}


def _specs() -> dict[str, TensorSpec]:
    return {"x": TensorSpec((BATCH, SEQ, 3), "float32"), "pos": TensorSpec((SEQ,), "int64")}


def _oracle(calls: list[tuple[np.ndarray, np.ndarray]], read_before: bool = False) -> list[np.ndarray]:
    k = np.full((calls[0][0].shape[0], 6, 3), 0.5, np.float32)
    out = []
    for step, (x, pos) in enumerate(calls, 1):
        before = k.sum(1)
        k[:, pos] = x * 2.0
        out.append((k.sum(1) - before if read_before else k.sum(1), step))
    return out


@pytest.fixture(scope="module")
def compiled() -> aotc.CompiledModel:
    return aotc.compile(Cache(), _specs())


def _calls(batch: int = 2) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((batch, 3, 3)).astype(np.float32)
    x1 = rng.standard_normal((batch, 1, 3)).astype(np.float32)
    x2 = rng.standard_normal((batch, 2, 3)).astype(np.float32)
    return [(x0, np.array([0, 1, 2])), (x1, np.array([3])), (x2, np.array([1, 5]))]


@pytest.mark.parametrize("device", DEVICES)
def test_a_session_keeps_its_state_across_calls(compiled: aotc.CompiledModel, device: str) -> None:
    exe = aotc.load(compiled.artifact_bytes, device=device)
    s = exe.session()
    for (x, pos), (want, step) in zip(_calls(), _oracle(_calls())):
        got = s(x=x, pos=pos)
        np.testing.assert_allclose(got["total"], want, rtol=1e-5, atol=1e-6)
        assert got["steps"].tolist() == [step]
    # onnxruntime keeps a spare for the step counter, whose old value is read beside its write
    assert s.calls == 3 and s.state_bytes == 2 * 6 * 3 * 4 + 8 * (2 if device == "cpu" else 1)
    assert s.state("steps").tolist() == [3]
    s.reset()  # the dynamic batch's states are freed, so another batch may follow
    assert s.state_bytes == 0
    (x, pos), (want, _) = _calls(batch=3)[0], _oracle(_calls(batch=3))[0]
    np.testing.assert_allclose(s(x=x, pos=pos)["total"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_a_bad_position_is_refused_with_nothing_written(compiled: aotc.CompiledModel, device: str) -> None:
    s = aotc.load(compiled.artifact_bytes, device=device).session()
    x, pos = _calls()[0]
    s(x=x, pos=pos)
    k = s.state("k")
    for bad in (6, -1):
        with pytest.raises(
            ExecError, match=rf"scatter at .*test_sessions.py:\d+: index {bad} in input 'pos' .*\[0, 6\)"
        ):
            s(x=x[:, :1], pos=np.array([bad]))
    np.testing.assert_array_equal(s.state("k"), k)
    assert s.state("steps").tolist() == [1]
    s(x=x[:, :1], pos=np.array([5]))  # still usable
    assert s.state("steps").tolist() == [2]


def test_plain_calls_are_refused_naming_the_session(compiled: aotc.CompiledModel) -> None:
    exe = aotc.load(compiled.artifact_bytes, device="reference")
    x, pos = _calls()[0]
    with pytest.raises(AotcError, match=r"keeps state across calls .*exe\.session\(\)"):
        exe(x=x, pos=pos)
    with pytest.raises(AotcError, match=r"exe\.session\(\)"):
        exe.run({"x": x, "pos": pos})
    s = exe.session()
    s(x=x, pos=pos)
    with pytest.raises(GuardError, match=r"batch=3.*allocated for batch=2 .*reset\(\)"):
        s(x=np.zeros((3, 1, 3), np.float32), pos=np.array([0]))
    s.close()
    with pytest.raises(AotcError, match="closed"):
        s(x=x, pos=pos)


def test_onnxruntime_writes_in_place_unless_an_old_value_is_read(compiled: aotc.CompiledModel) -> None:
    """Bound to one buffer, onnxruntime's ScatterND writes the state where it is; a value read beside its write
    makes the new state go to a spare buffer (a copy per call), with the same results."""
    (program,) = [p for _, p in aotc.load(compiled.artifact_bytes, device="cpu")._variants]
    assert program.in_place_states == (True, False)  # the step counter's old value is read
    other = aotc.compile(Cache(read_before=True), _specs())
    exe = aotc.load(other.artifact_bytes, device="cpu")
    assert exe._variants[0][1].in_place_states == (False, False)
    s = exe.session()
    for (x, pos), (want, _) in zip(_calls(), _oracle(_calls(), read_before=True)):
        np.testing.assert_allclose(s(x=x, pos=pos)["total"], want, rtol=1e-5, atol=1e-6)
    assert s.state_bytes == 2 * (2 * 6 * 3 * 4 + 8)  # the spare set included


def test_concurrent_sessions_match_serial_runs(compiled: aotc.CompiledModel) -> None:
    exe = aotc.load(compiled.artifact_bytes, device="cpu")
    rng = np.random.default_rng(1)
    plans = [
        [(rng.standard_normal((1, 1, 3)).astype(np.float32), np.array([i % 6])) for i in range(12)] for _ in range(8)
    ]

    def run(calls: list) -> list[np.ndarray]:
        s = exe.session()
        return [s(x=x, pos=p)["total"] for x, p in calls]

    serial = [run(c) for c in plans]
    results: list = [None] * 8
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, run(plans[i]))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, serial):
        np.testing.assert_array_equal(np.stack(got), np.stack(want))


def test_memory_stays_flat_over_a_thousand_calls(compiled: aotc.CompiledModel) -> None:
    s = aotc.load(compiled.artifact_bytes, device="cpu").session()
    x = np.ones((1, 1, 3), np.float32)
    for i in range(50):
        s(x=x, pos=np.array([i % 6]))
    tracemalloc.start()
    try:
        base = tracemalloc.take_snapshot()
        for i in range(1000):
            s(x=x, pos=np.array([i % 6]))
        grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(base, "filename"))
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes more after 1000 calls"
    assert s.state("steps").tolist() == [1050]


def test_inspect_shows_the_states_and_their_bytes_per_session(compiled: aotc.CompiledModel) -> None:
    from aotc.artifact import describe, read_artifact

    d = describe(read_artifact(compiled.artifact_bytes))
    assert [(st["name"], st["shape"], st["bytes"]) for st in d["states"]] == [
        ("k", ["batch", "6", "3"], 4 * 6 * 3 * 4),
        ("steps", ["1"], 8),
    ]
    assert d["state_bytes_per_session"] == 4 * 6 * 3 * 4 + 8
    assert [i["name"] for i in d["inputs"]] == ["x", "pos"]


# -- tracing ---------------------------------------------------------------------------------------


class Stale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.k = self.state("k", (6, 3))

    def forward(self, x, pos):
        view = self.k[:2]
        self.k.index_copy_(0, pos, x)
        return view * 2


class SliceWrite(nn.Module):
    def __init__(self, start: int = 0) -> None:
        super().__init__()
        self.start = start
        self.k = self.state("k", (6, 3))

    def forward(self, x):
        n = x.shape[0]
        self.k[self.start : self.start + n] = x
        return self.k + 0


def test_tracing_refuses_a_read_through_a_view_taken_before_the_write() -> None:
    with pytest.raises(
        TraceError,
        match=r"test_sessions.py:\d+: this reads state 'k' through a tensor taken before the write at .*test_sessions.py:\d+",
    ):
        trace(Stale(), {"x": TensorSpec((SEQ, 3), "float32"), "pos": TensorSpec((SEQ,), "int64")})


def test_slice_writes_are_proved_inside_the_state_or_guarded() -> None:
    c = aotc.compile(SliceWrite(start=2), {"x": TensorSpec((Dim("n", min=1, max=6, hint=3), 3), "float32")})
    (guard,) = c.lowered.guards  # 2 + n <= 6, at the write's line
    assert "n" in str(guard) and "test_sessions.py" in guard.loc
    s = c.session()
    s(x=np.ones((4, 3), np.float32))
    np.testing.assert_array_equal(s.state("k")[:, 0], [0, 0, 1, 1, 1, 1])
    with pytest.raises(GuardError, match=r"\(n\) = 5 breaks guard .*test_sessions.py:\d+"):
        s(x=np.ones((5, 3), np.float32))
    with pytest.raises(TraceError, match=r"test_sessions.py:\d+: .*n \+ 5 > 6 at the trace hints"):
        trace(SliceWrite(start=5), {"x": TensorSpec((Dim("n", min=1, max=6, hint=3), 3), "float32")})
    with pytest.raises(TraceError, match=r"test_sessions.py:\d+: .*index 9 is out of bounds for dim 0 with size 6"):

        class IntWrite(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.k = self.state("k", (6, 3))

            def forward(self, x):
                self.k[9] = x
                return self.k * 1

        trace(IntWrite(), {"x": TensorSpec((3,), "float32")})


def test_a_dynamic_state_dim_must_come_from_an_input() -> None:
    class Orphan(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.k = self.state("k", (Dim("other", min=1, max=4), 3))

        def forward(self, x):
            return x + 1

    with pytest.raises(TraceError, match=r"state 'k' has the dynamic dim .*other.*no input declares"):
        trace(Orphan(), {"x": TensorSpec((3,), "float32")})


def test_the_verifier_holds_states_to_the_in_place_rules() -> None:
    g = trace(Cache(), _specs())
    (k, steps) = state_chains(g)
    assert len(k.writers) == 1 and len(steps.writers) == 1
    late = g.nodes[k.writers[0]]  # a node after the write that reads the value it overwrote
    from aotc.ir.ops import Op
    from aotc.ir.types import Node, Value
    from aotc.ir.verify import verify

    stale = Node(Op.NEG, (late.inputs[0],), (Value(g.max_value_id() + 1, late.inputs[0].type),))
    with pytest.raises(VerifyError, match="reads the state as it was before the write"):
        verify(g.replace(nodes=(*g.nodes, stale)))
    returned = g.replace(outputs=(g.outputs[0], g.outputs[2], *g.outputs[2:]), output_tree={"tuple": [0, 1]})
    with pytest.raises(VerifyError, match="also an output of the call"):
        verify(returned)
    with pytest.raises(VerifyError, match="initial value, constant 'gone', is missing"):
        verify(g.replace(states=(g.states[0].__class__("k", "gone"), g.states[1])))
    assert isinstance(g, Graph) and not g.replace(states=()).states
