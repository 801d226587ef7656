"""The recurrent cell in the tuned table (issue 27): a chain's key (state width, each product's K, steps and form
static; rows bucketed), its legal tiles (rows per program, warps), a table entry that changes the launch while
the kernel stays right under the Triton interpreter (loop and unrolled forms), and its bundle candidates."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from aotc import Dim, TensorSpec
from aotc.artifact import read_artifact, write_artifact
from aotc.errors import UnsupportedError
from aotc.frontend.trace import trace
from aotc.ir.templates import KernelKind
from aotc.ir.variant import Variant
from aotc.kernels.fusion import plan_fusion
from aotc.kernels.recurrent import BLOCK_M, NUM_WARPS, RecurrentConfig
from aotc.kernels.scheduler import schedule_graph
from aotc.kernels.tuned import HEURISTIC, RELAXED, kernel_key
from aotc.kernels.tuned.bundle import RECURRENT_GRID, grid_tiles, key_cases
from aotc.kernels.tuned.configs import tile_from_json, tile_to_json
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from tests.kernel_layer.kernel_kit import check
from tests.kernel_layer.model_kit import feeds
from tests.kernel_layer.test_recurrent import TOL, Stacked, ensemble
from tests.kernel_layer.test_tuned_table import OTHER_CHAIN, entry, tables, write_table  # noqa: F401 (fixture)

SM80 = SimpleNamespace(targets=("sm_80",), cuda_driver_floor="12.4", tune_dims=())
TUNED = {"block_m": 32, "num_warps": 2}


def small_ensemble():
    return ensemble(input_size=12, hidden_size=8, members=1, steps=3)


def chain_keys(graph, env=None):
    plans = [kp for kp in plan_fusion(graph).kernels if kp.kind == "recurrent_cell"]
    return [kernel_key(graph, None, kp.nodes, env, kp.group) for kp in plans]


def cells(schedule):
    return [k for k in schedule.kernels if k.kind is KernelKind.RECURRENT_CELL]


def test_a_chains_key_holds_its_static_sizes_and_buckets_its_rows() -> None:
    keys = chain_keys(small_ensemble(), {"batch": 5})
    # two layers, each a forward and a backward loop: the directions of a layer share a key
    assert len(keys) == 4 and keys[0] == keys[1] and keys[2] == keys[3] and keys[0] != keys[2]
    first = keys[0]
    assert first["template"] == "recurrent_cell" and first["dtypes"] == ["float32", "float32"]
    assert first["static"] == {"state": 8, "k": [8, 12], "steps": 3, "form": "loop"}
    assert first["buckets"] == {"rows": 8} and first["epilogue"] == "none"
    assert chain_keys(small_ensemble(), {"batch": 1})[0]["buckets"] == {"rows": 1}
    spec = {"x": TensorSpec((Dim("batch", min=1, max=8), 6, 5), "float32")}
    stacked = chain_keys(lower(trace(Stacked(), spec, "stacked"), CompileOptions()))
    assert {k["static"]["form"] for k in stacked} == {"unrolled"}
    assert {k["static"]["steps"] for k in stacked} == {4, 2}  # 6 steps in launches of MAX_STEPS


def test_legal_tiles_and_what_is_refused() -> None:
    key = chain_keys(small_ensemble())[0]
    assert tile_from_json("recurrent_cell", TUNED, key, "sm_90") == RecurrentConfig(32, 2)
    assert tile_to_json(RecurrentConfig(32, 2)) == TUNED
    refusals = {
        "block_m=8": {"block_m": 8, "num_warps": 4},  # below tl.dot's 16
        "block_m=48": {"block_m": 48, "num_warps": 4},
        "num_warps=3": {"block_m": 16, "num_warps": 3},
        "exactly the fields": {"block_m": 16, "num_warps": 4, "num_stages": 1},
    }
    for why, raw in refusals.items():
        with pytest.raises(UnsupportedError, match=why):
            tile_from_json("recurrent_cell", raw, key, "sm_90")
    wide = {**key, "static": {**key["static"], "state": 128, "k": [128]}}
    with pytest.raises(UnsupportedError, match="state elements per thread"):
        tile_from_json("recurrent_cell", {"block_m": 128, "num_warps": 1}, wide, "sm_90")


def test_without_a_table_the_heuristic_tiles_stay() -> None:
    sources: dict = {}
    s = schedule_graph(small_ensemble(), SM80, sources=sources)
    for k in cells(s):
        assert dict(k.constexprs)["BLOCK_M"] == BLOCK_M and k.num_warps == NUM_WARPS
    assert {sources[i, "sm_80"].source for i, k in enumerate(s.kernels) if k in cells(s)} == {HEURISTIC}


@pytest.mark.parametrize("form", ["loop", "unrolled"])
def test_a_table_entry_changes_the_launch_and_it_still_computes_right(tables, form) -> None:  # noqa: F811
    if form == "loop":
        g, dims = small_ensemble(), [{"batch": 1}, {"batch": 37}]
    else:
        spec = {"x": TensorSpec((Dim("batch", min=1, max=40), 3, 5), "float32")}
        g, dims = lower(trace(Stacked(), spec, "stacked"), CompileOptions()), [{"batch": 37}]
    write_table(tables, [entry(key, TUNED, OTHER_CHAIN) for key in {str(k): k for k in chain_keys(g)}.values()],
                arch="sm_80")  # fmt: skip
    sources: dict = {}
    s = schedule_graph(g, SM80, sources=sources)
    assert cells(s)
    for i, k in enumerate(s.kernels):
        if k.kind is KernelKind.RECURRENT_CELL:
            assert dict(k.constexprs)["BLOCK_M"] == 32 and k.num_warps == 2, k.name
            assert sources[i, "sm_80"].source == RELAXED
    for seed, env in enumerate(dims):  # 37 rows: a partial second program of 32
        check(g, feeds(form, g, env, seed=seed), env, tol=TOL, schedule=s)


def test_the_sm90_launch_takes_its_own_tiles(tables) -> None:  # noqa: F811
    g = small_ensemble()
    write_table(tables, [entry(k, TUNED, OTHER_CHAIN) for k in chain_keys(g)[::2]])
    options = SimpleNamespace(targets=("sm_80", "sm_90"), cuda_driver_floor="12.4", tune_dims=())
    s = schedule_graph(g, options)
    for k in cells(s):
        assert dict(k.constexprs)["BLOCK_M"] == BLOCK_M  # sm_80 keeps the heuristic's
        (arch,) = k.arch_launches
        assert arch.arch == "sm_90" and dict(arch.kernel.constexprs)["BLOCK_M"] == 32 and arch.kernel.num_warps == 2
    read_artifact(write_artifact([Variant(g, s)]))  # the reader verifies each arch launch's plan


def test_bundle_candidates_are_the_grid_shrunk_to_the_rows() -> None:
    g = small_ensemble()
    cases = key_cases(g, {"batch": 2}, "lstm", "sm_90", lambda key: key["template"] == "recurrent_cell")
    assert len(cases) == 2  # the two layers' keys
    for case in cases:
        first, *grid = case.candidates
        assert first.heuristic and first.tiles == {"block_m": BLOCK_M, "num_warps": NUM_WARPS}
        # 2 rows: every grid row shrinks to 16, leaving the warps to vary
        assert sorted(c.tiles["num_warps"] for c in grid) == [1, 2, 8]
        for c in grid:
            assert dict(c.kernel.constexprs)["BLOCK_M"] == 16 and c.kernel.num_warps == c.tiles["num_warps"]
    big = {**cases[0].key, "buckets": {"rows": 64}}
    tiles = [tile_to_json(t) for t in grid_tiles(big, "sm_90", cases[0].candidates[0].tiles)]
    assert len(tiles) == len(RECURRENT_GRID) - 1 and {"block_m": 32, "num_warps": 8} in tiles
