"""The recurrent-cell template (aotc/kernels/recurrent.py, recurrent_loop.py): an LSTM's time loop as one launch
per direction (a loop over its steps) or, where the steps differ, a few unrolled launches, computing what the cpu
backend computes under the Triton interpreter at two batch sizes, in plans the artifact's reader verifies; and
the cells it leaves to the general rules."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec, nn
from aotc.artifact import read_artifact, write_artifact
from aotc.frontend.trace import trace
from aotc.ir.graph import Graph
from aotc.ir.schedule import Schedule
from aotc.ir.templates import KernelKind
from aotc.ir.variant import Variant
from aotc.kernels import fusion
from aotc.kernels.recurrent import MAX_H, MAX_STEPS
from aotc.kernels.scheduler import schedule_graph
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from aotc_cli.loader import import_file
from tests.kernel_layer.kernel_kit import check
from tests.kernel_layer.model_kit import feeds

MODELS = Path(__file__).resolve().parents[2] / "models"
TOL = (2e-4, 2e-4)  # float32: tl.dot and numpy's matmul sum in other orders, through ten steps
BATCHES = ({"batch": 1}, {"batch": 5})


@cache
def ensemble(**config: int) -> Graph:
    model, inputs = import_file(MODELS / "lstm_ensemble.py").build(**config)
    return lower(trace(model, inputs, "lstm_ensemble"), CompileOptions())


class TorchStyle(nn.Module):
    """aotc.nn.LSTM as a torch user writes it: two bidirectional layers, batch first, a head on the last step."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, 3)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out[:, -1]), h, c


@cache
def torch_style(hidden: int, steps: int) -> Graph:
    model = TorchStyle(hidden)
    rng = np.random.default_rng(7)
    model.load_state_dict(
        {k: rng.uniform(-0.4, 0.4, v.shape).astype(np.float32) for k, v in model.state_dict().items()}
    )
    spec = {"x": TensorSpec((Dim("batch", min=1, max=64), steps, 6), "float32")}
    return lower(trace(model, spec, "torch_style"), CompileOptions())


def _without_groups(graph: Graph, monkeypatch: pytest.MonkeyPatch) -> Schedule:
    with monkeypatch.context() as m:
        m.setattr(fusion, "node_groups", lambda g, declined: [])
        return schedule_graph(graph)


def test_the_lstm_ensembles_launches_fall_at_least_threefold(monkeypatch: pytest.MonkeyPatch) -> None:
    g = ensemble()  # 3 members x 2 bidirectional layers x 10 steps
    before, after = _without_groups(g, monkeypatch), schedule_graph(g)
    assert len(before.kernels) == 352  # a matmul for each product, a pointwise kernel for each step's state
    assert 3 * len(after.kernels) <= len(before.kernels), [k.name for k in after.kernels]
    cells = [k for k in after.kernels if k.kind is KernelKind.RECURRENT_CELL]
    # each of the 12 directions: its 10 steps as one loop, its states stacked; then one kernel sums the members
    assert len(cells) == 12 and len(after.kernels) == len(cells) + 1
    assert all("for step in range(0, 10):" in k.source for k in cells)
    # one code per layer and direction, whatever the number of members
    assert len({k.name for k in cells}) == 4
    assert not any(k.kind is KernelKind.MATMUL for k in after.kernels)


def _loop_body(k) -> str:
    return k.source[k.source.index("for step in range(") :].split("\n", 1)[1]


def test_a_loops_code_does_not_grow_with_the_steps() -> None:
    """The chain's steps are one loop body (what Triton compiles once): ten steps or three, the same code but for
    the strides of the time axis."""
    sources = {}
    for steps in (3, 10):
        g = ensemble(members=1, num_layers=1, steps=steps)
        cells = [k for k in schedule_graph(g).kernels if k.kind is KernelKind.RECURRENT_CELL]
        assert len(cells) == 2 and all(f"for step in range(0, {steps}):" in k.source for k in cells)
        sources[steps] = [re.sub(r"\d+", "N", _loop_body(k)) for k in cells]
        # each step's two products per gate, once
        assert [k.source.count("tl.dot(") for k in cells] == [8, 8]
    assert sources[3] == sources[10]


def test_steps_that_differ_are_cut_every_max_steps() -> None:
    """Layers stepped together (the upper cell reads each new state of the lower) cannot be a loop each: every
    state is read elsewhere. Their chains stay unrolled, in launches of at most MAX_STEPS."""
    spec = {"x": TensorSpec((Dim("batch", min=1, max=8), MAX_STEPS + 2, 5), "float32")}
    g = lower(trace(Stacked(), spec, "stacked"), CompileOptions())
    cells = [k for k in schedule_graph(g).kernels if k.kind is KernelKind.RECURRENT_CELL]
    assert not any("for step in range(" in k.source for k in cells)
    per_launch = sorted(sum(g.nodes[i].op.value == "matmul" for i in k.nodes) for k in cells)
    # two layers; each step has two products (x_t @ W_ih, h @ W_hh)
    assert per_launch == [4, 4, 2 * MAX_STEPS, 2 * MAX_STEPS]


def test_the_nn_lstm_input_projection_stays_one_matmul() -> None:
    """aotc.nn.LSTM projects every step's input at once: that matmul enters each loop, read at the step's row."""
    s = schedule_graph(torch_style(10, 5))
    kinds = [k.kind for k in s.kernels]
    assert kinds.count(KernelKind.MATMUL) == 4 + 1  # per layer and direction, and the head
    assert kinds.count(KernelKind.RECURRENT_CELL) == 4


