"""Each pointer fenced to the argument it came from (issue 30): files rebuilt as an attacker would (a kernel's
source edited, every launch digest recomputed with the project's own writer) whose reads land in the next arena
buffer, which is an argument of the same launch and lies in the same allocation. The fence the interpreter runs
under, and the fake CUDA driver's, checked each address against every argument of the launch (interpret) or
against the allocation (fake driver) and let both through; each is now refused before the read, with a typed
error that names the pointer, the argument it overran and the one it landed in.

The model: two tables computed at the call (``TABLE @ m`` and ``TABLE @ (2 m)``, arena buffers x and y with the
256-byte ``2 m`` between them) and one gather kernel reading a row of each, so a row index past x's 512 rows
reads inside y.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from kernel_kit import SOURCE_REFUSAL, fake_binaries, fence_only, unchecked
from mutation import reseal

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec
from aotc.artifact import read_artifact, write_artifact
from aotc.artifact.reader import Artifact
from aotc.errors import ArtifactError, ExecError
from aotc.ir.digest import seal
from aotc.ir.variant import Variant
from aotc.runtime import Executable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from fake_cuda import FakeDriver

VOCAB, WIDTH = 512, 8
TABLE = np.random.default_rng(0).standard_normal((VOCAB, WIDTH)).astype(np.float32)
M = np.random.default_rng(1).standard_normal((WIDTH, WIDTH)).astype(np.float32)
GOOD, BAD = np.array([[3, 511]], np.int64), np.array([[3, 600]], np.int64)  # row 600 of x: 2816 bytes into y


def two_tables(input_ids: aotc.Tensor, m: aotc.Tensor) -> aotc.Tensor:
    return F.embedding(input_ids, TABLE @ m) + F.embedding(input_ids, TABLE @ (m * 2.0))


def _file(kernel: str = "", old: str = "", new: str = "", launch: int | None = None) -> Artifact:
    """The two-table model's file with ``old`` -> ``new`` in the source of the launches of ``kernel`` (none:
    unedited; ``launch``: that launch only, its code renamed to stand apart from the other launches of the same
    code), their digests recomputed, written by the project's writer (its plan checks off) and resealed."""
    spec = {
        "input_ids": TensorSpec((Dim("batch", min=1, max=4), Dim("seq", min=1, max=16)), "int64"),
        "m": TensorSpec((WIDTH, WIDTH), "float32"),
    }
    art = read_artifact(aotc.compile(two_tables, spec).artifact_bytes)
    graph, s = art.variants[0].graph, art.variants[0].plan
    kernels = []
    for i, k in enumerate(s.kernels):
        if kernel and k.name.endswith(kernel) and launch in (None, i):
            assert k.source.count(old) == 1, k.source
            source = k.source.replace(old, new)
            if launch is not None:
                name = f"k{i}_{kernel}_edited"
                k, source = k.replace(name=name), source.replace(f"def {k.name}(", f"def {name}(")
            k = seal(graph, k.replace(source=source))
        kernels.append(k)
    assert (kernels != list(s.kernels)) == bool(kernel)
    s = dataclasses.replace(s, kernels=tuple(kernels))
    with unchecked():
        data = write_artifact([Variant(graph, s)], source=art.source, meta=art.meta, binaries=fake_binaries(s))
    return read_artifact(reseal(data))


def _expected(ids: np.ndarray) -> np.ndarray:
    return (TABLE @ M)[ids] + (TABLE @ (M * 2.0))[ids]


def _refused_by_its_source(art: Artifact, pointer: str) -> None:
    """Before any launch, on interpret and on the fake driver: the edited source reaches past ``pointer``'s
    extents at the call's shape (artifact/source_bounds.py), whatever the ids, and nothing runs."""
    from aotc.runtime.backends.cuda import CudaBackend

    match = SOURCE_REFUSAL.format(pointer=pointer)
    with pytest.raises(ArtifactError, match=match):
        Executable(art, "interpret")(input_ids=GOOD, m=M)
    fake = FakeDriver()
    fake.register(art.variants[0].plan, art.kernels)
    with Executable(art, CudaBackend(driver=fake)) as exe, pytest.raises(ArtifactError, match=match):
        exe(input_ids=GOOD, m=M)
    assert fake.faults == [] and fake.launches == [], (fake.faults, fake.launches)


