"""Candidate bundles (aotc/kernels/tuned/bundle.py): the grids are legal and shrunk to the problem, each candidate's
kernel carries its tiles, and the file records what the tune step needs to launch it (no compiler there)."""

from __future__ import annotations

import json
import zipfile

import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.frontend.trace import trace
from aotc.ir.launch import SCRATCH_PARAMS, LaunchMeta
from aotc.kernels.cache import Compiled
from aotc.kernels.tuned.bundle import ATTENTION_GRID, grid_tiles, key_cases, write_bundle
from aotc.kernels.tuned.configs import tile_from_json, tile_to_json
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower


class Attn(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class Proj(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 96, dtype="bfloat16")

    def forward(self, x):
        return self.fc(x)


def attention_graph(d=128, seq=4096):
    spec = TensorSpec((2, 4, Dim("seq", min=1, max=seq), d), "bfloat16")
    return lower(trace(Attn(), {"q": spec, "k": spec, "v": spec}), CompileOptions(targets=("sm_90",)))


def matmul_graph():
    x = TensorSpec((Dim("rows", min=1, max=512), 64), "bfloat16")
    return lower(trace(Proj(), {"x": x}), CompileOptions(targets=("sm_90",)))


def test_attention_grid_is_the_hopper_grid_less_what_does_not_fit():
    assert len(ATTENTION_GRID) == 36
    (case,) = key_cases(attention_graph(d=128), {"seq": 4096}, "a")
    heuristic, *grid = case.candidates
    assert heuristic.heuristic and not any(c.heuristic for c in grid)
    # d128: 128x128 at 4 stages (and the like) needs more than sm_90's 227 KiB of shared memory
    assert 20 <= len(grid) < 36
    tiles = [c.tiles for c in case.candidates]
    assert len({json.dumps(t, sort_keys=True) for t in tiles}) == len(tiles)  # the heuristic is not repeated
    for c in case.candidates:
        tile_from_json("attention", c.tiles, case.key, "sm_90")  # every candidate is legal
        consts = dict(c.kernel.constexprs)
        assert (consts["BLOCK_M"], consts["BLOCK_N"]) == (c.tiles["block_m"], c.tiles["block_n"])
        assert (c.kernel.num_warps, c.kernel.num_stages) == (c.tiles["num_warps"], c.tiles["num_stages"])
        assert f"def {c.name}(" in c.kernel.source


def test_grids_shrink_to_small_problems():
    (case,) = key_cases(attention_graph(d=64, seq=32), {"seq": 32}, "a")
    assert all(c.tiles["block_m"] <= 32 and c.tiles["block_n"] <= 32 for c in case.candidates)
    key = dict(case.key, template="matmul", static={"n": 40, "k": 24}, buckets={"rows": 16, "batch": 1},
               dtypes=["float32", "float32", "float32"])  # fmt: skip
    tiles = [tile_to_json(t) for t in grid_tiles(key, "sm_90", {})]
    assert tiles and all(t["block_m"] == 16 and t["block_n"] <= 64 and t["block_k"] == 16 for t in tiles)


def _fake_compiled(cases):
    out = {}
    for case in cases:
        for c in case.candidates:
            k = c.kernel
            meta = LaunchMeta(k.name, "sm_90a", k.num_warps, 1, 0, 0, 1, 0, 1,
                              (*(a.type for a in k.args), *SCRATCH_PARAMS), "3.9.0", "8.4", True)  # fmt: skip
            out[c.name] = Compiled(b"FAKE-CUBIN sm_90a\0", "", meta)
    return out


def test_bundle_file_records_launches(tmp_path):
    g = matmul_graph()
    cases = key_cases(g, {"rows": 300}, "mm")
    compiled = _fake_compiled(cases)
    failing = cases[0].candidates[-1].name
    compiled[failing] = "kernel does not compile for sm_90: boom"
    path = tmp_path / "b.zip"
    index = write_bundle(path, cases, "sm_90", compiled, {"triton": "3.9.0"}, {"candidates": 1}, sources=True)
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        assert json.loads(z.read("index.json")) == index
    (key,) = index["keys"]
    assert key["kernel"]["buckets"]["rows"] == 512 and key["env"] == {"rows": 300}
    by_value = {b["value"]: b for b in key["buffers"]}
    assert sorted(b["bytes"] for b in by_value.values()) == sorted([300 * 64 * 2, 96 * 64 * 2, 96 * 2, 300 * 96 * 2])
    ok = [c for c in key["candidates"] if "error" not in c]
    bad = [c for c in key["candidates"] if "error" in c]
    assert [c["name"] for c in bad] == [failing] and "boom" in bad[0]["error"]
    assert ok[0]["heuristic"] and "kernels.pickle" in names
    for c in ok:
        assert c["cubin"] in names and c["meta"]["params"][-2:] == list(SCRATCH_PARAMS)
        bm = c["tiles"]["block_m"]
        # grid: (row tiles x column tiles) at 300 rows
        assert c["grid"][0] == -(-300 // bm) * -(-96 // c["tiles"]["block_n"])
        ints = [a["int"] for a in c["args"] if "int" in a]
        assert 300 in ints  # the row count is passed as a size
        assert all(a["buffer"] in by_value for a in c["args"] if "buffer" in a)
