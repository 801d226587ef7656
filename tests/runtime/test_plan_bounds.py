"""Plan facts the reader could not prove over the dims' whole ranges are checked per shape, on every backend that
runs a launch plan: a file whose buffer is big enough at every dim's min and max but not in between (or that
overlaps a live buffer only there) runs where it is sound and is refused, with an ArtifactError naming the
variant, the buffer and the check, at the call whose dims it breaks (batch=4, seq=2) before any launch."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fake_cuda import FakeDriver

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "artifact"))
from plan_kit import MIXED, D, min_sized_buffer, mixed_overlap, model, write

from aotc.artifact import read_artifact
from aotc.errors import ArtifactError
from aotc.ir.schedule import Schedule
from aotc.runtime import Executable
from aotc.runtime.backends.cuda import CudaBackend
from aotc.runtime.plan_bounds import shape_checks

pytest.importorskip("triton")

CASES = {
    "min(batch, seq) buffer": (min_sized_buffer, r"buffer 0: buffer size check failed: nbytes >= the 768\*batch\*seq"),
    "overlap at mixed dims": (mixed_overlap, r"buffers 0 and 1 are live together and overlap"),
}


def _x(batch: int, seq: int) -> np.ndarray:
    return np.random.default_rng(batch * 100 + seq).standard_normal((batch, seq, D)).astype(np.float32)


def _refused_only_where_it_breaks(
    exe: Executable, cpu: Executable, match: str, launches: Callable[[], int] = lambda: 0
) -> None:
    for batch, seq in ((1, 1), (2, 3)):  # sound here: batch <= seq
        np.testing.assert_allclose(exe(_x(batch, seq)), cpu(_x(batch, seq)), rtol=2e-4, atol=2e-4)
    before = launches()
    for _ in range(2):  # refused at every call of that shape, not only the first
        with pytest.raises(ArtifactError, match=rf"variant 0 schedule.*{match}.*at {MIXED}"):
            exe(_x(MIXED["batch"], MIXED["seq"]))
    assert launches() == before  # nothing of that shape ran
    np.testing.assert_allclose(exe(_x(1, 2)), cpu(_x(1, 2)), rtol=2e-4, atol=2e-4)  # later calls still run


@pytest.mark.parametrize("case", list(CASES))
def test_interpret_refuses_the_call_whose_dims_break_the_plan(case: str) -> None:
    change, match = CASES[case]
    art = read_artifact(write(change(model()[1])))
    _refused_only_where_it_breaks(Executable(art, "interpret"), Executable(art, "cpu"), match)


@pytest.mark.parametrize("case", list(CASES))
def test_cuda_refuses_the_call_whose_dims_break_the_plan(case: str) -> None:
    change, match = CASES[case]
    art = read_artifact(write(change(model()[1]), binaries=True))
    fake = FakeDriver(capability=(9, 0))
    fake.register(art.variants[0].plan, art.kernels)
    with Executable(art, CudaBackend(driver=fake)) as exe:
        _refused_only_where_it_breaks(exe, Executable(art, "cpu"), match, lambda: len(fake.launches))
    assert all(v == 0 for v in fake.live().values()), fake.live()


def test_a_sound_plan_costs_nothing_per_shape() -> None:
    """The compiler's plan: every fact proved at load, nothing left to evaluate per call."""
    art = read_artifact(write(model()[1]))
    checks = shape_checks(art.variants[0].graph, art.variants[0].plan)
    assert checks.facts.facts == () and checks.facts.live == ()


def test_a_plan_made_in_process_is_checked_too() -> None:
    """A plan no reader saw (made in this process) gets its facts at the first call: proved here too."""
    graph, schedule = model()
    bad: Callable[[Schedule], Schedule] = min_sized_buffer
    checks = shape_checks(graph, bad(schedule))
    assert {f.check for f in checks.facts.facts} == {"buffer size"}
    with pytest.raises(ArtifactError, match="buffer size check failed"):
        checks(MIXED)
    checks({"batch": 2, "seq": 3})


def test_an_arch_variants_facts_apply_where_the_gpu_runs_that_variant() -> None:
    """Launch 1's sm_90 variant has a grid its outputs need at every dim's ends but not at batch=4, seq=2: an
    sm_90 GPU (which launches the variant) is refused that call, an sm_80 GPU (the launch's own kernel) and the
    interpret backend run it."""
    from plan_kit import BATCH, SEQ, with_arch_launch

    from aotc.ir.symbolic import smin

    def grid(k):  # type: ignore[no-untyped-def]
        return (k.grid[0] + BATCH * SEQ - SEQ * smin(BATCH, SEQ), 1, 1)

    art = read_artifact(write(with_arch_launch(model()[1], 1, grid), binaries=True))
    cpu = Executable(art, "cpu")
    x = _x(MIXED["batch"], MIXED["seq"])
    np.testing.assert_allclose(Executable(art, "interpret")(x), cpu(x), rtol=2e-4, atol=2e-4)
    for capability, refused in (((9, 0), True), ((8, 0), False)):
        fake = FakeDriver(capability=capability)
        fake.register(art.variants[0].plan, art.kernels)
        with Executable(art, CudaBackend(driver=fake)) as exe:
            np.testing.assert_allclose(exe(_x(2, 3)), cpu(_x(2, 3)), rtol=2e-4, atol=2e-4)
            if refused:
                with pytest.raises(ArtifactError, match=r"launch 1 \(.*\) arch launch 'sm_90': grid check failed"):
                    exe(x)
            else:
                np.testing.assert_allclose(exe(x), cpu(x), rtol=2e-4, atol=2e-4)
