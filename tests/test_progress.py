"""Compile progress (aotc/progress.py): a live line on a terminal, plain lines in logs, kernel counts as they
compile, and aotc.compile(verbose=True) (issue 19 item 7)."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec
from aotc import progress as progress_mod
from aotc.progress import StageTimer


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_one_live_line_is_rewritten_and_cleared() -> None:
    out = Tty()
    timer = StageTimer(threshold_s=10.0, stream=out)
    assert timer.live
    timer("trace")
    timer("compile kernels", 0, 3)
    timer("compile kernels", 2, 3)
    timer.finish()
    text = out.getvalue()
    assert "\r\x1b[K  trace..." in text and "\r\x1b[K  compiled 2/3 kernels" in text
    assert text.endswith("\r\x1b[K") and "\n" not in text  # fast stages leave nothing behind


def test_in_logs_plain_lines_say_what_a_long_stage_is_doing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_mod, "COUNT_EVERY_S", 0.0)
    out = io.StringIO()
    timer = StageTimer(threshold_s=0.0, stream=out)
    assert not timer.live
    timer("compile kernels")
    timer("compile kernels", 1, 3)
    timer("compile kernels", 3, 3)
    timer.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "  compile kernels..." and lines[1] == "  compiled 1/3 kernels"
    assert lines[2].startswith("  compile kernels... done (") and len(lines) == 3


def test_plain_counts_wait_for_a_slow_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    timer = StageTimer(threshold_s=0.05, stream=out)
    timer("compile kernels", 1, 9)  # fast so far: quiet
    time.sleep(0.06)
    monkeypatch.setattr(progress_mod, "COUNT_EVERY_S", 0.0)
    timer("compile kernels", 5, 9)
    timer.finish()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("  compiled 5/9 kernels, about ") and lines[1].startswith("  compile kernels... done (")


def test_verbose_compile_prints_each_stage(capsys: pytest.CaptureFixture[str]) -> None:
    def f(x):
        return (x * 2).relu()

    compiled = aotc.compile(f, {"x": TensorSpec((Dim("n", 1, 8), 4))}, verbose=True)
    err = capsys.readouterr().err
    for stage in ("  trace...", "  schedule kernels...", "  write artifact... done ("):
        assert stage in err, err
    np.testing.assert_array_equal(compiled(x=np.ones((2, 4), np.float32)), np.full((2, 4), 2, np.float32))
    aotc.compile(f, {"x": TensorSpec((Dim("n", 1, 8), 4))})
    assert capsys.readouterr().err == ""  # silent unless asked


def test_a_counted_stage_estimates_the_time_left_once_a_few_are_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the pace of the items done since the stage's first count (cache hits count at once, so they do not
    speed it up), once ETA_AFTER of them are done; never on the last."""
    monkeypatch.setattr(progress_mod, "COUNT_EVERY_S", 0.0)
    now = [100.0]
    out = Tty()
    timer = StageTimer(stream=out, clock=lambda: now[0])
    timer("compile kernels", 4, 20)  # 4 cache hits
    for done in (5, 6, 7, 20):
        now[0] += 10.0
        timer("compile kernels", done, 20)
    timer.finish()
    lines = out.getvalue().split("\r\x1b[K")
    assert "  compiled 6/20 kernels" in lines and "  compiled 20/20 kernels" in lines
    assert "  compiled 7/20 kernels, about 2 min left" in lines  # 30 s for 3: 130 s for the other 13
    assert [progress_mod._duration(s) for s in (25.4, 0.2, 150)] == ["25 s", "1 s", "2 min"]
