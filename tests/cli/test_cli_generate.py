"""``aotc generate`` and ``aotc run`` on a model that keeps state across calls (issue 29)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner

import aotc
from aotc_cli.loader import import_file
from aotc_cli.main import cli

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_generate_decodes_as_the_session_does(tmp_path: Path) -> None:
    out = tmp_path / "dec.aotc"
    runner = CliRunner()
    r = runner.invoke(cli, ["compile", str(MODELS / "gpt2_decode.py"), "-o", str(out), "--target", "none"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["generate", str(out), "--prompt", "1,2,3", "--prompt", "4,5,6", "--max-new-tokens", "6",
                            "--device", "cpu"])  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = [[int(t) for t in line.split(",")] for line in r.output.splitlines()[:2]]
    want = aotc.generate(aotc.load(out, device="reference"), np.array([[1, 2, 3], [4, 5, 6]]), 6)
    assert rows == want.tolist()
    assert "ms a token on cpu (2 row(s))" in r.output
    m = import_file(MODELS / "gpt2_decode.py")
    assert len(rows[0]) == 3 + 6 and m.GPT2Decoder().max_seq == 128
    r = runner.invoke(cli, ["run", str(out), "--random", "--dim", "seq=4", "--device", "reference"])
    assert r.exit_code == 0, r.output
    assert "(8, 4, 512)" in r.output  # batch 8 (the nearest to 8), seq 4, the logits
    r = runner.invoke(cli, ["generate", str(out), "--prompt", "1,2", "--prompt", "3"])
    assert r.exit_code != 0 and "same, non-zero number of ids" in r.output
