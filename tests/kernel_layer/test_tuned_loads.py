"""The load form in a tuned key (aotc/kernels/tuned/keys.py): attention and matmul keys say whether their kernel
loads through tensor descriptors (TMA) or pointers, as the target and toolchain decide, so tiles timed for one
form are never used for the other, even with the toolchain relaxed; the bundle builds a floor's own form."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.frontend.trace import trace
from aotc.ir.ops import Op
from aotc.kernels.tuned import HEURISTIC, RELAXED, current_toolchain, kernel_key, table_tiles
from aotc.kernels.tuned.bundle import key_cases
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from tests.kernel_layer.test_tuned_table import TILES, entry, write_table

OTHER_CHAIN = {"triton": "3.6.0", "ptxas": "12.8", "ptx_version": 87}


class Attn(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class Proj(nn.Module):
    def __init__(self, dtype: str) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 96, bias=False, dtype=dtype)

    def forward(self, x):
        return self.fc(x)


@pytest.fixture
def tables(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTC_TUNED_DIR", str(tmp_path))
    monkeypatch.delenv("AOTC_TUNED_GPU", raising=False)
    return tmp_path


def _attention(dtype="bfloat16", seq=64):
    spec = TensorSpec((1, 2, Dim("seq", min=1, max=seq), 64), dtype)
    return lower(trace(Attn(), {"q": spec, "k": spec, "v": spec}), CompileOptions(targets=("sm_90",)))


def _matmul(dtype="bfloat16"):
    x = TensorSpec((Dim("rows", min=1, max=128), 64), dtype)
    return lower(trace(Proj(dtype), {"x": x}), CompileOptions(targets=("sm_90",)))


def _key(graph, target):
    i, root = next((i, n) for i, n in enumerate(graph.nodes) if n.op in (Op.SDPA, Op.MATMUL))
    return kernel_key(graph, root, [i], None, None, target)


@pytest.mark.parametrize("build", [_attention, _matmul])
@pytest.mark.parametrize(
    "target,want",
    [((90, 86), "descriptor"), ((90, 87), "descriptor"), ((90, 84), "pointer"), ((80, 87), "pointer"),
     ((90, None), "pointer"), (None, "pointer")],
)  # fmt: skip
def test_key_names_the_load_form(build, target, want):
    assert _key(build(), target)["static"]["loads"] == want


@pytest.mark.parametrize("build", [_attention, _matmul])
def test_fp32_operands_keep_pointer_loads_in_the_key(build):
    # a descriptor load may round fp32 to tf32, so fp32 kernels keep pointers on every target
    assert _key(build("float32"), (90, 90))["static"]["loads"] == "pointer"


def _floor_with_tma():
    chain = current_toolchain("sm_90", "12.8")
    if chain is None or chain["ptx_version"] < 86:
        pytest.skip("no ptxas here builds sm_90 at PTX 8.6+")
    return chain


def test_an_entry_for_pointer_loads_is_not_used_for_the_descriptor_form(tables):
    _floor_with_tma()
    g = _matmul()
    i, root = next((i, n) for i, n in enumerate(g.nodes) if n.op is Op.MATMUL)
    pointer_key = _key(g, (90, 84))
    mm_tiles = dict(TILES, block_m=64, block_n=64, block_k=32, num_warps=4)
    write_table(tables, [entry(pointer_key, mm_tiles, OTHER_CHAIN)])
    at = {floor: SimpleNamespace(cuda_driver_floor=floor, tune_dims=()) for floor in ("12.4", "12.8")}
    # the default floor builds the pointer form: the entry, with the toolchain relaxed
    assert table_tiles(g, root, [i], "sm_90", at["12.4"]).source == RELAXED
    # a 12.8 floor builds the descriptor form: an entry timed for pointers says nothing about it
    got = table_tiles(g, root, [i], "sm_90", at["12.8"])
    assert got.source == HEURISTIC and got.note == "no table entry for this key"
    write_table(tables, [entry(_key(g, (90, 87)), mm_tiles, OTHER_CHAIN)])
    assert table_tiles(g, root, [i], "sm_90", at["12.8"]).source == RELAXED
    assert table_tiles(g, root, [i], "sm_90", at["12.4"]).source == HEURISTIC


def test_bundle_builds_the_floors_own_form():
    _floor_with_tma()
    g = _attention()
    (plain,) = key_cases(g, {"seq": 64}, "a")
    (tma,) = key_cases(g, {"seq": 64}, "a", floor="12.8")
    assert plain.key["static"]["loads"] == "pointer" and tma.key["static"]["loads"] == "descriptor"
    assert {k: v for k, v in plain.key["static"].items() if k != "loads"} == {
        k: v for k, v in tma.key["static"].items() if k != "loads"
    }
    assert all("make_tensor_descriptor" not in c.kernel.source for c in plain.candidates)
    assert all("make_tensor_descriptor" in c.kernel.source for c in tma.candidates)
    assert len(tma.candidates) > 1  # the heuristic's and the grid's
