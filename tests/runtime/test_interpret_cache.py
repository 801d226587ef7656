"""The interpret backend's cache of loaded kernel functions is bounded: a process that loads, runs and drops many
artifacts keeps at most ``MAX_FUNCTIONS`` kernel modules, and what Triton's interpreter and ``linecache`` hold for
the dropped ones goes with them."""

from __future__ import annotations

import dataclasses
import linecache
import sys
from pathlib import Path

import numpy as np
import pytest

import aotc
from aotc.artifact import write_artifact
from aotc.ir.digest import seal
from aotc.ir.variant import Variant
from aotc.runtime.backends import triton_interp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "artifact"))
from kernel_kit import golden_model

pytest.importorskip("triton")

GOLDEN_NPZ = Path(__file__).resolve().parents[1] / "golden" / "v5_mlp.npz"
ADD = """import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
"""


def _ours() -> tuple[int, int, int]:
    """aotc's kernel sources registered with linecache, functions Triton's interpreter keeps rewritten, and
    JITFunctions Triton's registry keeps (the interpreter builds one per function it rewrites)."""
    t = triton_interp._triton()
    lines = sum(1 for f in list(linecache.cache) if isinstance(f, str) and f.startswith("<aotc-kernel "))
    rewritten = t.interpreter.InterpretedFunction.rewritten_fn
    fns = sum(1 for f in list(rewritten) if f.__globals__.get("__name__", "").startswith("aotc_kernel_"))
    registry = getattr(t.jit, "_triton_jit_function_registry", {})
    jits = sum(1 for key in list(registry) if key.startswith("aotc_kernel_"))
    return lines, fns, jits


def _renamed(j: int) -> bytes:
    """The golden model with every kernel renamed (as autotuning renames its candidates, and seals them again):
    distinct sources."""
    _, variant, schedule = golden_model()
    kernels = tuple(
        seal(
            variant, k.replace(name=f"{k.name}_{j}", source=k.source.replace(f"def {k.name}(", f"def {k.name}_{j}(", 1))
        )
        for k in schedule.kernels
    )
    return write_artifact([Variant(variant, dataclasses.replace(schedule, kernels=kernels))])


def test_loading_and_dropping_many_artifacts_keeps_the_cache_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_interp, "MAX_FUNCTIONS", 10)
    with np.load(GOLDEN_NPZ) as npz:
        z = dict(npz)
    feeds = {"x": z["in_x"], "ids": z["in_ids"]}
    for j in range(6):  # 6 artifacts x 7 kernels
        exe = aotc.load(_renamed(j), device="interpret")
        for i, out in enumerate(exe.run(feeds)):
            np.testing.assert_allclose(out, z[f"out_{i}"], rtol=1e-4, atol=1e-5)
        del exe
        assert triton_interp.cached_functions() <= 10
        assert max(_ours()) <= 10, _ours()


def test_a_long_run_of_distinct_kernels_stays_at_the_bound() -> None:
    x = np.arange(4, dtype=np.float32)
    n = triton_interp.MAX_FUNCTIONS + 40
    for j in range(n):
        src = ADD.replace("def add_kernel(", f"def add_kernel_{j}(")
        if j % 20 == 0:  # run some: Triton's interpreter then caches their rewritten functions
            out = np.zeros(4, np.float32)
            triton_interp.launch_source(
                src, f"add_kernel_{j}", (1,), [x, out, 4], ["*fp32", "*fp32", "i32"], {"BLOCK": 4}
            )
            assert np.array_equal(out, x + 1)
        else:
            triton_interp.load_function(f"add_kernel_{j}", src)
        assert triton_interp.cached_functions() <= triton_interp.MAX_FUNCTIONS
    assert max(_ours()) <= triton_interp.MAX_FUNCTIONS, _ours()


def test_the_most_recently_used_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_interp, "MAX_FUNCTIONS", 3)
    srcs = [ADD.replace("def add_kernel(", f"def lru_{j}(") for j in range(4)]
    first = triton_interp.load_function("lru_0", srcs[0])
    triton_interp.load_function("lru_1", srcs[1])
    triton_interp.load_function("lru_2", srcs[2])
    assert triton_interp.load_function("lru_0", srcs[0]) is first  # a hit moves it to the back
    triton_interp.load_function("lru_3", srcs[3])  # drops lru_1, the least recently used
    assert triton_interp.load_function("lru_0", srcs[0]) is first
    assert ("lru_1", srcs[1]) not in triton_interp._FUNCTIONS
