"""The attention template compiled here for sm_90a (no GPU) and read back: per loop body, the SASS ops of the
softmax (cuobjdump from Triton's own CUDA tools), and the heuristic tiles' registers and shared memory.

Figures read this way (bf16, d64, a dynamic length, 128 x 64 tiles, 4 warps, 3 stages: 64 scores and 64
accumulator elements per thread per block): the key loop before the split and the fold held FFMA 4, FMUL 128
(the scale, then the rescale), FSEL 68 (the key mask), FADD 136 and MUFU.EX2 68; the unmasked main loop now
holds FFMA 68 (``s * qk_scale - m``), FMUL 68 (the rescale only), FSEL 0, FADD 72 and MUFU.EX2 68, and the
masked tail the same plus FSEL 68.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from aotc.ir import Op
from aotc.kernels.attention import emit_attention
from tests.kernel_layer.contraction_kit import anchor_of, builder_for
from tests.kernel_layer.test_attention import BF16, Case, attention_graph

triton = pytest.importorskip("triton")

SHARED_LIMIT = 227 * 1024  # the most dynamic shared memory one block may take on sm_90
OPS = ("FFMA", "FMUL", "FSEL", "FADD", "MUFU.EX2", "HGMMA")
# the benchmark's keys: b4 h16, a dynamic length, head dim 64 and 128, causal or not
KEYS = [(d, causal) for d in (64, 128) for causal in (False, True)]


def _cuobjdump() -> str:
    found = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    path = str(found) if found.exists() else shutil.which("cuobjdump")
    if path is None:
        pytest.skip("no cuobjdump (Triton's NVIDIA tools or a CUDA toolkit)")
    return path


def _dump(cubin: bytes, flag: str, tmp: Path) -> str:
    f = tmp / "k.cubin"
    f.write_bytes(cubin)
    return subprocess.run([_cuobjdump(), flag, str(f)], capture_output=True, text=True, check=True).stdout


def loop_bodies(sass: str) -> list[dict[str, int]]:
    """Per loop (a backward branch), how many of each of ``OPS`` its body holds, in address order."""
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", sass)]
    out = []
    for addr, text in ins:
        m = re.search(r"\bBRA\s+0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < addr:
            body = [t for a, t in ins if int(m.group(1), 16) <= a <= addr]
            out.append({op: sum(bool(re.search(rf"(^|[\s}}]){re.escape(op)}\b", t)) for t in body) for op in OPS})
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from aotc.kernels.aot import AotOptions, compile_kernels

    kernels = []
    for d, causal in KEYS:
        graph = attention_graph(Case(BF16, 17, 17, d, heads=16, kv_heads=16, batch=4, causal=causal))
        node = anchor_of(graph, Op.SDPA)
        name = f"attn_d{d}{'_causal' if causal else ''}"
        kernels.append(emit_attention(builder_for(graph, node), node, arch_hint="sm_90", name=name))
    cache = tmp_path_factory.mktemp("cache")
    binaries = compile_kernels(kernels, targets=("sm_90",), options=AotOptions(cache_dir=str(cache)))
    return {k.name: (k, binaries[k.name].cubins[0]) for k in kernels}


@pytest.mark.parametrize("d,causal", KEYS)
def test_the_main_loop_takes_one_ffma_and_no_select_per_score(compiled, tmp_path, d: int, causal: bool) -> None:
    k, cubin = compiled[f"attn_d{d}{'_causal' if causal else ''}"]
    c = dict(k.constexprs)
    threads = 32 * k.num_warps
    scores, acc = c["BLOCK_M"] * c["BLOCK_N"] // threads, c["BLOCK_M"] * c["BLOCK_E"] // threads
    bodies = loop_bodies(_dump(cubin.data, "-sass", tmp_path))
    assert len(bodies) == 2, bodies  # the unmasked loop, then the tail (causal: the diagonal blocks)
    main, edge = sorted(bodies, key=lambda b: b["FSEL"])
    assert main["FSEL"] == 0 and edge["FSEL"] >= scores, bodies
    for body in bodies:
        assert body["FFMA"] >= scores and body["MUFU.EX2"] >= scores and body["HGMMA"] > 0, body
        assert body["FMUL"] <= acc + 8, body  # the rescale of acc only: the scale rides in the exponent's FFMA


@pytest.mark.parametrize("d,causal", KEYS)
def test_the_hopper_tiles_fit_without_spills(compiled, tmp_path, d: int, causal: bool) -> None:
    k, cubin = compiled[f"attn_d{d}{'_causal' if causal else ''}"]
    usage = _dump(cubin.data, "-res-usage", tmp_path)
    res = {m[0]: int(m[1]) for m in re.findall(r"\b(REG|STACK|LOCAL):(\d+)", usage)}
    assert res["REG"] <= 255 and res["STACK"] == 0 and res["LOCAL"] == 0, (k.name, usage)
    assert 0 < cubin.meta.shared <= SHARED_LIMIT and cubin.meta.num_warps == k.num_warps, (k.name, cubin.meta)
    assert cubin.meta.arch == "sm_90a"
