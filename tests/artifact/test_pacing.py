"""The reader's decoder hands the GIL to its hashing threads only while some are hashing (aotc/artifact/pacing.py)."""

from __future__ import annotations

import pytest

from aotc.artifact import pacing, read_artifact, segments


def test_pace_yields_only_while_a_hashing_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr(pacing.time, "sleep", sleeps.append)
    pacing.pace()
    assert sleeps == []
    with pacing.Hashing():
        with pacing.Hashing():
            pacing.pace()
        pacing.pace()
    pacing.pace()
    assert sleeps == [0, 0]


def test_a_read_on_hashing_threads_paces_its_decoding_and_leaves_no_count(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """A file big enough for threads: the decoder yields while they hash, and the count is back to zero after."""
    import aotc

    monkeypatch.setattr(segments, "PARALLEL_MIN_BYTES", 1)
    calls: list[int] = []
    real = pacing.pace

    def counting() -> None:
        calls.append(pacing._running)
        real()

    for module in ("aotc.artifact.plan_decode", "aotc.artifact.plan_checks", "aotc.artifact.decode"):
        monkeypatch.setattr(f"{module}.pace", counting)
    model = aotc.nn.Linear(8, 4)
    path = tmp_path / "m.aotc"
    aotc.compile(model, {"x": aotc.TensorSpec((2, 8), "float32")}).save(path)
    read_artifact(path)
    assert calls and pacing._running == 0
