"""Addresses bounded from a kernel's stored source (aotc/artifact/source_bounds.py): every compiled plan's sources
stay inside their extents at the dims' bounds (no refusal of what the compiler makes), and each kind of edit that
reaches further, or that the reader cannot bound, is refused naming its line."""

from __future__ import annotations

import dataclasses

import pytest

from aotc.artifact.source_bounds import check_source
from aotc.artifact.source_program import parse_program
from aotc.errors import ArtifactError
from aotc.ir.schedule import Kernel
from tests.artifact.test_plan_verification_models import MODELS, scheduled


def _bindings(label: str) -> list[dict[str, int]]:
    graph, _ = scheduled(label)
    lows = {s.name: s.min for s in graph.symbols}
    highs = {s.name: s.max for s in graph.symbols}
    mids = {s.name: -(-((s.min + s.max) // 2) // s.multiple_of) * s.multiple_of for s in graph.symbols}
    return [lows, mids, highs]


@pytest.mark.parametrize("label", MODELS)
def test_every_compiled_kernel_stays_inside_its_extents(label: str) -> None:
    _, plan = scheduled(label)
    for env in _bindings(label):
        for k in plan.kernels:
            check_source(k, env, f"{label} {k.name}")


def _kernel(name: str) -> tuple[Kernel, dict[str, int]]:
    _, plan = scheduled("gpt2/fused")
    (k,) = [k for k in plan.kernels if k.name.endswith(name)][:1]
    return k, {"batch": 1, "seq": 3}  # tiles larger than the data: a mask is what keeps each access inside


def _edited(name: str, old: str, new: str) -> tuple[Kernel, dict[str, int]]:
    k, env = _kernel(name)
    assert old in k.source, old
    return dataclasses.replace(k, source=k.source.replace(old, new)), env


def _line(k: Kernel, text: str) -> int:
    return next(i for i, line in enumerate(k.source.split("\n"), 1) if text in line)


@pytest.mark.parametrize(
    ("name", "old", "new", "pointer"),
    [
        ("embedding", "(input_ids >= 512)", "(input_ids >= 912)", "wte_weight_ptr"),  # a gather bound raised
        ("embedding", "idx0 = tl.where(bad0, 0, input_ids)", "idx0 = tl.where(bad0, 1, input_ids)", None),
        ("embedding", "mask = offs < n_elements", "mask = offs < n_elements + 1", "input_ids_ptr"),  # a mask
        ("embedding", "mask = offs < n_elements", "mask = offs <= n_elements", "input_ids_ptr"),
        ("matmul_bias", "for k0 in range(0, 64, BLOCK_K)", "for k0 in range(0, 80, BLOCK_K)", "x_ptr"),  # a loop
        ("matmul_bias", "mask=mask_m[:, None], other=0.0)", "other=0.0)", "x_ptr"),  # a mask dropped
        ("matmul_bias", "offs_k[:, None] * 192 + offs_n", "offs_k[:, None] * 193 + offs_n", "weight_ptr"),
        ("matmul_bias", "(offs_m[:, None] * 192 + offs_n[None, :]), out", "(offs_m[:, None] * 192 + offs_n[None, :]) - 1, out", "out_ptr"),
        ("layernorm", "xmask = xoffs < n_rows", "xmask = xoffs < n_rows + 1", "x_ptr"),
        # integer bitwise ops: | sets bits above the clamp, & keeps bits of a value in [0, 511], ~ of an int
        # (-1 or -2 here, both true) negates no comparison, ~ of a comparison does
        ("embedding", "idx0 = tl.where(bad0, 0, input_ids)", "idx0 = tl.where(bad0, 0, input_ids) | 512",
         "wte_weight_ptr"),
        ("embedding", "idx0 = tl.where(bad0, 0, input_ids)", "idx0 = input_ids & 511", None),
        ("embedding", "mask = offs < n_elements", "mask = ~((offs >= n_elements).to(tl.int32))", "input_ids_ptr"),
        ("embedding", "mask = offs < n_elements", "mask = ~(offs >= n_elements)", None),
    ],
    ids=["gather bound", "clamp to 1 (in bounds)", "mask + 1", "mask <=", "loop", "mask dropped", "row stride",
         "offset - 1", "reduction mask", "bits or'd in", "low bits (in bounds)", "~ of an int", "~ of a mask"],
)  # fmt: skip
def test_an_edit_that_reaches_further_is_refused_naming_its_line(
    name: str, old: str, new: str, pointer: str | None
) -> None:
    k, env = _edited(name, old, new)
    if pointer is None:  # an edit that stays inside the extents: only a signature vouches for it
        check_source(k, env, "edited")
        return
    with pytest.raises(ArtifactError, match=rf"line \d+ .* reaches offsets -?\d+\.\.\d+ of {pointer} at .*, outside"):
        check_source(k, env, "edited")


@pytest.mark.parametrize(
    ("name", "old", "new", "why"),
    [
        ("embedding", "idx0 = tl.where(bad0, 0, input_ids)\n    wte_weight = tl.load(wte_weight_ptr + (idx0 * 64 + x2), "
         "mask=mask & (bad0 == 0)", "idx0 = input_ids\n    wte_weight = tl.load(wte_weight_ptr + (idx0 * 64 + x2), "
         "mask=mask", "does not bound"),  # an id read from data with neither its clamp nor its mask
        ("matmul_bias", "acc = tl.zeros", "p = x_ptr\n    acc = tl.zeros", None),
        ("layernorm", "    x = tl.load(", "    if pid > 0:\n        pid = 0\n    x = tl.load(", "a if statement"),
        ("layernorm", "    x = tl.load(", "    p = tl.make_block_ptr(x_ptr, (1,), (1,), (0,), (1,), (0,))\n    x = tl.load(",
         "make_block_ptr"),
        ("matmul_bias", "for k0 in range(0, 64, BLOCK_K):", "for k0 in range(0, 64, BLOCK_K - BLOCK_K):", "step"),
    ],
    ids=["no clamp", "a harmless name", "if", "block pointer", "zero step"],
)  # fmt: skip
def test_what_cannot_be_bounded_is_refused_naming_its_line(name: str, old: str, new: str, why: str | None) -> None:
    k, env = _edited(name, old, new)
    if why is None:
        check_source(k, env, "edited")
        return
    with pytest.raises(ArtifactError, match=rf"line \d+ .*{why}.*refused"):
        parse_program(k.source, k.name)
        check_source(k, env, "edited")


def test_a_pointer_carried_across_loop_iterations_is_refused() -> None:
    k, env = _edited(
        "matmul_bias",
        "        a = tl.load(x_ptr + (offs_m[:, None] * 64 + offs_k[None, :])",
        "        x_ptr += 1\n        a = tl.load(x_ptr + (offs_m[:, None] * 64 + offs_k[None, :])",
    )
    with pytest.raises(ArtifactError, match=rf"line {_line(k, 'a = tl.load(x_ptr')} .*carried across loop iterations"):
        check_source(k, env, "edited")


def test_a_store_through_an_input_is_refused() -> None:
    k, env = _edited("layernorm", "tl.store(out_ptr + ", "tl.store(x_ptr + ")
    with pytest.raises(ArtifactError, match=r"writes through x_ptr, which the launch only reads"):
        check_source(k, env, "edited")


def test_the_grouped_tile_decode_is_bounded_exactly() -> None:
    """The matmul's pid_m/pid_n decode over M not a multiple of its tile: the stores stay inside the output (an
    interval bound without the decode's relation would give pid_n up to GROUP_M * num_pid_n - 1)."""
    _, plan = scheduled("gpt2/fused")
    for k in plan.kernels:
        if "matmul" in k.name:
            for batch, seq in ((1, 1), (3, 7), (64, 128), (5, 100)):
                check_source(k, {"batch": batch, "seq": seq}, k.name)


def test_index_math_past_int32_is_refused() -> None:
    """``x * 2**31 // 2**31`` is ``x`` over the integers, but int32 arithmetic wraps the product (to 0 or -2**31):
    an edit that stays inside the extents only over the integers is refused for the overflow."""
    old = "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)"
    k, env = _edited("matmul_bias", old, f"offs_m = ({old.split(' = ')[1]}) * 65536 * 32768 // 2147483648")
    with pytest.raises(ArtifactError, match=r"its index math reaches \d+ .* past int32"):
        check_source(k, env, "edited")
