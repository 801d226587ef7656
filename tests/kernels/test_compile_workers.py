"""Compile workers started ahead of a cold compile (aotc/kernels/compile_workers.py): a cold kernel stage prestarts
them and its jobs take them; a compile whose kernels are all cached starts none and leaves none running."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton")

import aotc
from aotc.kernels import compile_workers
from aotc.kernels.aot import AotOptions, compile_kernels
from aotc.kernels.cache import KernelCache
from tests.kernel_fixtures import ADD, hand_kernel, ptr, size


def _add(name: str) -> object:
    args = [ptr("x_ptr", 0), ptr("y_ptr", 1), ptr("out_ptr", 2), size("n", 1024)]
    return hand_kernel(name, ADD.replace("def add_kernel", f"def {name}"), args, (4, 1, 1), [("BLOCK", 256)])


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of every worker process started during the test."""
    pids: list[int] = []
    spawn = compile_workers._spawn

    def counted() -> object:
        proc, err = spawn()
        pids.append(proc.pid)
        return proc, err

    monkeypatch.setattr(compile_workers, "_spawn", counted)
    yield pids
    compile_workers.release_prestarted()


def test_prestarted_workers_take_the_jobs(tmp_path: Path, spawned: list[int]) -> None:
    compile_workers.prestart(2)
    assert len(spawned) == 2 and len(compile_workers._ready) == 2
    out = compile_kernels([_add("add_a"), _add("add_b")], ("sm_80",), AotOptions(cache_dir=str(tmp_path), jobs=2))
    assert sorted(out) == ["add_a", "add_b"]
    assert len(spawned) == 2  # the two jobs ran on the prestarted workers: none was started for them
    assert compile_workers._ready == []


def test_unused_prestarted_workers_are_closed(spawned: list[int]) -> None:
    compile_workers.prestart(2)
    procs = [p for p, _ in compile_workers._ready]
    compile_workers.release_prestarted()
    assert compile_workers._ready == [] and all(p.poll() is not None for p in procs)  # none left running


def test_a_cold_compile_prestarts_and_a_warm_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list[int]
) -> None:
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path))
    calls: list[int | None] = []
    prestart = compile_workers.prestart
    monkeypatch.setattr(compile_workers, "prestart", lambda jobs=None: calls.append(jobs) or prestart(jobs))
    x = aotc.TensorSpec((aotc.Dim("batch", min=1, max=8), 4), "float32")
    model = lambda x: aotc.functional.relu(x) * 2.0  # noqa: E731

    assert KernelCache().is_empty()
    cold = aotc.compile(model, {"x": x}, options=aotc.CompileOptions(targets=("sm_80",)))
    assert len(calls) == 1 and compile_workers._ready == []  # prestarted, taken or closed
    assert not KernelCache().is_empty()
    before = len(spawned)
    warm = aotc.compile(model, {"x": x}, options=aotc.CompileOptions(targets=("sm_80",)))
    assert len(calls) == 1 and len(spawned) == before  # every kernel cached: no worker started
    feed = {"x": np.arange(12, dtype=np.float32).reshape(3, 4) - 6}
    np.testing.assert_array_equal(cold(**feed), warm(**feed))
