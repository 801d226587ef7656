"""Which weights onnxruntime holds as its own (so it can prepack them) and which stay bound in place, and how the
mapped pages of the ones it holds leave the resident set without changing what the file's arrays read."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec, nn
from aotc.lowering.options import CompileOptions
from aotc.runtime.pages import release_pages

pytest.importorskip("onnxruntime")

OPTIONS = CompileOptions(kernels=False, targets=())


class Tagger(nn.Module):
    """An embedding table (read a few rows a call) feeding a linear layer (a GEMM onnxruntime prepacks)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(1000, 64), nn.Linear(64, 8)

    def forward(self, ids):
        return self.head(self.embed(ids))


@pytest.fixture(scope="module")
def tagger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = Tagger()
    rng = np.random.default_rng(0)
    model.load_state_dict({k: rng.standard_normal(v.shape).astype(np.float32) for k, v in model.state_dict().items()})
    spec = {"ids": TensorSpec((Dim("batch", min=1, max=4), 5), "int64")}
    path = tmp_path_factory.mktemp("tagger") / "tagger.aotc"
    aotc.compile(model, spec, options=OPTIONS).save(path)
    return path


def session_inputs(exe: aotc.runtime.Executable) -> list[str]:
    ((_, program),) = exe._variants
    return [i.name for i in program._session.get_inputs()]


def test_the_session_holds_the_gemm_weights_and_the_table_stays_bound(tagger: Path) -> None:
    exe = aotc.load(tagger, device="cpu")
    inputs = session_inputs(exe)
    assert inputs[0] == "ids"
    weights = inputs[1:]
    assert len(weights) == 1 and "embed" in weights[0], inputs  # the table: an input, bound to the mapped array
    ids = np.array([[1, 2, 3, 999, 0]] * 3)
    np.testing.assert_allclose(exe(ids=ids), aotc.load(tagger, device="reference")(ids=ids), rtol=1e-5, atol=1e-5)


def test_an_artifact_read_from_bytes_keeps_its_pages(tagger: Path) -> None:
    exe = aotc.load(tagger.read_bytes(), device="cpu")
    ids = np.array([[4, 5, 6, 7, 8]])
    np.testing.assert_allclose(exe(ids=ids), aotc.load(tagger, device="reference")(ids=ids), rtol=1e-5, atol=1e-5)
    for array in exe.artifact.constants.values():
        assert not release_pages(array)  # process memory: MADV_DONTNEED would zero it


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


def test_released_pages_leave_the_resident_set_and_read_the_same(tmp_path: Path) -> None:
    data = np.random.default_rng(1).standard_normal(8 << 20).astype(np.float32)  # 32 MiB
    path = tmp_path / "w.bin"
    data.tofile(path)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    array = np.frombuffer(memoryview(mm), np.float32).reshape(8, -1)
    before = array.sum(dtype=np.float64)  # every page read: resident in this process
    resident = rss()
    assert release_pages(array)
    assert resident - rss() >= 0.9 * array.nbytes
    assert array.sum(dtype=np.float64) == before  # read again, from the file's page cache
    np.testing.assert_array_equal(array.reshape(-1), data)
    del array
    mm.close()


def test_a_0d_weight_stays_0d_for_the_session() -> None:
    """A 0-d weight (torch.export lifts ``torch.tensor(0)`` as one) reaches the session with its own rank: numpy's
    ascontiguousarray makes a 0-d array 1-d, and onnxruntime refuses such an initializer (the model fell back)."""
    scale = np.array(3, dtype=np.int64)

    def fn(ids):
        return ids * scale

    compiled = aotc.compile(fn, {"ids": TensorSpec((Dim("batch", min=1, max=4), 5), "int64")}, options=OPTIONS)
    exe = aotc.load(compiled.artifact_bytes, device="cpu")  # a fallback would warn, an error under pytest
    ids = np.arange(10).reshape(2, 5)
    np.testing.assert_array_equal(exe(ids=ids), ids * 3)
