"""A launch plan is bound to its graph and its memory (schema 6): a graph edit its kernels do not follow is refused
by the digest, a lowered block size or a swapped size arg by the extents, a kernel storing outside its buffer by
the interpreter's fence and the fake GPU; files from before schema 6 load unbound."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from kernel_kit import SOURCE_REFUSAL, fake_binaries, fence_only
from plan_kit import (
    BATCH,
    SEQ,
    D,
    arg,
    constexpr,
    edited,
    model,
    sealed,
    with_source,
    write,
)

from aotc.artifact import read_artifact
from aotc.errors import ArtifactError, ExecError
from aotc.ir.ops import Op
from aotc.ir.schedule import Schedule
from aotc.ir.symbolic import floordiv
from aotc.ir.symbolic_values import evaluate

BIND = rf"variant 0 schedule launch 0 \({re.escape(model()[1].kernels[0].name)}\)"


def _gelu_coefficient(node) -> bool:  # type: ignore[no-untyped-def]
    return node.op is Op.FULL and node.attrs.get("value") == 0.044715


def _graph_edits() -> dict[str, tuple]:
    """(graph, its schedule, the edited graph): valid graphs whose kernels were compiled for the original."""
    from kernel_kit import golden_model

    _, golden, golden_plan = golden_model()
    graph, s = model()
    return {
        # the golden model's LayerNorm eps, decomposed into a FULL feeding the variance's sum
        "LayerNorm eps 1e-5 -> 1.00001": (
            golden,
            golden_plan,
            edited(golden, lambda n: n.op is Op.FULL and n.attrs.get("value") == 1e-5, value=1.00001),
        ),
        "where's fill -0.0 -> 1.0": (
            golden,
            golden_plan,
            edited(golden, lambda n: n.op is Op.FULL and str(n.attrs.get("value")) == "-0.0", value=1.0),
        ),
        "gelu's tanh coefficient": (graph, s, edited(graph, _gelu_coefficient, value=0.05)),
    }


GRAPH_EDITS = _graph_edits()


def _feeds(graph) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    out = {}
    for name, v in zip(graph.input_names, graph.inputs):
        env = {"batch": 2, "seq": 4}
        shape = tuple(evaluate(d, env) for d in v.type.shape)
        dt = v.type.dtype.np
        out[name] = rng.integers(0, 5, shape).astype(dt) if dt.kind in "iu" else rng.standard_normal(shape).astype(dt)
    return out


@pytest.mark.parametrize("label", list(GRAPH_EDITS))
def test_a_graph_edit_its_kernels_do_not_follow_is_refused_by_the_digest(label: str) -> None:
    """The edited graph is valid and its cpu answer differs from what the file's own kernels compute; the launch
    computing the edited node no longer has its digest, so the reader refuses the file."""
    import aotc
    from aotc.artifact import plan_checks

    _, s, graph = GRAPH_EDITS[label]
    data = write(s, graph=graph)
    with pytest.raises(ArtifactError, match=r"launch \d+ \(.*\): digest check failed: its digest [0-9a-f]{32} is not"):
        read_artifact(data)
    # the attack, were the digest not checked: the kernels compute the graph they were compiled for
    with mock.patch.object(plan_checks, "check_binding"):
        art = read_artifact(data)
    feeds = _feeds(art.variants[0].graph)
    cpu, interp = aotc.load(art, device="cpu")(**feeds), aotc.load(art, device="interpret")(**feeds)
    assert any(not np.allclose(a, b, atol=1e-3, equal_nan=True) for a, b in zip(_leaves(cpu), _leaves(interp)))


def _leaves(tree: object) -> list[np.ndarray]:
    if isinstance(tree, np.ndarray):
        return [tree]
    items = tree.values() if isinstance(tree, dict) else tree
    return [x for v in items for x in _leaves(v)]  # type: ignore[union-attr]


def _lowered_block_m(s: Schedule) -> Schedule:
    """Launch 0 with BLOCK_M 128 -> 64 and a grid of the smaller row tiles, which the grid check accepts."""
    return constexpr(s, 0, "BLOCK_M", 64, lambda k: (2 * floordiv(BATCH * SEQ + 63, 64), 1, 1))


def test_a_lowered_block_size_is_refused_by_the_digest() -> None:
    with pytest.raises(ArtifactError, match=rf"{BIND}: digest check failed"):
        read_artifact(write(_lowered_block_m(model()[1])))


def test_a_lowered_block_size_beside_a_cubin_that_bakes_the_old_one_is_refused() -> None:
    """The file's code says BLOCK_M 64 and its grid runs 64-row tiles; the cubin computes 128-row tiles, so its
    programs would overrun the rows. Its launch metadata says what it was compiled with: refused."""
    s = model()[1]
    data = write(sealed(_lowered_block_m(s)), binaries=fake_binaries(s))
    with pytest.raises(ArtifactError, match=r"sm_80 cubin: it was compiled with constexprs .*'BLOCK_M': 128.*64"):
        read_artifact(data)


def test_a_lowered_block_size_is_refused_by_the_extents() -> None:
    """No binaries (the interpret backend), digest recomputed: the extents were derived for BLOCK_M 128."""
    data = write(sealed(_lowered_block_m(model()[1])))
    with pytest.raises(ArtifactError, match=rf"{BIND}: extent check failed: BLOCK_M = 64 is in \[128, 128\]"):
        read_artifact(data)


def _swapped_rows(s: Schedule) -> Schedule:
    """Launch 0's rows (M = batch*seq) swapped for 192*batch*seq, another legitimate dim of its input x."""
    return arg(s, 0, "M", size=D * BATCH * SEQ)