class GivenState(nn.Module):
    """nn.LSTM from a given (h0, c0): each loop's carried state starts from memory, not zeros."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(5, 8, num_layers=1, batch_first=True, bidirectional=True)

    def forward(self, x, h0, c0):
        out, (h, c) = self.lstm(x, (h0, c0))
        return out, h, c


def test_a_loop_starts_from_a_given_state() -> None:
    batch = Dim("batch", min=1, max=16)
    spec = {
        "x": TensorSpec((batch, 4, 5), "float32"),
        "h0": TensorSpec((2, batch, 8), "float32"),
        "c0": TensorSpec((2, batch, 8), "float32"),
    }
    model = GivenState()
    rng = np.random.default_rng(3)
    model.load_state_dict(
        {k: rng.uniform(-0.5, 0.5, v.shape).astype(np.float32) for k, v in model.state_dict().items()}
    )
    g = lower(trace(model, spec, "given_state"), CompileOptions())
    s = schedule_graph(g)
    cells = [k for k in s.kernels if k.kind is KernelKind.RECURRENT_CELL]
    assert len(cells) == 2 and all("for step in range(0, 4):" in k.source for k in cells)
    assert all("h0_ptr" in k.source and "c0_ptr" in k.source for k in cells)
    for i, dims in enumerate(BATCHES):
        check(g, feeds("given_state", g, dims, seed=i), dims, tol=TOL, schedule=s)
    read_artifact(write_artifact([Variant(g, s)]))


def test_a_state_wider_than_a_program_holds_is_left_to_matmuls() -> None:
    g = ensemble(members=1, num_layers=1, steps=2, hidden_size=MAX_H + 8)
    kinds = {k.kind for k in schedule_graph(g).kernels}
    assert KernelKind.RECURRENT_CELL not in kinds and KernelKind.MATMUL in kinds


def _cell(lin_x: nn.Linear, lin_h: nn.Linear, x, h, c):
    i, f, g, o = (lin_x(x) + lin_h(h)).chunk(4, dim=1)
    c = aotc.sigmoid(f) * c + aotc.sigmoid(i) * aotc.tanh(g)
    return aotc.sigmoid(o) * aotc.tanh(c), c


class Crossed(nn.Module):
    """Two two-step recurrences, each one's second input the other's first state (flipped): as two launches
    each would wait for the other."""

    def __init__(self, h: int = 8) -> None:
        super().__init__()
        self.h = h
        self.ax, self.ah, self.bx, self.bh = (nn.Linear(h, 4 * h) for _ in range(4))

    def forward(self, x):
        zero = aotc.zeros(x.shape[0], self.h)
        ha, ca = _cell(self.ax, self.ah, x, zero, zero)
        hb, cb = _cell(self.bx, self.bh, x, zero, zero)
        ha2, _ = _cell(self.ax, self.ah, aotc.flip(hb, dims=[1]), ha, ca)
        hb2, _ = _cell(self.bx, self.bh, aotc.flip(ha, dims=[1]), hb, cb)
        return ha2 + hb2


class Stacked(nn.Module):
    """Two LSTM layers stepped together, as hand-written loops do: the upper cell takes the lower's new state."""

    def __init__(self, h: int = 12) -> None:
        super().__init__()
        self.h = h
        self.x1, self.h1, self.x2, self.h2 = (
            nn.Linear(5, 4 * h),
            nn.Linear(h, 4 * h),
            nn.Linear(h, 4 * h),
            nn.Linear(h, 4 * h),
        )

    def forward(self, x):
        h1 = c1 = h2 = c2 = aotc.zeros(x.shape[0], self.h)
        for t in range(x.shape[1]):
            h1, c1 = _cell(self.x1, self.h1, x[:, t], h1, c1)
            h2, c2 = _cell(self.x2, self.h2, h1, h2, c2)
        return h2, c1


def test_layers_stepped_together_make_a_chain_each() -> None:
    spec = {"x": TensorSpec((Dim("batch", min=1, max=8), 6, 5), "float32")}
    g = lower(trace(Stacked(), spec, "stacked"), CompileOptions())
    s = schedule_graph(g)
    # 2 layers x 6 steps in unrolled launches of 4, 2 (each state is read by the other layer: no loop)
    assert [k.kind for k in s.kernels] == [KernelKind.RECURRENT_CELL] * 4
    for i, dims in enumerate(BATCHES):
        check(g, feeds("stacked", g, dims, seed=i), dims, tol=TOL, schedule=s)
    read_artifact(write_artifact([Variant(g, s)]))


def test_chains_that_would_wait_on_each_other_are_left_to_the_general_rules() -> None:
    spec = {"x": TensorSpec((Dim("batch", min=1, max=8), 8), "float32")}
    g = lower(trace(Crossed(), spec, "crossed"), CompileOptions())
    s = schedule_graph(g)
    assert not any(k.kind is KernelKind.RECURRENT_CELL for k in s.kernels)
    assert sum("recurrent_cell group" in d and "wait on itself" in d for d in s.declined) == 2, s.declined
    for i, dims in enumerate(BATCHES):
        check(g, feeds("crossed", g, dims, seed=i), dims, tol=TOL, schedule=s)


def test_a_lone_gated_layer_is_no_recurrence() -> None:
    """``a, b = linear(x).chunk(2); tanh(a) * sigmoid(b)`` has the shape of one cell: the matmul template takes it."""

    class Gated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 16)

        def forward(self, x):
            a, b = self.fc(x).chunk(2, dim=1)
            return aotc.tanh(a) * aotc.sigmoid(b)

    spec = {"x": TensorSpec((Dim("batch", min=1, max=8), 4), "float32")}
    s = schedule_graph(lower(trace(Gated(), spec, "gated"), CompileOptions()))
    assert [k.kind for k in s.kernels] == [KernelKind.MATMUL, KernelKind.POINTWISE]
