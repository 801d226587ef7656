"""The tuned table (aotc/kernels/tuned/): keys and buckets, the lookup order (exact, toolchain relaxed,
heuristic), refusal of malformed, stale and illegal entries (one warning each, the heuristic stands in), and
that an entry really changes the compiled kernel's constexprs while the kernel stays right (interpreter)."""

from __future__ import annotations

import copy
import json
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.frontend.trace import trace
from aotc.ir.ops import Op
from aotc.ir.templates import KernelKind
from aotc.kernels.scheduler import schedule_graph
from aotc.kernels.tuned import EXACT, HEURISTIC, RELAXED, TunedTableWarning, choose, kernel_key, table_tiles
from aotc.kernels.tuned.keys import bucket, tuning_env
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower

CHAIN = {"triton": "3.9.0", "ptxas": "12.9", "ptx_version": 84}
OTHER_CHAIN = {"triton": "3.6.0", "ptxas": "12.8", "ptx_version": 87}
TILES = {"block_m": 16, "block_n": 32, "block_k": 16, "group_m": 4, "num_warps": 2, "num_stages": 2}


class Linear(nn.Module):
    def __init__(self, k: int, n: int, residual: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(k, n)
        self.residual = residual

    def forward(self, x, r=None):
        y = self.fc(x)
        return y + r if self.residual else y


class Attn(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def lowered_linear(k: int = 48, n: int = 40, residual: bool = False, max_rows: int = 100):
    rows = Dim("rows", min=1, max=max_rows)
    inputs = {"x": TensorSpec((rows, k), "float32")}
    if residual:
        inputs["r"] = TensorSpec((rows, n), "float32")
    return lower(trace(Linear(k, n, residual), inputs), CompileOptions(targets=()))


def root_of(graph, op=Op.MATMUL):
    return next(n for n in graph.nodes if n.op is op)


def key_of(graph, op=Op.MATMUL):
    root = root_of(graph, op)
    return kernel_key(graph, root, range(len(graph.nodes)) if op is Op.MATMUL else [graph.nodes.index(root)])


def entry(key, tiles=TILES, chain=CHAIN, gpu="NVIDIA H200", ms=0.5, revision=None):
    kernel = dict(key, revision=key["revision"] if revision is None else revision)
    raw = {"gpu": {"name": gpu, "sm_count": 132}, "toolchain": chain, "kernel": kernel,
           "configs": [{"tiles": tiles, "ms": ms}], "heuristic": {"tiles": None, "ms": 1.0}}  # fmt: skip
    return copy.deepcopy(raw)  # tests edit it


def write_table(folder, entries, arch="sm_90"):
    path = folder / f"{arch}.json"
    path.write_text(json.dumps({"format": 1, "arch": arch, "entries": entries}))
    return path


@pytest.fixture
def tables(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTC_TUNED_DIR", str(tmp_path))
    monkeypatch.delenv("AOTC_TUNED_GPU", raising=False)
    return tmp_path


def test_bucket_is_next_power_of_two():
    assert [bucket(n) for n in (0, 1, 2, 3, 4, 5, 128, 129, 4096, 4097)] == [1, 1, 2, 4, 4, 8, 128, 256, 4096, 8192]


def test_matmul_key_static_dims_exact_dynamic_bucketed():
    g = lowered_linear(k=48, n=40, max_rows=100)
    key = key_of(g)
    assert key["template"] == "matmul" and key["static"] == {"n": 40, "k": 48, "loads": "pointer"}
    assert key["buckets"] == {"rows": 128, "batch": 1}  # 100 rows at most: the 128 bucket
    assert key["dtypes"] == ["float32", "float32", "float32"] and key["precision"] == "ieee"
    assert key["epilogue"] == "vector"  # the bias
    # at a tuning shape of 9 rows instead of the maximum
    root = root_of(g)
    assert kernel_key(g, root, range(len(g.nodes)), tuning_env(g, {"rows": 9}))["buckets"]["rows"] == 16
    assert kernel_key(g, root, [g.nodes.index(root)])["epilogue"] == "none"


def test_matmul_key_residual_epilogue_reads_a_tile():
    assert key_of(lowered_linear(residual=True))["epilogue"] == "tile"


def test_attention_key():
    seq = Dim("seq", min=1, max=300)
    spec = TensorSpec((2, 4, seq, 64), "bfloat16")
    g = lower(trace(Attn(), {"q": spec, "k": spec, "v": spec}), CompileOptions(targets=()))
    key = key_of(g, Op.SDPA)
    assert key["template"] == "attention" and key["precision"] == "default"
    assert key["static"] == {"head_dim": 64, "value_dim": 64, "causal": True, "mask": "none", "layout": "batch2",
                             "loads": "pointer"}  # fmt: skip
    assert key["buckets"] == {"batch": 8, "q_len": 512, "kv_len": 512}
    assert key["dtypes"] == ["bfloat16", "bfloat16"]


def test_lookup_order_exact_then_relaxed_then_heuristic(tables):
    key = key_of(lowered_linear())
    relaxed_tiles = dict(TILES, block_n=64)
    write_table(tables, [entry(key, relaxed_tiles, OTHER_CHAIN), entry(key, TILES, CHAIN)])
    got = choose("matmul", key, "sm_90", CHAIN)
    assert got.source == EXACT and (got.tiles.block_n, got.tiles.group_m, got.tiles.num_warps) == (32, 4, 2)
    got = choose("matmul", key, "sm_90", {"triton": "3.10.0", "ptxas": "13.0", "ptx_version": 90})
    assert got.source == RELAXED and got.tiles.block_n == 64
    assert choose("matmul", key, "sm_90", None).source == RELAXED  # no toolchain here: relaxed only
    other = dict(key, static={"n": 41, "k": 48})
    assert choose("matmul", other, "sm_90", CHAIN).source == HEURISTIC
    assert choose("matmul", dict(key, buckets={"rows": 256, "batch": 1}), "sm_90", CHAIN).source == HEURISTIC
    assert choose("matmul", key, "sm_80", CHAIN).source == HEURISTIC  # no sm_80 table


def test_gpu_choice(tables, monkeypatch):
    key = key_of(lowered_linear())
    write_table(tables, [entry(key, TILES, gpu="NVIDIA H100 80GB HBM3"), entry(key, dict(TILES, block_m=32))])
    assert choose("matmul", key, "sm_90", CHAIN).gpu == "NVIDIA H100 80GB HBM3"  # any GPU: by name
    monkeypatch.setenv("AOTC_TUNED_GPU", "h200")
    assert choose("matmul", key, "sm_90", CHAIN).tiles.block_m == 32
    monkeypatch.setenv("AOTC_TUNED_GPU", "A100")
    assert choose("matmul", key, "sm_90", CHAIN).source == HEURISTIC


def test_malformed_file_is_one_warning(tables):
    (tables / "sm_90.json").write_text("{not json")
    key = key_of(lowered_linear())
    with pytest.warns(TunedTableWarning, match="ignored") as caught:
        assert choose("matmul", key, "sm_90", CHAIN).source == HEURISTIC
        assert choose("matmul", key, "sm_90", CHAIN).source == HEURISTIC
    assert len(caught) == 1


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda e: e["configs"][0].update(ms=-1), "malformed"),
        (lambda e: e["configs"][0].pop("ms"), "malformed"),
        (lambda e: e["kernel"]["buckets"].update(rows=100), "malformed"),
        (lambda e: e["gpu"].update(sm_count=0), "malformed"),
        (lambda e: e["kernel"].update(revision=99), "stale"),
        (lambda e: e["configs"][0]["tiles"].update(block_m=48), "power of two"),
        (lambda e: e["configs"][0]["tiles"].update(block_k=8), "tl.dot"),
        (lambda e: e["configs"][0]["tiles"].update(num_warps=3), "num_warps"),
        (lambda e: e["configs"][0]["tiles"].update(extra=1), "the fields .*, and optionally \\['persistent'\\]"),
        (lambda e: e["configs"][0]["tiles"].update(block_m=256, block_n=256, block_k=256, num_stages=6),
         "shared memory"),
        (lambda e: e["configs"][0]["tiles"].update(block_m=256, block_n=256, block_k=16, num_warps=2),
         "accumulators"),
    ],
)  # fmt: skip
def test_bad_entries_are_ignored_with_one_warning(tables, change, why):
    key = key_of(lowered_linear())
    bad = entry(key)
    change(bad)
    write_table(tables, [bad])
    with pytest.warns(TunedTableWarning, match=why) as caught:
        for _ in range(3):
            assert choose("matmul", key, "sm_90", CHAIN).source == HEURISTIC
    assert len(caught) == 1


