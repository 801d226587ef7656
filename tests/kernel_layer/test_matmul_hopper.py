"""The matmul template on sm_90: tiles chosen per shape to fill the SMs' waves, the small-M form (at most 64
rows: narrow column tiles, many CTAs), the ``tf32x3`` precision mode, and the persistent form (a fixed grid of
programs looping over the grouped tile order, bounded by the reader's source check).

The tile tests compute each choice's wave efficiency here, from the rule (``tiles / (waves * SMs)``), and check
the choice against the rule's own statement, never a remembered outcome. Kernels run under the Triton
interpreter against the cpu backend at odd and aligned sizes; test_matmul_aot.py compiles them for sm_90a and
reads the PTX.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("triton")

from aotc.errors import ShapeError, UnsupportedError
from aotc.ir import DType, Op, Symbol, TensorType
from aotc.ir.symbolic import sym
from aotc.ir.tiles import (
    MIN_WAVE_EFFICIENCY,
    SM90_SMALL_M_BLOCK_N,
    SM90_SMS,
    SM90_TILES,
    SMALL_M_ROWS,
    TF32X3_MAX_AREA,
    TileConfig,
    matmul_config,
)
from aotc.kernels.matmul import PERSISTENT_PROGRAMS, emit_matmul
from aotc.kernels.scheduler import schedule_graph
from aotc.lowering.options import CompileOptions
from aotc.lowering.pipeline import lower
from tests.graph_kit import make_graph
from tests.kernel_layer.contraction_graphs import linear_graph, matmul_graph
from tests.kernel_layer.contraction_kit import (
    anchor_of,
    builder_for,
    check_kernel,
    epilogue_of,
    random_feeds,
    run_kernel,
)

F32, BF16 = DType.float32, DType.bfloat16
GPT2_N = (768, 2304, 3072, 50257)  # GPT-2-small: attn.c_proj / mlp.c_proj, qkv, mlp.c_fc, the lm head
OLD_SM90 = (128, 256)  # the one tile every sm_90 product took before


def _efficiency(m: int, n: int, bm: int, bn: int) -> float:
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    return tiles / (math.ceil(tiles / SM90_SMS) * SM90_SMS)


def _busiest_sm_work(m: int, n: int, bm: int, bn: int) -> int:
    return math.ceil(math.ceil(m / bm) * math.ceil(n / bn) / SM90_SMS) * bm * bn


@pytest.mark.parametrize("m,n,k", [(m, n, 768) for m in (128, 8192) for n in GPT2_N] + [(8192, 8192, 8192)])
def test_sm90_tile_fills_the_waves(m, n, k):
    cfg = matmul_config(m, n, k, BF16, "sm_90")
    eff = _efficiency(m, n, cfg.block_m, cfg.block_n)
    effs = [_efficiency(m, n, t[0], t[1]) for t in SM90_TILES]
    good = [t for t, e in zip(SM90_TILES, effs) if e >= MIN_WAVE_EFFICIENCY]
    if good:
        # the largest tile that fills the waves well: none larger in the list does
        assert (cfg.block_m, cfg.block_n) == good[0][:2], (cfg, effs)
    else:
        least = min(_busiest_sm_work(m, n, t[0], t[1]) for t in SM90_TILES)
        assert _busiest_sm_work(m, n, cfg.block_m, cfg.block_n) == least, (cfg, effs)
    # never worse than the one 128x256 tile, and the big GPT-2 shapes (and 8192^3) fill their waves
    assert eff >= _efficiency(m, n, *OLD_SM90)
    if m == 8192:
        assert eff >= MIN_WAVE_EFFICIENCY
    # every choice is one of the table's, and its pipeline fits Hopper's shared memory
    assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps, cfg.num_stages) in SM90_TILES
    assert (cfg.block_m + cfg.block_n) * cfg.block_k * 2 * cfg.num_stages <= 227 * 1024


@pytest.mark.parametrize("m", [1, 5, 16, 17, 64])
@pytest.mark.parametrize("n", [*GPT2_N, 100])
def test_small_m_spreads_columns_over_one_wave(m, n):
    cfg = matmul_config(m, n, 768, BF16, "sm_90")
    assert cfg.block_m >= min(m, SMALL_M_ROWS) and cfg.block_m <= SMALL_M_ROWS and cfg.block_m < 2 * max(m, 16)
    ctas = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n)
    widths = [b for b in SM90_SMALL_M_BLOCK_N if b <= cfg.block_n]
    # the widest column tile that fills one wave; the narrowest when none does (then it is capped at N)
    if ctas >= SM90_SMS:
        wider = [b for b in SM90_SMALL_M_BLOCK_N if b > cfg.block_n]
        assert all(math.ceil(m / cfg.block_m) * math.ceil(n / b) < SM90_SMS for b in wider)
    else:
        assert widths[-1] == SM90_SMALL_M_BLOCK_N[-1] or cfg.block_n >= n
    # a full wave, or at least as many CTAs as 128-column tiles give (sm_80's small-M tile, and sm_90's before)
    assert ctas >= min(SM90_SMS, math.ceil(m / cfg.block_m) * math.ceil(n / 128))
    if n >= 16 * SM90_SMS:
        assert ctas >= SM90_SMS


def test_fp32_tiles_by_precision():
    ieee = matmul_config(8192, 768, 768, F32, "sm_90")
    assert ieee == matmul_config(8192, 768, 768, F32, "sm_80")  # FMA dots: unchanged, sm_80's tile and K step 16
    assert ieee.block_k == 16
    for precision in ("tf32", "tf32x3"):
        tc = matmul_config(8192, 768, 768, F32, "sm_90", precision=precision)
        half = matmul_config(8192, 768, 768, BF16, "sm_90")
        # the tensor-core tile of a 16-bit product, half as deep in K (an element takes twice the shared memory)
        assert (tc.block_m, tc.block_n, tc.block_k * 2) == (half.block_m, half.block_n, half.block_k)
    # the lm head: tf32 takes the 16-bit product's widest tile; tf32x3 (split operands in registers) no more
    # than TF32X3_MAX_AREA outputs, the largest such tile that fills the waves
    lm = {p: matmul_config(8192, 50257, 768, F32, "sm_90", precision=p) for p in ("tf32", "tf32x3")}
    assert lm["tf32"].block_n == matmul_config(8192, 50257, 768, BF16, "sm_90").block_n
    fits = [t for t in SM90_TILES if t[0] * t[1] <= TF32X3_MAX_AREA]
    good = [t for t in fits if _efficiency(8192, 50257, t[0], t[1]) >= MIN_WAVE_EFFICIENCY]
    assert (lm["tf32x3"].block_m, lm["tf32x3"].block_n) == good[0][:2]


# The small-M form (16..64 rows, columns 16..128 wide, K step 128) under the interpreter, odd and aligned sizes.
@pytest.mark.parametrize("m,n,k", [(1, 777, 300), (17, 1000, 129), (64, 512, 256), (3, 50, 1)])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_small_m_kernel_matches_cpu(m, n, k, dtype):
    g = matmul_graph((m, k), (k, n), dtype)
    node = anchor_of(g, Op.MATMUL)
    precision = "tf32" if dtype is F32 else "ieee"  # fp32 on tensor cores takes the same small-M tiles
    kern = emit_matmul(builder_for(g, node), node, arch_hint="sm_90", precision=precision)
    cfg = matmul_config(m, n, k, dtype, "sm_90", precision=precision)
    assert dict(kern.constexprs)["BLOCK_N"] == cfg.block_n and dict(kern.constexprs)["BLOCK_M"] == cfg.block_m
    check_kernel(g, kern)


def test_small_m_linear_folds_batch_into_rows():
    g = linear_graph(BF16, act=(Op.GELU, {}))  # (3, 7, 40) @ (24, 40)^T: 21 rows, a transposed weight
    node = anchor_of(g, Op.MATMUL)
    kern = emit_matmul(builder_for(g, node), node, epilogue_of(g, node), arch_hint="sm_90")
    assert dict(kern.constexprs)["BLOCK_M"] == 32
    check_kernel(g, kern)


def _schedule(graph, precision: str):
    options = CompileOptions(precision=precision, targets=("sm_90",), split_k=False, matmul_padding=False)
    return schedule_graph(lower(graph, options), options)


def _fp32_mlp():
    def body(b, x, w1, w2):
        return [b.op(Op.MATMUL, b.op(Op.RELU, b.op(Op.MATMUL, x, w1)), w2)]

    shapes = {"x": (33, 48), "w1": (48, 80), "w2": (80, 24)}
    return make_graph({k: TensorType(F32, s) for k, s in shapes.items()}, body)


@pytest.mark.parametrize("precision,want", [("fp32", "ieee"), ("tf32", "tf32"), ("tf32x3", "tf32x3")])
def test_precision_mode_reaches_every_fp32_dot(precision, want):
    sources = [k.source for k in _schedule(_fp32_mlp(), precision).kernels if "tl.dot(" in k.source]
    assert len(sources) == 2
    for src in sources:
        assert src.count("input_precision=") == 1 and f'input_precision="{want}"' in src
    if precision != "tf32x3":
        assert not any("tf32x3" in s for s in sources)


def test_tf32x3_under_the_interpreter_against_fp64():
    """The interpreter computes a tl.dot in float32 whatever its input precision (it does not split operands
    into tf32 parts), so this checks the kernel's indexing and accumulation in the mode, at fp32-class error:
    measured max |err| / max |ref| = 2.3e-7 at 100x300x70. On tensor cores 3xTF32 drops the lo*lo product
    (about 2^-22 relative per product); the README gives the emulated figures."""
    g = matmul_graph((100, 300), (300, 70))
    node = anchor_of(g, Op.MATMUL)
    kern = emit_matmul(builder_for(g, node), node, config=TileConfig(64, 64, 32), precision="tf32x3")
    assert 'input_precision="tf32x3"' in kern.source
    a, b = random_feeds(g, {})
    (out,) = run_kernel(g, kern, [a, b], {}).values()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(out - ref).max() / np.abs(ref).max() < 1e-6


def test_bad_input_precision_is_a_typed_error():
    g = matmul_graph((16, 16), (16, 16))
    node = anchor_of(g, Op.MATMUL)
    with pytest.raises(UnsupportedError, match=r"input precision 'tf64': expected one of"):
        emit_matmul(builder_for(g, node), node, precision="tf64")
    with pytest.raises(ShapeError, match="input_precision"):
        make_graph({"a": TensorType(F32, (4, 4))}, lambda b, x: [b.op(Op.MATMUL, x, x, input_precision="bf16x9")])
    with pytest.raises(ShapeError, match="disagree"):
        make_graph(
            {"a": TensorType(F32, (4, 4))},
            lambda b, x: [b.op(Op.MATMUL, x, x, allow_tf32=True, input_precision="tf32x3")],
        )
    with pytest.raises(ShapeError, match="float32 inputs"):
        make_graph({"a": TensorType(BF16, (4, 4))}, lambda b, x: [b.op(Op.MATMUL, x, x, input_precision="tf32x3")])


@pytest.mark.parametrize("precision,want", [("fp32", "ieee"), ("tf32", "tf32"), ("tf32x3", "tf32x3")])
def test_tuned_key_names_the_dot_precision(precision, want):
    from aotc.kernels.tuned.keys import kernel_key

    options = CompileOptions(precision=precision, targets=("sm_90",), split_k=False, matmul_padding=False)
    g = lower(_fp32_mlp(), options)
    keys = [kernel_key(g, n, [i]) for i, n in enumerate(g.nodes) if n.op is Op.MATMUL]
    assert len(keys) == 2 and all(k["precision"] == want for k in keys)


# -- the persistent form: a fixed grid, each program looping over tiles -------------------------------------------


def _persistent(graph, config=None):
    config = config or TileConfig(32, 32, 32)
    node = anchor_of(graph, Op.MATMUL)
    return emit_matmul(builder_for(graph, node), node, epilogue_of(graph, node), config=config, persistent=True)


@pytest.mark.parametrize(
    "m,n,k,dtype", [(100, 70, 50, F32), (64, 64, 64, BF16), (1, 300, 17, F32), (257, 129, 96, BF16)]
)
def test_persistent_matmul_matches_cpu(m, n, k, dtype):
    g = matmul_graph((m, k), (k, n), dtype)
    kern = _persistent(g)
    assert "for tile in range(pid, num_tiles, NUM_SMS):" in kern.source
    assert kern.grid == (PERSISTENT_PROGRAMS, 1, 1) and dict(kern.constexprs)["NUM_SMS"] == PERSISTENT_PROGRAMS
    tiles = math.ceil(m / 32) * math.ceil(n / 32)
    assert tiles != PERSISTENT_PROGRAMS  # fewer tiles than programs (idle ones) or more (programs loop)
    check_kernel(g, kern)


def test_persistent_linear_with_epilogue_and_symbolic_rows_matches_cpu_and_is_bounded():
    from aotc.artifact.source_bounds import check_source

    g = linear_graph(BF16, act=(Op.GELU, {}), residual=True)  # (3, 7, 40) @ W^T + bias, GELU, + residual
    kern = _persistent(g, TileConfig(16, 16, 16))  # 2 x 2 tiles... of 21 rows x 24 columns: looped by 132
    check_kernel(g, kern)
    check_source(kern, {}, "persistent linear")
    seq = Symbol("seq", 1, 4096, multiple_of=1)
    gs = matmul_graph((sym("seq"), 48), (48, 40), symbols=(seq,))
    big = _persistent(gs, TileConfig(16, 16, 16))  # up to 256 x 3 tiles: every program loops at seq 4096
    for rows in (1, 17, 2000, 4096):
        check_source(big, {"seq": rows}, "persistent matmul")
    check_kernel(gs, big, {"seq": 53})


def test_the_reader_refuses_a_persistent_loop_past_its_tiles():
    import dataclasses

    from aotc.artifact.source_bounds import check_source
    from aotc.errors import ArtifactError

    kern = _persistent(matmul_graph((128, 64), (64, 96)))  # whole tiles: no masks, the loop's range bounds it
    assert "mask" not in kern.source
    check_source(kern, {}, "as compiled")
    loop = "for tile in range(pid, num_tiles, NUM_SMS):"
    edited = dataclasses.replace(kern, source=kern.source.replace(loop, loop.replace("num_tiles", "num_tiles + 4")))
    with pytest.raises(ArtifactError, match=r"a_ptr|b_ptr|out_ptr"):
        check_source(edited, {}, "edited")


def test_a_batched_product_has_no_persistent_form():
    g = matmul_graph((4, 32, 16), (4, 16, 8))  # batch on the grid: B varies over it
    with pytest.raises(UnsupportedError, match="persistent matmul: a product batched"):
        _persistent(g)
