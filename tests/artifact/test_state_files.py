"""Hostile files about state (schema 10, issue 29): each is written by the project's own writer with its checks off
(or one encoder step patched) and resealed, and the reader refuses it with ArtifactError naming what is wrong.

=================================================================  ====================================================
file                                                               refused by
=================================================================  ====================================================
a state write's view re-aimed at a weight                          plan check: state storage (views into a state)
a state write's view dropped (the write would land in the arena)   plan check: state storage (every link a view)
another launch writing into a state through a view                 plan check: state storage (only its writes)
a reader of a state's old value moved after the write              plan check: state order
the state's writers list edited                                    decoder: writers recomputed from the graph
the state's initial value aimed at another constant                verifier: initial value's dtype and shape
the 'state' feature dropped                                        reader: features vs states
=================================================================  ====================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np
import pytest
from kernel_kit import unchecked
from mutation import reseal

import aotc
from aotc import Dim, TensorSpec, nn
from aotc.artifact import encode, read_artifact, write_artifact
from aotc.errors import ArtifactError
from aotc.ir.schedule import Schedule, View
from aotc.ir.state import StateChain
from aotc.ir.variant import Variant


class Cache(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.k = self.state("k", (6, 3))
        self.w = nn.Parameter(np.ones((3,), np.float32))
        self.pair = nn.Parameter(np.arange(2, dtype=np.float32))  # a weight no state's shape broadcasts from

    def forward(self, x, pos):
        before = self.k.sum(dim=0)
        self.k.index_copy_(0, pos, x * self.w)
        scale = (x.sum(dim=1, keepdim=True)[:1] * self.pair).sum()  # reads pair at run time (no folding)
        return self.k.sum(dim=0) - before + scale, self.k * 2.0  # the second: a state's size


@pytest.fixture(scope="module")
def variant() -> Variant:
    seq = Dim("seq", min=1, max=6)
    c = aotc.compile(Cache(), {"x": TensorSpec((seq, 3), "float32"), "pos": TensorSpec((seq,), "int64")},
                     options=aotc.CompileOptions(targets=()))  # fmt: skip
    assert c.schedule is not None
    return c.variant


def _write(v: Variant) -> bytes:
    with unchecked():
        return reseal(write_artifact([v]))


def _link(v: Variant) -> View:
    (link,) = [x for x in v.plan.views if x.base == v.graph.state_inputs[0].id]
    return link


def _replace_views(v: Variant, views: tuple[View, ...]) -> Variant:
    return v.replace(plan=dataclasses.replace(v.plan, views=views))


def test_the_file_as_written_loads_and_runs(variant: Variant) -> None:
    art = read_artifact(write_artifact([variant]))
    s = aotc.load(art, device="interpret").session()
    got, doubled = s(x=np.ones((2, 3), np.float32), pos=np.array([1, 4]))
    np.testing.assert_allclose(got, [5.0, 5.0, 5.0])  # 2 + (3 * [0, 1]).sum()
    np.testing.assert_allclose(doubled[:, 0], [0, 2, 0, 0, 2, 0])


def _at_weight(v: Variant) -> Variant:
    weight = next(n.outputs[0].id for n in v.graph.nodes if n.op.value == "constant")
    link = _link(v)
    return _replace_views(v, tuple(View(link.value, weight) if x == link else x for x in v.plan.views))


def _dropped(v: Variant) -> Variant:
    return _replace_views(v, tuple(x for x in v.plan.views if x != _link(v)))


def _other_writer(v: Variant) -> Variant:
    """A graph output of the state's size made a view of the state, which its launch then writes into."""
    out = v.graph.outputs[1].id
    return _replace_views(v, (*v.plan.views, View(out, v.graph.state_inputs[0].id)))


def _reader_after_write(v: Variant) -> Variant:
    s: Schedule = v.plan
    chain_in = v.graph.state_inputs[0].id
    write = next(i for i, k in enumerate(s.kernels) if _link(v).value in k.outputs)
    reader = next(i for i, k in enumerate(s.kernels) if chain_in in k.inputs and i != write)
    assert reader < write  # the plan reads the old value first
    kernels = list(s.kernels)
    kernels.insert(write, kernels.pop(reader))  # now right after the write
    return v.replace(plan=dataclasses.replace(s, kernels=tuple(kernels)))


PLAN_ATTACKS: list[tuple[str, Callable[[Variant], Variant], str]] = [
    (
        "a state write's view re-aimed at a weight",
        _at_weight,
        r"state storage.*joined to %\d+, not to the value it overwrites",
    ),
    ("a state write's view dropped", _dropped, r"state storage.*not joined to the state it overwrites"),
    ("another launch writing into a state", _other_writer, r"writes value %\d+ into a state's storage"),
    ("a reader of the old value after the write", _reader_after_write, r"state order|after it was overwritten"),
]


@pytest.mark.parametrize(("label", "change", "match"), PLAN_ATTACKS, ids=[a[0] for a in PLAN_ATTACKS])
def test_a_plan_that_misuses_a_state_is_refused(variant: Variant, label: str, change: Any, match: str) -> None:
    with pytest.raises(ArtifactError, match=match):
        read_artifact(_write(change(variant)))


def test_edited_writers_are_refused(variant: Variant) -> None:
    real = encode.state_chains

    def lying(g: Any) -> tuple[StateChain, ...]:
        return tuple(dataclasses.replace(c, writers=(c.writers[0] - 1,)) for c in real(g))

    with mock.patch.object(encode, "state_chains", lying):
        data = write_artifact([variant])
    with pytest.raises(ArtifactError, match=r"state 'k' lists writers \[\d+\], but its writes are the nodes \[\d+\]"):
        read_artifact(data)


def test_an_initial_value_aimed_at_another_constant_is_refused(variant: Variant) -> None:
    add = encode.FbState.AddInitial
    names = list(dict.fromkeys(variant.graph.constants))
    other = names.index("pair")
    with mock.patch.object(encode.FbState, "AddInitial", lambda b, i: add(b, other)):
        data = write_artifact([variant])
    with pytest.raises(ArtifactError, match=r"state 'k': its initial value \[2\] does not broadcast"):
        read_artifact(data)


def test_a_file_with_states_must_name_the_state_feature(variant: Variant) -> None:
    with mock.patch.object(encode, "STATE_FEATURE", "graph"), pytest.raises(ArtifactError, match="features"):
        read_artifact(write_artifact([variant]))