def test_a_bad_entry_leaves_a_good_one_usable(tables):
    key = key_of(lowered_linear())
    stale = entry(key, dict(TILES, block_n=64), revision=99)
    write_table(tables, [stale, entry(key, TILES, OTHER_CHAIN)])
    with pytest.warns(TunedTableWarning, match="stale"):
        got = choose("matmul", key, "sm_90", CHAIN)
    assert got.source == RELAXED and got.tiles.block_n == 32


def test_empty_shipped_table_warns_nothing():
    g = lowered_linear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert table_tiles(g, root_of(g), range(len(g.nodes)), "sm_90", None).source == HEURISTIC


def _arch_launch(schedule, arch="sm_90"):
    k = next(k for k in schedule.kernels if k.kind is KernelKind.MATMUL)
    return k, next((v.kernel for v in k.arch_launches if v.arch == arch), k)


def test_entry_changes_the_kernel_and_it_still_computes_right(tables):
    from aotc.kernels.tuned import current_toolchain
    from tests.kernel_layer.contraction_kit import run_kernel

    g = lowered_linear(k=48, n=40, max_rows=100)
    options = SimpleNamespace(targets=("sm_80", "sm_90"), cuda_driver_floor="12.4", tune_dims=())
    before = _arch_launch(schedule_graph(g, options))[1]
    assert dict(before.constexprs)["BLOCK_N"] != TILES["block_n"]
    chain = current_toolchain("sm_90", "12.4")
    write_table(tables, [entry(key_of(g), TILES, chain or OTHER_CHAIN)])
    sources = {}
    base, tuned = _arch_launch(schedule_graph(g, options, sources=sources))
    consts = dict(tuned.constexprs)
    assert (consts["BLOCK_M"], consts["BLOCK_N"], consts["BLOCK_K"]) == (16, 32, 16)
    assert (tuned.num_warps, tuned.num_stages) == (2, 2)
    assert dict(base.constexprs) == dict(_arch_launch(schedule_graph(g, options))[0].constexprs)  # sm_80 as before
    assert sources[0, "sm_90"].source == (EXACT if chain else RELAXED)
    assert sources[0, "sm_80"].source == HEURISTIC
    # the table's kernel, under the interpreter, against numpy at a row count that is not a tile multiple
    rows = 37
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 48)).astype(np.float32)
    out = run_kernel(g, tuned, [x], {"rows": rows})
    w = next(c for name, c in g.constants.items() if c.shape == (40, 48) or c.shape == (48, 40))
    b = next(c for c in g.constants.values() if c.shape == (40,))
    want = x @ (w.T if w.shape == (40, 48) else w) + b
    (got,) = out.values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_explain_and_inspect_json_say_where_tiles_came_from(tables, tmp_path):
    from click.testing import CliRunner

    import aotc
    from aotc_cli.main import cli

    model = Linear(48, 40)
    inputs = {"x": TensorSpec((Dim("rows", min=1, max=100), 48), "float32")}
    options = CompileOptions(targets=())  # no GPU compile: the schedule is sized for sm_80
    plain = aotc.compile(model, inputs, options=options)
    assert "tiles for sm_80: heuristic [no tuned table for sm_80]" in plain.explain()
    write_table(tables, [entry(key_of(lowered_linear()), TILES, OTHER_CHAIN)], arch="sm_80")
    tuned = aotc.compile(model, inputs, options=options)
    assert "tiles for sm_80: table relaxed block_m=16 block_n=32 block_k=16" in tuned.explain()
    path = tmp_path / "m.aotc"
    tuned.save(path)
    result = CliRunner().invoke(cli, ["inspect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["meta"]["tile_sources"]
    assert row["source"] == RELAXED and row["arch"] == "sm_80" and row["tiles"] == TILES
    assert row["gpu"] == "NVIDIA H200" and row["ms"] == 0.5 and row["heuristic_ms"] == 1.0
