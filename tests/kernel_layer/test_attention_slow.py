"""Slow attention checks (run with -m slow or AOTC_RUN_SLOW=1): the full table cross product under
the Triton interpreter, and the ahead-of-time compile of the kernel for sm_80 and sm_90 with no GPU."""

from __future__ import annotations

import itertools

import pytest

from aotc.ir import Op
from aotc.kernels.attention import AttentionConfig, emit_attention
from tests.kernel_layer.contraction_kit import anchor_of, builder_for
from tests.kernel_layer.test_attention import BF16, F16, F32, Case, attention_graph, check_case

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.slow


SHARED_LIMIT = {"sm_80": 163 * 1024, "sm_90": 227 * 1024}
LENGTHS = (1, 17, 128, 1000)
HEAD_DIMS = (32, 64, 80, 128)
# masking x head layout: plain MHA, causal GQA, padding-mask MQA, float-mask MHA
VARIANTS = (
    {},
    {"causal": True, "heads": 4, "kv_heads": 2},
    {"mask": "pad", "heads": 4, "kv_heads": 1},
    {"mask": "float"},
    {"mask": "bool", "heads": 4, "kv_heads": 2},
)
FULL = [
    Case(dt, lq, lk, d, block=(128, 128), **variant)
    for dt, lq, lk, d, variant in itertools.product((F32, F16, BF16), LENGTHS, LENGTHS, HEAD_DIMS, VARIANTS)
]


@pytest.mark.parametrize("case", FULL, ids=str)
def test_attention_cross_product(case: Case) -> None:
    check_case(case)


def _kernels():
    cases = [
        (Case(F16, 17, 17, 64, causal=True, packed=True, batch=2), None),  # heuristics, views of packed QKV
        (Case(BF16, 128, 1000, 128, heads=4, kv_heads=2, mask="bias"), None),  # GQA, float mask, exp path
        (Case(F32, 17, 128, 80, mask="bool"), AttentionConfig(64, 32)),  # padded head dim, IEEE fp32 dots
        (Case(F16, 1, 1000, 256, heads=4, kv_heads=1, mask="pad"), AttentionConfig(16, 32, num_warps=8)),
        (Case(BF16, 1000, 1000, 128, causal=True), "sm_90"),  # the sm_90 heuristics: 128 x 128 tiles, 8 warps
    ]
    out = []
    for i, (case, cfg) in enumerate(cases):
        graph = attention_graph(case)
        node = anchor_of(graph, Op.SDPA)
        arch = cfg if isinstance(cfg, str) else "sm_80"
        config = None if isinstance(cfg, str) else cfg
        out.append(emit_attention(builder_for(graph, node), node, config=config, arch_hint=arch, name=f"attn{i}"))
    return out


def test_attention_compiles_ahead_of_time_for_sm80_and_sm90(tmp_path) -> None:
    from aotc.kernels.aot import AotOptions, compile_kernels

    kernels = _kernels()
    binaries = compile_kernels(kernels, targets=("sm_80", "sm_90"), options=AotOptions(cache_dir=str(tmp_path)))
    assert set(binaries) == {k.name for k in kernels}
    for k in kernels:
        b = binaries[k.name]
        assert sorted(c.arch for c in b.cubins) == ["sm_80", "sm_90"]
        assert all(len(c.data) > 0 for c in b.cubins) and b.ptx
        for c in b.cubins:  # fits the smaller shared memory of the two (A100: 164 KiB per block)
            assert c.meta.shared <= SHARED_LIMIT[c.arch], (k.name, c.arch, c.meta.shared)
