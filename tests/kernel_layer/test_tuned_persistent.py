"""The persistent matmul from the tuned table: a config's optional ``persistent`` field (configs.py), the bundle's
persistent candidates where the product has more tiles than the fixed grid has programs, and a table entry that
asks for it giving the persistent kernel (132 programs looping over tiles), which computes right (interpreter)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from aotc import Dim, TensorSpec, nn
from aotc.errors import UnsupportedError
from aotc.frontend.trace import trace
from aotc.ir.templates import KernelKind
from aotc.ir.tiles import SM90_SMS, TileConfig
from aotc.kernels.scheduler import schedule_graph
from aotc.kernels.tuned import EXACT, HEURISTIC, RELAXED, TunedTableWarning, current_toolchain
from aotc.kernels.tuned.bundle import grid_tiles
from aotc.kernels.tuned.configs import tile_from_json, tile_to_json
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from tests.kernel_layer.test_tuned_table import OTHER_CHAIN, TILES, entry, key_of, lowered_linear, write_table

OPTIONS = SimpleNamespace(targets=("sm_80", "sm_90"), cuda_driver_floor="12.4", tune_dims=())


@pytest.fixture
def tables(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTC_TUNED_DIR", str(tmp_path))
    monkeypatch.delenv("AOTC_TUNED_GPU", raising=False)
    return tmp_path


class Bmm(nn.Module):
    def forward(self, a, b):
        return a @ b


def test_config_field_is_optional_and_checked():
    key = key_of(lowered_linear())
    assert tile_from_json("matmul", TILES, key, "sm_90").persistent is False
    tile = tile_from_json("matmul", dict(TILES, persistent=True), key, "sm_90")
    assert tile.persistent is True and tile_to_json(tile) == dict(TILES, persistent=True)
    assert "persistent" not in tile_to_json(TileConfig(16, 32, 16))  # off: the old rows, unchanged
    with pytest.raises(UnsupportedError, match="persistent=1: expected true or false"):
        tile_from_json("matmul", dict(TILES, persistent=1), key, "sm_90")
    with pytest.raises(UnsupportedError, match="batched over 4 entries on the grid"):
        tile_from_json("matmul", dict(TILES, persistent=True), dict(key, buckets={"rows": 128, "batch": 4}), "sm_90")
    conv = dict(key, template="conv")
    with pytest.raises(UnsupportedError, match="exactly the fields"):
        tile_from_json("conv", dict(TILES, persistent=True), conv, "sm_90")


def test_bundle_grid_has_persistent_candidates_only_past_one_grid_of_tiles():
    big = {"template": "matmul", "dtypes": ["bfloat16"] * 3, "static": {"n": 768, "k": 768, "loads": "pointer"},
           "buckets": {"rows": 8192, "batch": 1}}  # fmt: skip
    tiles = grid_tiles(big, "sm_90", {})
    persistent = [t for t in tiles if t.persistent]
    assert [(t.block_m, t.block_n) for t in persistent] == [(128, 256), (128, 128), (64, 128), (64, 64)]
    assert all(-(-8192 // t.block_m) * -(-768 // t.block_n) > SM90_SMS for t in persistent)
    small = dict(big, buckets={"rows": 128, "batch": 1})  # 1x128 GPT-2: at most 16 tiles of 64x64
    assert not any(t.persistent for t in grid_tiles(small, "sm_90", {}))
    batched = dict(big, buckets={"rows": 8192, "batch": 4})
    assert not any(t.persistent for t in grid_tiles(batched, "sm_90", {}))


def _matmul_launch(schedule, arch="sm_90"):
    k = next(k for k in schedule.kernels if k.kind is KernelKind.MATMUL)
    return k, next((v.kernel for v in k.arch_launches if v.arch == arch), k)


def test_table_entry_gives_the_persistent_kernel_and_it_computes_right(tables):
    from tests.kernel_layer.contraction_kit import run_kernel

    g = lowered_linear(k=48, n=40, max_rows=100)
    base, before = _matmul_launch(schedule_graph(g, OPTIONS))
    assert "NUM_SMS" not in dict(before.constexprs)
    chain = current_toolchain("sm_90", "12.4")
    write_table(tables, [entry(key_of(g), dict(TILES, persistent=True), chain or OTHER_CHAIN)])
    sources = {}
    base, tuned = _matmul_launch(schedule_graph(g, OPTIONS, sources=sources))
    assert sources[0, "sm_90"].source == (EXACT if chain else RELAXED) and sources[0, "sm_80"].source == HEURISTIC
    assert dict(tuned.constexprs)["NUM_SMS"] == SM90_SMS and tuned.grid == (SM90_SMS, 1, 1)
    assert "for tile in range(pid, num_tiles, NUM_SMS)" in tuned.source
    assert "NUM_SMS" not in dict(base.constexprs)  # sm_80 keeps the heuristic's tiled grid
    rows = 37  # not a tile multiple: 3 tiles of 16 rows x 2 of 32 columns for 132 programs
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 48)).astype(np.float32)
    (got,) = run_kernel(g, tuned, [x], {"rows": rows}).values()
    w = next(c for c in g.constants.values() if c.shape in ((40, 48), (48, 40)))
    b = next(c for c in g.constants.values() if c.shape == (40,))
    want = x @ (w.T if w.shape == (40, 48) else w) + b
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_persistent_entry_for_a_product_batched_on_the_grid_is_refused(tables):
    batch = Dim("batch", min=1, max=4)
    inputs = {"a": TensorSpec((batch, 32, 48), "float32"), "b": TensorSpec((batch, 48, 40), "float32")}
    g = lower(trace(Bmm(), inputs), CompileOptions(targets=()))
    key = key_of(g)
    assert key["buckets"]["batch"] == 4
    write_table(tables, [entry(key, dict(TILES, persistent=True), OTHER_CHAIN)])
    with pytest.warns(TunedTableWarning, match="not a legal matmul tile here: .*batched over 4"):
        sources = {}
        _, kernel = _matmul_launch(schedule_graph(g, OPTIONS, sources=sources))
    assert sources[0, "sm_90"].source == HEURISTIC and "NUM_SMS" not in dict(kernel.constexprs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per entry: the next compile says nothing
        schedule_graph(g, OPTIONS)
