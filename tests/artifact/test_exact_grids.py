"""Grids exact (issue 30): the reader holds each launch's grid equal to what its template launches for its outputs
(aotc/ir/templates.py), not only at most that. A grid short of it loaded before and left part of the launch's
output unwritten: on a GPU that memory holds whatever the previous call left there, in a server another request's
data. Files rebuilt as an attacker would: the grid changed, the launch's digest recomputed, written by the
project's writer with its plan checks off and resealed.

The model: an embedding (a gather launch, ``cdiv(64*batch*seq, 1024)`` programs) and a LayerNorm of it (a
reduction launch, ``cdiv(batch*seq, 64)`` programs: fewer, from batch*seq > 16 on).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from kernel_kit import fake_binaries, unchecked
from mutation import reseal

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec
from aotc.artifact import read_artifact, write_artifact
from aotc.errors import ArtifactError
from aotc.ir.digest import seal
from aotc.ir.schedule import Schedule
from aotc.ir.symbolic import add, floordiv, mul, sym
from aotc.ir.variant import Variant
from aotc.runtime import Executable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from fake_cuda import FakeDriver

VOCAB, WIDTH = 512, 64
TABLE = np.random.default_rng(0).standard_normal((VOCAB, WIDTH)).astype(np.float32)
GATHER = r"variant 0 schedule launch 0 \(k0_pointwise_gather\): grid check failed: grid\[0\] = "


def embed_and_norm(input_ids: aotc.Tensor) -> tuple[aotc.Tensor, aotc.Tensor]:
    h = F.embedding(input_ids, TABLE)
    return h, F.layer_norm(h, (WIDTH,))


def _compiled() -> tuple[object, Schedule]:
    spec = {"input_ids": TensorSpec((Dim("batch", min=1, max=4), Dim("seq", min=1, max=16)), "int64")}
    art = read_artifact(aotc.compile(embed_and_norm, spec).artifact_bytes)
    return art, art.variants[0].plan


def _with_grid(grid: object) -> bytes:
    """The file with the gather launch's grid replaced by ``grid(schedule)``, its digest recomputed."""
    art, s = _compiled()
    graph = art.variants[0].graph
    k = seal(graph, s.kernels[0].replace(grid=grid(s)))
    s = dataclasses.replace(s, kernels=(k, *s.kernels[1:]))
    with unchecked():
        return reseal(write_artifact([Variant(graph, s)], source=art.source, meta=art.meta, binaries=fake_binaries(s)))


def test_the_launches_are_what_the_cases_rest_on() -> None:
    _, s = _compiled()
    assert [k.name for k in s.kernels] == ["k0_pointwise_gather", "k1_reduction_layernorm"]
    assert str(s.kernels[0].grid[0]) != str(s.kernels[1].grid[0])


def test_an_embedding_launch_given_a_layernorms_grid_is_refused_at_load() -> None:
    """Before, the smaller grid loaded (it is <= the need) and its programs past batch*seq = 16 never ran: rows
    of ``h`` left holding the arena's previous contents."""
    data = _with_grid(lambda s: s.kernels[1].grid)
    with pytest.raises(
        ArtifactError,
        match=GATHER + r"\(batch\*seq \+ 63\)//64 >= \(64\*batch\*seq \+ 1023\)//1024, what its template launches "
        r"for its outputs is false: .* is negative \(-3\) at \{'batch': 4, 'seq': 16\}",
    ):
        read_artifact(data)


def test_a_grid_one_program_larger_is_refused_at_load() -> None:
    data = _with_grid(lambda s: (add(s.kernels[0].grid[0], 1), 1, 1))
    with pytest.raises(ArtifactError, match=GATHER + r".* <= .*, what its template launches for its outputs"):
        read_artifact(data)


def test_a_grid_short_only_inside_the_ranges_is_refused_before_the_first_launch_at_that_shape() -> None:
    """One program short where 1 < batch < 4 only: equal at the dims' bounds, so no check at load can refute it
    and none can prove it; it is left as a fact and the call at batch 2 is refused before any launch, on
    interpret and on the fake driver, while batch 1 and 4 run."""
    batch = sym("batch")
    short = floordiv(mul(add(batch, -1), add(mul(batch, -1), 4)), 2)  # 0 at batch 1 and 4, 1 at batch 2 and 3
    art = read_artifact(_with_grid(lambda s: (add(s.kernels[0].grid[0], mul(short, -1)), 1, 1)))
    ids = {b: np.random.default_rng(b).integers(0, VOCAB, (b, 16)).astype(np.int64) for b in (1, 2, 4)}
    match = r"grid check failed: .*>= .* what its template launches for its outputs.*batch.*2"
    from aotc.runtime.backends.cuda import CudaBackend

    fake = FakeDriver()
    fake.register(art.variants[0].plan, art.kernels)
    with Executable(art, CudaBackend(driver=fake)) as gpu:
        for exe in (Executable(art, "interpret"), gpu):
            for b in (1, 4):
                np.testing.assert_allclose(exe(input_ids=ids[b])[0], TABLE[ids[b]], rtol=1e-6)
            with pytest.raises(ArtifactError, match=match):
                exe(input_ids=ids[2])
    assert fake.faults == []