def test_a_swapped_size_arg_is_refused_by_the_extents() -> None:
    """The size-arg check sees a dim of the kernel's values; the extents see the rows its mask now lets through."""
    with pytest.raises(ArtifactError, match=rf"{BIND}: digest check failed"):
        read_artifact(write(_swapped_rows(model()[1])))
    data = write(sealed(_swapped_rows(model()[1])))
    with pytest.raises(ArtifactError, match=rf"{BIND}: extent check failed: M = 192\*batch\*seq is in \[1, 512\]"):
        read_artifact(data)


def test_a_swapped_size_arg_the_extents_let_through_would_have_been_fenced() -> None:
    """With the extents not checked, the interpreter's address fence refuses the first read past x."""
    import aotc
    from aotc.artifact import binding_checks

    with mock.patch.object(binding_checks, "check_extents"):
        art = read_artifact(write(sealed(_swapped_rows(model()[1]))))
    x = np.ones((2, 3, D), np.float32)
    with pytest.raises(
        ExecError,
        match=r"kernel k0_\w+: a load through x_ptr of 4 bytes at 0x[0-9a-f]+ lies outside the argument its pointer came from",
    ):
        aotc.load(art, device="interpret")(x)


STORE = "tl.store(out_ptr + (offs_m[:, None] * 192 + offs_n[None, :])"


@pytest.mark.parametrize(
    ("new", "match"),
    [
        # 4 MiB past its output: past every argument, or (where numpy placed one there) into one it only reads
        (
            f"{STORE} + 1048576",
            r"through out_ptr .*\((\d+ bytes past the end of out_ptr|into \w+, which the launch only reads)",
        ),
        (STORE.replace("out_ptr", "x_ptr"), r"through x_ptr .*\(into x_ptr, which the launch only reads\)"),
    ],
    ids=["past its buffer", "into its input"],
)
def test_a_kernel_storing_outside_its_buffer_is_refused_by_the_fence(new: str, match: str) -> None:
    """Source edited and digest recomputed: the reader cannot see a store's address, the fence can. The call
    fails with an ExecError naming the kernel and the pointer, and the store never happened."""
    import aotc

    art = read_artifact(write(sealed(with_source(model()[1], 2, STORE, new))))
    x = np.random.default_rng(1).standard_normal((2, 3, D)).astype(np.float32)
    before = x.copy()
    first = (
        "writes through x_ptr, which the launch only reads"
        if "x_ptr" in new
        else SOURCE_REFUSAL.format(pointer="out_ptr")
    )
    with pytest.raises(ArtifactError, match=first):  # first, by its source
        aotc.load(art, device="interpret")(x)
    with fence_only(), pytest.raises(ExecError, match=rf"kernel k2_\w+: a store {match}"):
        aotc.load(art, device="interpret")(x)
    np.testing.assert_array_equal(x, before)  # the store into the graph input never ran


def test_the_fake_gpu_faults_on_a_store_outside_its_buffers() -> None:
    """The fake CUDA driver runs each launch's source under the fence: the stray store is an illegal address."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
    from fake_cuda import FakeDriver

    from aotc.runtime import Executable
    from aotc.runtime.backends.cuda import CudaBackend

    s = sealed(with_source(model()[1], 2, STORE, f"{STORE} + 1048576"))
    art = read_artifact(write(s, binaries=True))
    fake = FakeDriver()
    fake.register(art.variants[0].plan, art.kernels)
    with Executable(art, CudaBackend(driver=fake)) as exe:
        with pytest.raises(ArtifactError, match=SOURCE_REFUSAL.format(pointer="out_ptr")):
            exe(np.ones((2, 3, D), np.float32))
        assert fake.launches == []
        with fence_only(), pytest.raises(ExecError):
            exe(np.ones((2, 3, D), np.float32))
    assert len(fake.faults) == 1 and "a store through out_ptr of 4 bytes" in fake.faults[0], fake.faults


def test_old_files_load_unbound_and_new_ones_bound() -> None:
    from kernel_kit import GOLDEN

    for path in sorted(GOLDEN.parent.glob("v[3-9]_*.aotc")):
        art = read_artifact(path)
        assert art.plans_bound == (art.schema_version >= 6), path.name
        if art.schema_version >= 6:
            assert all(len(k.digest) == 32 and k.extents is not None for k in art.variants[0].plan.kernels)
