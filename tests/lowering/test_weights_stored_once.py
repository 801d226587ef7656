"""Every weight is stored once: an example model's artifact holds about its parameter bytes, not a folded
(transposed, reshaped) copy of each weight beside the original the source graph keeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aotc
from aotc.artifact.reader import read_artifact
from aotc_cli.loader import import_file

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.mark.parametrize("name", ["mlp", "gpt2", "bert", "cnn", "lstm_ensemble"])
def test_artifact_stores_each_weight_once(name: str) -> None:
    model, inputs = import_file(MODELS / f"{name}.py").build()
    params = sum(np.asarray(v).nbytes for v in model.state_dict().values())
    art = read_artifact(aotc.compile(model, inputs).artifact_bytes)
    stored = list(art.constants.values())
    assert sum(a.nbytes for a in stored) <= 1.05 * params
    # No stored array is another's elements rearranged (a folded transpose or reshape of a weight).
    by_size: dict[tuple, list[np.ndarray]] = {}
    for a in stored:
        if a.size > 16:
            by_size.setdefault((a.dtype.str, a.size), []).append(np.sort(a, axis=None))
    for group in by_size.values():
        for i, a in enumerate(group):
            assert not any(np.array_equal(a, b) for b in group[i + 1 :])
