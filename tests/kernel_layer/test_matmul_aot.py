"""Each contraction template compiles ahead of time for sm_80 and sm_90 with no GPU (KERNELS.md):
a matmul with a bias + GELU epilogue (fp16), an fp32 batched matmul, a full-tile fp16 matmul, the
conv implicit GEMM with its batch-norm + ReLU epilogue, and the direct depthwise conv; on sm_90a, a tf32x3 fp32
matmul runs on wgmma where the IEEE one stays on FMA units, and the small-M form compiles to tensor-core MMAs."""

from __future__ import annotations

import importlib.util

import pytest

from aotc.ir import DType, Op, Symbol
from aotc.ir.symbolic import sym
from aotc.ir.tiles import TileConfig
from aotc.kernels.conv import emit_conv
from aotc.kernels.matmul import emit_matmul
from tests.kernel_layer.contraction_graphs import CONV_CASES, conv_bn_relu_graph, conv_graph, linear_graph, matmul_graph
from tests.kernel_layer.contraction_kit import anchor_of, builder_for, epilogue_of

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.slow
BF16 = DType.bfloat16


def _kernels():
    f16, f32 = DType.float16, DType.float32
    seq = Symbol("seq", 1, 4096, multiple_of=16)
    matmuls = [
        linear_graph(f16, act=(Op.GELU, {})),  # transposed weight, bias + GELU epilogue
        matmul_graph((4, 64, 32), (4, 32, 48), f32),  # batch on grid y, IEEE fp32
        matmul_graph((512, 256), (256, 512), f16),  # full-size tiles, 4 K steps to pipeline
        matmul_graph((2, sym("seq"), 64), (64, 32), f16, symbols=(seq,)),  # symbolic rows, hinted
        matmul_graph((20, 30), (30, 10), DType.int32),  # register product, no tl.dot
    ]
    out = []
    for g in matmuls:
        node = anchor_of(g, Op.MATMUL)
        out.append(emit_matmul(builder_for(g, node), node, epilogue_of(g, node), arch_hint="sm_90"))
    convs = [
        conv_bn_relu_graph(f32),
        conv_graph(*CONV_CASES["3x3_same"][:2], f16, **CONV_CASES["3x3_same"][2]),
        conv_graph(*CONV_CASES["depthwise"][:2], **CONV_CASES["depthwise"][2]),
    ]
    for g in convs:
        node = anchor_of(g, Op.CONV)
        out.append(emit_conv(builder_for(g, node), node, epilogue_of(g, node), config=TileConfig(64, 16, 32)))
    return out


def _compiled_function(kernel, tmp_path):
    path = tmp_path / f"{kernel.name}.py"
    path.write_text(kernel.source)
    spec = importlib.util.spec_from_file_location(f"aot_{kernel.name}_{id(kernel)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, kernel.name)


@pytest.mark.parametrize("cc", [80, 90])
def test_templates_compile_for_target(cc, tmp_path):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for kernel in _kernels():
        fn = _compiled_function(kernel, tmp_path)
        signature = {a.name: a.type for a in kernel.args} | {c: "constexpr" for c, _ in kernel.constexprs}
        attrs = {(i,): [["tt.divisibility", 16]] for i in kernel.divisible}
        src = ASTSource(fn=fn, signature=signature, constexprs=dict(kernel.constexprs), attrs=attrs)
        options = {"num_warps": kernel.num_warps, "num_stages": kernel.num_stages, "enable_fp_fusion": True}
        compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)
        assert compiled.asm["cubin"] and ".entry " + kernel.name in compiled.asm["ptx"]
        ptx = compiled.asm["ptx"]
        if "tl.dot" in kernel.source and "tl.float16" in kernel.source:
            assert "mma" in ptx  # 16-bit dots run on tensor cores; IEEE fp32 dots stay on FMA units
        if "range(0, 256, BLOCK_K)" in kernel.source and cc == 90:
            assert "wgmma" in ptx  # a full-size tile uses Hopper's warpgroup MMA, pipelined (hints given):
            c = dict(kernel.constexprs)  # its shared memory holds more than one stage of A and B tiles
            assert compiled.metadata.shared >= 2 * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * 2


def _compile_sm90(kernel, tmp_path):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _compiled_function(kernel, tmp_path)
    signature = {a.name: a.type for a in kernel.args} | {c: "constexpr" for c, _ in kernel.constexprs}
    attrs = {(i,): [["tt.divisibility", 16]] for i in kernel.divisible}
    src = ASTSource(fn=fn, signature=signature, constexprs=dict(kernel.constexprs), attrs=attrs)
    options = {"num_warps": kernel.num_warps, "num_stages": kernel.num_stages, "enable_fp_fusion": True}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _resources(compiled, tmp_path) -> dict[str, int]:
    """REG, STACK, ... of a compiled kernel's cubin, as cuobjdump -res-usage prints them (Triton bundles it)."""
    import re
    import subprocess
    from pathlib import Path

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    out = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in re.findall(r"(\w+):(\d+)", out[out.index("REG:") :])}


def test_sm90a_compiles_tf32x3_to_wgmma_and_ieee_to_fma(tmp_path):
    g = matmul_graph((8192, 768), (768, 50257))  # GPT-2's fp32 lm head
    node = anchor_of(g, Op.MATMUL)
    ptx = {}
    for precision in ("ieee", "tf32x3"):
        kern = emit_matmul(builder_for(g, node), node, arch_hint="sm_90", precision=precision)
        compiled = _compile_sm90(kern, tmp_path)
        ptx[precision] = compiled.asm["ptx"]
        if precision == "tf32x3":
            # its heuristic tile fits: shared memory within Hopper's 227 KiB, no register spills (stack 0)
            assert compiled.metadata.shared <= 227 * 1024
            use = _resources(compiled, tmp_path)
            assert use["REG"] <= 255 and use["STACK"] == 0 and use["LOCAL"] == 0, use
    assert "wgmma.mma_async" in ptx["tf32x3"] and ".tf32" in ptx["tf32x3"]
    assert "wgmma" not in ptx["ieee"] and "mma" not in ptx["ieee"]


def test_sm90a_compiles_the_small_m_form(tmp_path):
    g = matmul_graph((1, 768), (768, 2304), BF16)
    node = anchor_of(g, Op.MATMUL)
    kern = emit_matmul(builder_for(g, node), node, arch_hint="sm_90")
    compiled = _compile_sm90(kern, tmp_path)
    assert "mma" in compiled.asm["ptx"]


def test_sm90a_compiles_the_persistent_form(tmp_path):
    g = matmul_graph((8192, 768), (768, 2304), BF16)
    node = anchor_of(g, Op.MATMUL)
    kern = emit_matmul(builder_for(g, node), node, arch_hint="sm_90", persistent=True)
    compiled = _compile_sm90(kern, tmp_path)
    assert "wgmma.mma_async" in compiled.asm["ptx"] and compiled.metadata.shared <= 227 * 1024
    use = _resources(compiled, tmp_path)
    assert use["STACK"] == 0 and use["LOCAL"] == 0, use