def _on_both(art: Artifact, match: str) -> None:
    """The valid ids run as before and ``BAD`` is refused by the fence, on interpret and on the fake driver
    (the source check off: what the fence stops on its own)."""
    with fence_only():
        _fenced_on_both(art, match)


def _fenced_on_both(art: Artifact, match: str) -> None:
    from aotc.runtime.backends.cuda import CudaBackend

    np.testing.assert_allclose(Executable(art, "interpret")(input_ids=GOOD, m=M), _expected(GOOD), rtol=1e-5)
    with pytest.raises(ExecError, match=match):
        Executable(art, "interpret")(input_ids=BAD, m=M)
    fake = FakeDriver()
    fake.register(art.variants[0].plan, art.kernels)
    with Executable(art, CudaBackend(driver=fake)) as exe:
        np.testing.assert_allclose(exe(input_ids=GOOD, m=M), _expected(GOOD), rtol=1e-5)
        with pytest.raises(ExecError):
            exe(input_ids=BAD, m=M)
    assert len(fake.faults) == 1 and re.search(match, fake.faults[0]), fake.faults


def test_the_model_lays_x_and_y_out_side_by_side_in_one_launch() -> None:
    """What the cases below rest on: x and y are arena buffers of one gather launch, y after x, so an overrun of
    x lands in y (whole rows of x from row 520 on)."""
    art = _file()
    s = art.variants[0].plan
    (gather,) = [k for k in s.kernels if k.name.endswith("embedding")]
    x, y = (next(b for b in s.buffers if b.value == a.value) for a in gather.args if a.name in ("x_ptr", "y_ptr"))
    assert (
        x.offset == 0 and x.nbytes == VOCAB * WIDTH * 4 and x.nbytes < y.offset < 600 * WIDTH * 4 < y.offset + y.nbytes
    )


def test_the_unedited_file_refuses_the_bad_id_by_its_flag() -> None:
    art = _file()
    with pytest.raises(ExecError, match=r"index in input 'input_ids' is outside the valid range \[0, 512\)"):
        Executable(art, "interpret")(input_ids=BAD, m=M)


def test_a_gather_bound_raised_reading_into_the_next_arena_buffer_is_fenced() -> None:
    """512 -> 1024 in x's bounds check: id 600 reads row 600 of x, which lies inside y, an argument of the same
    launch in the same arena. Refused before the read on both backends, naming x and y (before, the read
    happened, and only y's own bounds flag failed the call after the launch)."""
    art = _file("embedding", "(input_ids >= 512)\n    flagged0", "(input_ids >= 1024)\n    flagged0")
    _refused_by_its_source(art, "x_ptr")
    _on_both(art, r"kernel k\d+_pointwise_embedding: a load through x_ptr .* past the end of x_ptr \(16384 bytes\), "
             r"inside y_ptr")  # fmt: skip


def test_a_loosened_mask_reading_into_the_next_arena_buffer_is_fenced() -> None:
    """The second matmul's k mask of its ``m`` operand loosened (< 8 -> < 16): its loads read 8 rows past the
    arena buffer ``2 m`` (256 bytes), which is y, the launch's own output, in the same arena. Refused before the
    read on both backends; the fake driver's arguments run to their allocation's end, so there the fence is what
    the launch's extents claim (proved inside each argument's value at load)."""
    old = "(offs_k[:, None] < 8) & mask_n"
    art = _file("matmul", old, old.replace("8", "16"), launch=2)
    _refused_by_its_source(art, "m_ptr")
    match = r"kernel k2_matmul_edited: a load through m_ptr .* past the end of m_ptr \(256 bytes\), inside out_ptr"
    from aotc.runtime.backends.cuda import CudaBackend

    with fence_only():
        with pytest.raises(ExecError, match=match):
            Executable(art, "interpret")(input_ids=GOOD, m=M)
        fake = FakeDriver()
        fake.register(art.variants[0].plan, art.kernels)
        with Executable(art, CudaBackend(driver=fake)) as exe, pytest.raises(ExecError):
            exe(input_ids=GOOD, m=M)
    assert len(fake.faults) == 1 and re.search(match, fake.faults[0]), fake.faults
