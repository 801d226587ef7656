"""Segment checksums: hashed on worker threads for large files, skipped only when asked (``aotc inspect``),
and reported as unverified whenever they were skipped."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from mutation import reseal
from test_artifact_corruption import DATA

from aotc.artifact import describe, read_artifact, segments
from aotc.errors import ArtifactError
from aotc_cli.inspect_cmd import inspect_command


def damaged_weight(data: bytes, value: np.float32) -> bytes:
    """``data`` with one float of the first segment changed and no checksum recomputed."""
    pos = data.index(np.float32(-2.0).tobytes(), 4096)
    return data[:pos] + value.tobytes() + data[pos + 4 :]


@pytest.mark.parametrize("threads", [False, True])
def test_a_damaged_segment_is_refused(monkeypatch: pytest.MonkeyPatch, threads: bool) -> None:
    if threads:  # hash every file on worker threads, as for a large one
        monkeypatch.setattr(segments, "PARALLEL_MIN_BYTES", 0)
    art = read_artifact(DATA)
    assert art.weights_verified and describe(art)["checksums"] == "ok"
    with pytest.raises(ArtifactError, match="segment 0 is corrupted"):
        read_artifact(damaged_weight(DATA, np.float32(7.0)))


def test_a_process_that_cannot_start_threads_hashes_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a capped address space ``Thread.start`` fails ("can't start new thread"): the file is still
    verified, inline, and neither called malformed nor let through when damaged."""
    monkeypatch.setattr(segments, "PARALLEL_MIN_BYTES", 0)

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    art = read_artifact(DATA)
    assert art.weights_verified and describe(art)["checksums"] == "ok"
    with pytest.raises(ArtifactError, match="segment 0 is corrupted"):
        read_artifact(damaged_weight(DATA, np.float32(7.0)))


def test_a_decode_error_stops_the_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph error is reported, and the hashing threads are joined before read_artifact returns."""
    monkeypatch.setattr(segments, "PARALLEL_MIN_BYTES", 0)
    started: list[segments.SegmentHasher] = []
    real = segments.SegmentHasher

    def spy(*args: object) -> segments.SegmentHasher:
        started.append(real(*args))
        return started[-1]

    monkeypatch.setattr("aotc.artifact.reader.SegmentHasher", spy)
    bad = reseal(DATA.replace(b"\x03\x00\x00\x00neg", b"\x03\x00\x00\x00nog"))
    with pytest.raises(ArtifactError, match="unknown op 'nog'"):
        read_artifact(bad)
    assert started and not any(t.is_alive() for t in started[0]._threads)


def test_skipping_the_weights_is_reported() -> None:
    damaged = damaged_weight(DATA, np.float32(7.0))
    art = read_artifact(damaged, verify_weights=False)
    assert not art.weights_verified
    info = describe(art)
    assert info["checksums"] == "header ok, segments not verified" and info["segments_verified"] is False
    # everything else is still checked
    with pytest.raises(ArtifactError, match="FlatBuffer is corrupted"):
        read_artifact(DATA[:100] + bytes([DATA[100] ^ 1]) + DATA[101:], verify_weights=False)


def test_inspect_reads_no_weights_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "damaged.aotc"
    path.write_bytes(damaged_weight(DATA, np.float32(7.0)))
    runner = CliRunner()
    quick = runner.invoke(inspect_command, [str(path), "--json"])
    assert quick.exit_code == 0, quick.output
    assert json.loads(quick.stdout)["segments_verified"] is False
    text = runner.invoke(inspect_command, [str(path)])
    assert "checksums header ok, segments not verified (--verify reads and checks the weights)" in text.stdout
    full = runner.invoke(inspect_command, [str(path), "--verify"])
    # (the command alone: the aotc entry point turns the ArtifactError into a message and an exit status)
    assert isinstance(full.exception, ArtifactError) and "segment 0 is corrupted" in str(full.exception)
    path.write_bytes(DATA)
    ok = json.loads(runner.invoke(inspect_command, [str(path), "--json", "--verify"]).stdout)
    assert ok["checksums"] == "ok" and ok["segments_verified"] is True
