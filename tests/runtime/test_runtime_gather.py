"""Token ids outside [0, vocab) make a compiled aotc model raise ExecError naming the op, the input and the valid
range (as PyTorch's nn.Embedding refuses them); the next call on the same Executable still works."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ort_kit import PATHS, executable

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.artifact.reader import read_artifact
from aotc.errors import ExecError

VOCAB, WIDTH = 512, 8
BIG, SMALL = np.iinfo(np.int64).max, np.iinfo(np.int64).min
HERE = Path(__file__).name


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)

    def forward(self, input_ids):
        return self.wte(input_ids)


def embed_fn(input_ids):
    return F.embedding(input_ids, TABLE)


TABLE = np.random.default_rng(0).standard_normal((VOCAB, WIDTH)).astype(np.float32)
SPEC = {"input_ids": TensorSpec((Dim("batch", min=1, max=4), Dim("seq", min=1, max=16)), "int64")}


@pytest.fixture(scope="module", params=[(m, p) for m in ("nn.Embedding", "F.embedding") for p in PATHS], ids=str)
def model(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[aotc.Executable, np.ndarray]:
    """A saved and reloaded artifact, so the rule travels through the file; and its table."""
    kind, cpu_path = request.param
    if kind == "nn.Embedding":
        m = Embed()
        table = np.asarray(m.wte.weight.data)
        compiled = aotc.compile(m, SPEC)
    else:
        table = TABLE
        compiled = aotc.compile(embed_fn, SPEC)
    path = tmp_path_factory.mktemp("gather") / "embed.aotc"
    compiled.save(path)
    return executable(read_artifact(path), cpu_path), table


@pytest.mark.parametrize("ids", [[[0, VOCAB - 1]], [[7]], [[0, 1, 2], [VOCAB - 1, VOCAB - 2, 5]]])
def test_first_and_last_valid_ids(model, ids) -> None:
    exe, table = model
    ids = np.array(ids, np.int64)
    np.testing.assert_array_equal(exe(input_ids=ids), table[ids])


@pytest.mark.parametrize("bad", [-1, VOCAB, VOCAB + 1, 2**31, BIG, SMALL])
def test_ids_outside_the_vocab_raise_and_the_next_call_works(model, bad: int) -> None:
    exe, table = model
    ids = np.array([[3, 4], [5, bad]], np.int64)
    with pytest.raises(ExecError) as info:
        exe(input_ids=ids)
    message = str(info.value)
    assert message.startswith("gather at ") and HERE in message
    assert message.endswith(f"index {bad} in input 'input_ids' (at [1, 1]) is outside the valid range [0, {VOCAB})")
    good = np.array([[3, 4]], np.int64)
    np.testing.assert_array_equal(exe(input_ids=good), table[good])


class Rows(nn.Module):
    def __init__(self, select: bool) -> None:
        super().__init__()
        self.select = select
        self.register_buffer("rows", np.arange(12, dtype=np.float32).reshape(4, 3))

    def forward(self, ids):
        return self.rows.index_select(0, ids) if self.select else self.rows[ids]


def test_tensor_indexing_wraps_and_index_select_refuses_negative_ids_as_torch_does() -> None:
    spec = {"ids": TensorSpec((3,), "int64")}
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    indexed, picked = aotc.compile(Rows(select=False), spec), aotc.compile(Rows(select=True), spec)
    np.testing.assert_array_equal(indexed(ids=np.array([0, -1, -4])), rows[[0, -1, -4]])
    with pytest.raises(ExecError, match=r"index -5 in input 'ids' \(at \[1\]\) is outside the valid range \[-4, 4\)"):
        indexed(ids=np.array([0, -5, 1]))
    np.testing.assert_array_equal(picked(ids=np.array([3, 0, 1])), rows[[3, 0, 1]])
    with pytest.raises(ExecError, match=r"index -1 in input 'ids' \(at \[2\]\) is outside the valid range \[0, 4\)"):
        picked(ids=np.array([0, 1, -1]))


def gather_rows(table, ids):
    return F.embedding(ids, table)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_ids_of_either_width_are_checked_against_a_table_whose_size_is_a_symbol(path: str, dtype: type) -> None:
    rows = Dim("rows", min=1, max=64)
    spec = {"table": TensorSpec((rows, 3), "float32"), "ids": TensorSpec((Dim("n", min=1, max=8),), dtype.__name__)}
    exe = executable(aotc.compile(gather_rows, spec).artifact_bytes, path)
    table = np.arange(15, dtype=np.float32).reshape(5, 3)
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    for ids in ([0, 4, 2], [4], np.array([4, 9, 0, 9, 1], dtype)[::2]):  # the last one strided
        ids = np.asarray(ids, dtype)
        np.testing.assert_array_equal(exe(table=table, ids=ids), table[ids])
    for bad, at in [(5, 1), (-1, 0), (high, 2), (low, 1)]:
        ids = np.array([1, 2, 3], dtype)
        ids[at] = bad
        for given in (ids, np.repeat(ids, 2)[::2]):
            with pytest.raises(ExecError, match=rf"index {bad} in input 'ids' \(at \[{at}\]\) .* range \[0, 5\)$"):
                exe(table=table, ids=given)
    np.testing.assert_array_equal(exe(table=table[:2], ids=np.array([1, 0], dtype)), table[[1, 0]])
    with pytest.raises(ExecError, match=r"index 2 in input 'ids' \(at \[0\]\)"):
        exe(table=table[:2], ids=np.array([2, 0], dtype))
