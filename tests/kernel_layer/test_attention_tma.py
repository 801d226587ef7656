"""The Hopper attention kernel's tensor-descriptor (TMA) loads (issue 27): when the form is chosen, its numerics
under the Triton interpreter (which runs descriptors) against torch's SDPA, the source-bounds proof of its
descriptors (and refusals of widened ones), and its sm_90a code compiled here with no GPU: TMA in the PTX
(``cp.async.bulk.tensor``) and the SASS (``UTMALDG``), registers and shared memory within limits, and the driver
floor its PTX sets."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec
from aotc.artifact.code_checks import derive_driver_floor
from aotc.artifact.reader import read_artifact
from aotc.artifact.source_bounds import check_source
from aotc.errors import ArtifactError, UnsupportedError
from aotc.ir import Op
from aotc.ir.launch import Cubin, KernelBinary
from aotc.ir.schedule import Kernel
from aotc.kernels.attention import AttentionConfig, emit_attention
from aotc.kernels.attention_tma import why_not_descriptor
from aotc.kernels.explain import explain
from aotc.kernels.scheduler import schedule_graph
from aotc.lowering.options import CompileOptions
from aotc.runtime.backends.cuda.driver import DeviceInfo
from aotc.runtime.backends.cuda.modules import check_driver_floor
from tests.kernel_layer.contraction_kit import anchor_of, builder_for, run_kernel
from tests.kernel_layer.test_attention import BF16, F16, F32, TOLERANCE, Case, attention_graph
from tests.kernel_layer.test_attention_forms import masked_feeds, torch_sdpa
from tests.kernel_layer.test_attention_sm90 import SHARED_LIMIT, _dump

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

HOPPER_PTX = 87  # what a CUDA 12.8 driver floor builds sm_90 at (ptxas 12.9)
DESCRIPTORS = ("q_desc = tl.make_tensor_descriptor(", "k_desc = tl.make_tensor_descriptor(", "v_desc = ")


def kernel_for(case: Case, arch: str = "sm_90", ptx: int | None = HOPPER_PTX, name: str = "attention") -> Kernel:
    graph = attention_graph(case)
    node = anchor_of(graph, Op.SDPA)
    config = AttentionConfig(*case.block) if case.block else None
    return emit_attention(builder_for(graph, node), node, arch_hint=arch, config=config, ptx=ptx, name=name)


@pytest.mark.parametrize(
    "case,arch,ptx,why",
    [
        (Case(F16, 37, 50, 64), "sm_90", 84, "PTX is 8.4"),  # the default 12.4 floor
        (Case(F16, 37, 50, 64), "sm_80", HOPPER_PTX, "no TMA"),
        (Case(F16, 37, 50, 20), "sm_90", HOPPER_PTX, "not a multiple of 16 bytes"),  # 40-byte rows
        (Case(F32, 37, 50, 64), "sm_90", HOPPER_PTX, "tf32"),
    ],
    ids=["ptx84", "sm80", "unaligned", "fp32"],
)
def test_the_pointer_form_stays_where_descriptors_are_invalid(case: Case, arch: str, ptx: int, why: str) -> None:
    """(Views TMA can and cannot take, a packed QKV's head split among them: test_attention_tma_views.py.)"""
    k = kernel_for(case, arch, ptx)
    assert "make_tensor_descriptor" not in k.source and "tl.load(" in k.source
    graph = attention_graph(case)
    node = anchor_of(graph, Op.SDPA)
    reason = why_not_descriptor(builder_for(graph, node), node.inputs[1], int(arch[3:]), ptx)
    assert reason is not None and why in reason, reason


def test_the_descriptor_form_loads_q_k_v_by_box() -> None:
    k = kernel_for(Case(F16, 37, 50, 24, causal=True, block=(16, 16)))
    assert all(d in k.source for d in DESCRIPTORS)
    assert "shape=[lk, 24], strides=[24, 1], block_shape=[BLOCK_N, BLOCK_D]" in k.source
    assert "kt = k_desc.load([n0, 0]).T" in k.source and "vt = v_desc.load([n0, 0])" in k.source
    assert "tl.load(" not in k.source  # no pointer load is left (nor store: test_attention_tma_store.py)


def test_the_scheduler_takes_descriptors_for_sm90_only_from_a_cuda_12_7_floor() -> None:
    """The base kernel stays the portable pointer form; the sm_90 arch launch takes descriptors when the driver
    floor's PTX can hold them (12.8: PTX 8.7), and keeps pointers at the default floor (12.4: PTX 8.4)."""
    graph = attention_graph(Case(F16, 37, 50, 64))
    for floor, tma in (("12.8", True), ("12.4", False)):
        (k,) = schedule_graph(graph, CompileOptions(cuda_driver_floor=floor)).kernels
        assert "make_tensor_descriptor" not in k.source
        hopper = [v.kernel for v in k.arch_launches if v.arch == "sm_90"]
        assert any("make_tensor_descriptor" in h.source for h in hopper) is tma, (floor, [h.source for h in hopper])


CASES = [
    Case(F16, 64, 64, 32, block=(16, 32)),
    Case(F16, 37, 50, 24, causal=True, block=(16, 16)),  # d padded to BLOCK_D 32: TMA zero-fills the columns
    Case(BF16, 50, 37, 16, causal=True, mask="bool", block=(32, 16)),
    Case(F16, 20, 70, 40, mask="float", block=(16, 32)),
    Case(BF16, 9, 13, 64, heads=2, kv_heads=2, batch=2, block=(16, 16)),
    Case(F16, 17, 33, 32, heads=4, kv_heads=1, repeat=False, batch=2, block=(16, 16)),  # k, v broadcast over heads
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_descriptor_form_matches_torch_sdpa_under_the_interpreter(case: Case) -> None:
    k = kernel_for(case)
    assert all(d in k.source for d in DESCRIPTORS)
    graph = attention_graph(case)
    env = {"lq": case.lq, "lk": case.lk}
    feeds = masked_feeds(case, env, seed=case.lq + 7 * case.lk)
    if case.mask == "float":  # in the operands' dtype: finfo(float32).min rows become its own finfo.min
        m, low = feeds[-1], np.finfo(np.float16).min
        feeds[-1] = np.where(np.isinf(m), m, np.maximum(m, low)).astype(case.dtype.np)
    got = run_kernel(graph, k, feeds, env)[graph.outputs[0].id].astype(np.float64)
    expected = torch_sdpa(case, [x if x.dtype == np.bool_ else x.astype(np.float32) for x in feeds])  # no bf16 in torch
    atol, rtol = TOLERANCE[case.dtype]
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol, err_msg=str(case))


SHAPES = ({"lq": 1, "lk": 1}, {"lq": 17, "lk": 15}, {"lq": 64, "lk": 64}, {"lq": 100, "lk": 33}, {"lq": 33, "lk": 200})


@pytest.mark.parametrize("case", [Case(F16, 37, 50, 24, causal=True, batch=2, block=(16, 16)), Case(BF16, 9, 13, 64)])
def test_source_bounds_accept_the_descriptors(case: Case) -> None:
    k = kernel_for(case)
    for env in SHAPES:
        check_source(k, env, f"{k.name} at {env}")


# a descriptor store through q, which the launch only reads
STORE = ("q = q_desc.load([pid_m * BLOCK_M, 0])", "q = q_desc.load([pid_m * BLOCK_M, 0])\n    q_desc.store([0, 0], q)")


@pytest.mark.parametrize(
    "old,new,why",
    [
        ("shape=[lk, 24]", "shape=[lk + 1, 24]", "reaches offsets"),  # one key row past the buffer
        ("shape=[lq, 24]", "shape=[lq, 25]", "reaches offsets"),  # a column into the next row's end
        ("strides=[24, 1]", "strides=[25, 1]", "reaches offsets"),
        ("shape=[lk, 24]", "shape=[lk - 2, 24]", "may be negative"),  # lk = 1: TMA would read -1 as unsigned
        ("strides=[24, 1]", "strides=[24, -1]", "stride that may be negative"),
        (STORE[0], STORE[1], "only reads"),
    ],
    ids=["rows", "cols", "stride", "negative-dim", "negative-stride", "store-to-input"],
)
def test_source_bounds_refuse_a_widened_descriptor(old: str, new: str, why: str) -> None:
    """The bound is the descriptor's declared region, so widening it past the buffer is refused at the shape
    where it reaches past the extents the reader proved inside each value, even though the box offsets are
    unchanged."""
    k = kernel_for(Case(F16, 37, 50, 24, causal=True, block=(16, 16)))
    widened = dataclasses.replace(k, source=k.source.replace(old, new, 1))
    assert widened.source != k.source
    env = {"lq": 17, "lk": 1 if "lk - 2" in new else 15}
    check_source(k, env, "as emitted")
    with pytest.raises(ArtifactError, match=why):
        check_source(widened, env, "widened")


def test_a_descriptor_the_kernel_does_not_make_is_refused() -> None:
    k = kernel_for(Case(F16, 37, 50, 24, block=(16, 16)))
    made = re.search(r"k_desc = tl\.make_tensor_descriptor\(.*\)\n", k.source)
    assert made is not None
    other = dataclasses.replace(k, source=k.source.replace(made.group(0), "k_desc = q_desc\n"))
    check_source(other, {"lq": 17, "lk": 17}, "another of its own descriptors")  # q's region: inside q
    phi = dataclasses.replace(
        k, source=k.source.replace("kt = k_desc.load", "k_desc = k_desc\n        kt = k_desc.load")
    )
    with pytest.raises(ArtifactError, match=r"no tl\.make_tensor_descriptor of this kernel"):
        check_source(phi, {"lq": 17, "lk": 17}, "carried across iterations")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from aotc.kernels.aot import AotOptions, compile_cubins

    kernels = []
    for d, causal in ((64, True), (128, False)):
        case = Case(BF16, 17, 17, d, heads=16, kv_heads=16, batch=4, causal=causal, block=None)
        kernels.append(kernel_for(case, name=f"attn_tma_d{d}"))
    options = AotOptions(cuda_driver_floor="12.8", cache_dir=str(tmp_path_factory.mktemp("cache")))
    out = compile_cubins(kernels, "sm_90", options)
    for c in out.values():
        assert not isinstance(c, str), c
    return {k.name: (k, out[k.name]) for k in kernels}


@pytest.mark.parametrize("d", [64, 128])
def test_the_sm90a_code_loads_by_tma_within_limits(compiled, tmp_path, d: int) -> None:
    k, c = compiled[f"attn_tma_d{d}"]
    assert all(x in k.source for x in DESCRIPTORS)
    assert "cp.async.bulk.tensor" in c.ptx and c.meta.arch == "sm_90a"
    sass = _dump(c.cubin, "-sass", tmp_path)
    assert len(re.findall(r"\bUTMALDG\b", sass)) >= 3, "q, k and v each load by TMA"
    usage = _dump(c.cubin, "-res-usage", tmp_path)
    res = {m[0]: int(m[1]) for m in re.findall(r"\b(REG|STACK|LOCAL):(\d+)", usage)}
    assert res["REG"] <= 255 and res["STACK"] == 0 and res["LOCAL"] == 0, usage
    assert 0 < c.meta.shared <= SHARED_LIMIT and c.meta.num_warps == k.num_warps, c.meta
    # in-kernel descriptors live in the global scratch the launch plan allocates per CTA: 128 bytes each
    assert c.meta.global_scratch_size >= 3 * 128, c.meta


def test_the_descriptor_ptx_sets_the_driver_floor(compiled) -> None:
    """PTX 8.7 (from the 12.8 floor) makes the file's floor 12.8: a 12.4 driver is refused, naming the kernel."""
    k, c = compiled["attn_tma_d64"]
    assert tuple(map(int, c.meta.ptx_version.split("."))) >= (8, 6)
    binary = KernelBinary(k.name, (Cubin("sm_90", c.cubin, c.meta),), c.ptx, c.meta)
    floor = derive_driver_floor([binary])
    assert tuple(map(int, floor.split("."))) >= (12, 7)
    old = DeviceInfo(0, "NVIDIA H100", (9, 0), 12040, 227 * 1024)
    with pytest.raises(UnsupportedError) as err:
        check_driver_floor(floor, old, [binary])
    msg = str(err.value)
    assert f"need a CUDA {floor} driver" in msg and "CUDA 12.4 driver" in msg and k.name in msg, msg
    check_driver_floor(floor, DeviceInfo(0, "NVIDIA H100", (9, 0), 13000, 227 * 1024), [binary])


def test_a_model_compiled_for_a_cuda_12_8_floor_ships_the_descriptor_form(tmp_path) -> None:
    """End to end: the sm_90 arch launch is the descriptor form, the file's floor is its PTX's driver, the reader
    accepts its source at load, and the portable kernel (what the interpreter runs) still matches torch."""
    seq = Dim("seq", min=1, max=512)
    inputs = {n: TensorSpec((2, 4, seq, 64), "float16") for n in "qkv"}

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    options = CompileOptions(cuda_driver_floor="12.8", targets=("sm_80", "sm_90"))
    path = tmp_path / "attention.aotc"
    aotc.compile(attend, inputs, options=options).save(str(path))
    art = read_artifact(str(path))
    assert art.cuda_driver_floor == "12.8"
    (launch,) = art.variants[0].plan.kernels
    assert "make_tensor_descriptor" not in launch.source
    (hopper,) = [v.kernel for v in launch.arch_launches if v.arch == "sm_90"]
    assert all(d in hopper.source for d in DESCRIPTORS)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((2, 4, 37, 64)).astype(np.float16) for n in "qkv"}
    got = aotc.load(str(path), device="interpret")(**feeds)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(feeds[n]).double() for n in "qkv"), is_causal=True
    )
    np.testing.assert_allclose(got.astype(np.float64), want.numpy(), atol=3e-3, rtol=3e-3)


def test_explain_names_the_tma_loads() -> None:
    graph = attention_graph(Case(F16, 37, 50, 64))
    text = explain(graph, schedule_graph(graph, CompileOptions(cuda_driver_floor="12.8")))
    assert "TMA loads of q, k, v" in text, text
    assert "TMA" not in explain(graph, schedule_graph(graph, CompileOptions()))


def test_the_driver_floor_comes_from_the_environment_as_the_gpu_checks_tma_step_sets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aotc.errors import UnsupportedError
    from aotc.lowering.options import CompileOptions

    monkeypatch.delenv("AOTC_CUDA_DRIVER_FLOOR", raising=False)
    assert CompileOptions.from_env().cuda_driver_floor == CompileOptions().cuda_driver_floor
    monkeypatch.setenv("AOTC_CUDA_DRIVER_FLOOR", "12.8")
    assert CompileOptions.from_env().cuda_driver_floor == "12.8"
    monkeypatch.setenv("AOTC_CUDA_DRIVER_FLOOR", "11.0")
    with pytest.raises(UnsupportedError, match=r"AOTC_CUDA_DRIVER_FLOOR: the CUDA driver floor '11.0' is below"):
        CompileOptions.from_env()
