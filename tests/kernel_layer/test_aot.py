"""Ahead-of-time compile with no GPU: cubins per target, portable PTX, launch metadata checked against the
PTX entry, the on-disk cache (hits need no compile; keys cover what changes the output), clear errors.

The matmul compiles take seconds: they are marked slow (run with ``-m slow`` or AOTC_RUN_SLOW=1)."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from aotc.errors import AotcError, UnsupportedError
from aotc.ir.launch import SCRATCH_PARAMS, LaunchMeta
from aotc.ir.schedule import ArchLaunch, Arg, ArgKind, Kernel
from aotc.ir.templates import KernelKind
from aotc.kernels import aot
from aotc.kernels.aot import (
    AotOptions,
    KernelCompileError,
    compile_kernels,
    job_spec,
    parse_targets,
    spec_key,
    triton_version,
)
from aotc.kernels.cache import Compiled, KernelCache, cache_key
from aotc.kernels.toolchain import Toolchain
from tests.kernel_fixtures import ADD, HEADER, hand_kernel, ptr, size

ELF = b"\x7fELF"


MATMUL = (
    HEADER
    + """
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))
"""
)


def _add(source: str = ADD, name: str = "add_kernel", warps: int = 4, divisible: tuple[int, ...] = ()) -> Kernel:
    args = [ptr("x_ptr", 0), ptr("y_ptr", 1), ptr("out_ptr", 2), size("n", 1024)]
    return hand_kernel(name, source, args, (4, 1, 1), [("BLOCK", 256)], num_warps=warps, divisible=divisible)


def _matmul(divisible: tuple[int, ...]) -> Kernel:
    args = [ptr("a_ptr", 0, "*fp16"), ptr("b_ptr", 1, "*fp16"), ptr("c_ptr", 2, "*fp16")]
    args += [size("M", 512), size("N", 512), size("K", 512)]
    tiles = [("BM", 128), ("BN", 128), ("BK", 64)]
    return hand_kernel(
        "matmul_kernel",
        MATMUL,
        args,
        (4, 4, 1),
        tiles,
        kind=KernelKind.MATMUL,
        num_warps=8,
        num_stages=3,
        divisible=divisible,
    )


def _check_meta(meta: LaunchMeta, name: str, arch: str, params: tuple[str, ...], warps: int) -> None:
    assert meta.name == name
    assert meta.arch == arch
    assert meta.params == (*params, *SCRATCH_PARAMS)
    assert (meta.num_warps, meta.num_ctas, meta.threads) == (warps, 1, 32 * warps)
    assert meta.triton_version == triton_version()
    assert meta.ptx_version.replace(".", "").isdigit()
    assert meta.enable_fp_fusion is True
    assert meta.global_scratch_size >= 0 and meta.global_scratch_align >= 1
    assert meta.profile_scratch_size >= 0 and meta.profile_scratch_align >= 1


def test_vector_add_for_sm80_and_sm90_then_from_the_cache(tmp_path: Path) -> None:
    opts = AotOptions(cache_dir=str(tmp_path), jobs=1)
    binary = compile_kernels([_add()], ("sm_80", "sm_90"), opts)["add_kernel"]
    assert binary.archs == ("sm_80", "sm_90")
    params = ("*fp32", "*fp32", "*fp32", "i32")
    for arch, isa in (("sm_80", "sm_80"), ("sm_90", "sm_90a")):
        cubin = binary.cubin(arch)
        assert cubin.data[:4] == ELF
        _check_meta(cubin.meta, "add_kernel", isa, params, 4)
        assert cubin.meta.shared == 0
    assert "\n.target sm_80" in binary.ptx and ".entry add_kernel(" in binary.ptx
    assert binary.ptx_meta == binary.cubin("sm_80").meta
    with pytest.raises(KeyError, match=r"no cubin for sm_100; it has \['sm_80', 'sm_90'\]"):
        binary.cubin("sm_100")

    # the hit itself compiling nothing is test_a_cache_hit_compiles_nothing
    counts: list[tuple[int, int]] = []
    again = compile_kernels([_add()], ("sm_80", "sm_90"), opts, on_done=lambda *c: counts.append(c))["add_kernel"]
    assert again == binary
    assert counts == [(2, 2)]  # both (kernel, target) compiles were cache hits: counted at once


def test_progress_counts_each_compile_as_its_worker_answers(tmp_path: Path) -> None:
    counts: list[tuple[int, int]] = []
    opts = AotOptions(cache_dir=str(tmp_path), jobs=1)
    compile_kernels([_add()], ("sm_80", "sm_90"), opts, on_done=lambda *c: counts.append(c))
    assert counts == [(0, 2), (1, 2), (2, 2)]


SCALE = (
    HEADER
    + """
@triton.jit
def scale_rows(x_ptr, ids_ptr, flags_ptr, keep_ptr, rows, alpha, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    idx = tl.load(ids_ptr + offs)
    tl.store(flags_ptr, 1, mask=tl.max(idx, axis=0) >= rows)
    keep = tl.load(keep_ptr + offs) != 0
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, tl.where(keep, x * alpha, x))
"""
)


def test_the_launch_abi_of_every_argument_type(tmp_path: Path) -> None:
    args = (
        Arg("x_ptr", "*bf16", ArgKind.BUFFER, 0),
        Arg("ids_ptr", "*i64", ArgKind.BUFFER, 1),
        Arg("flags_ptr", "*i32", ArgKind.FLAG),
        Arg("keep_ptr", "*i1", ArgKind.BUFFER, 2),
        Arg("rows", "i64", ArgKind.SIZE, size=10),
        Arg("alpha", "fp32", ArgKind.SIZE),
    )
    kernel = _add(SCALE, "scale_rows").replace(args=args, constexprs=(("BLOCK", 64),))
    meta = compile_kernels([kernel], ("sm_80",), AotOptions(cache_dir=str(tmp_path), jobs=1))["scale_rows"].ptx_meta
    assert meta.params == ("*bf16", "*i64", "*i32", "*i1", "i64", "fp32", *SCRATCH_PARAMS)
    with pytest.raises(AotcError, match=r"takes parameters \[.*\], but aotc's launch ABI expects"):
        aot._check_abi("scale_rows", FOUR_POINTER_ENTRY, ("*bf16", "i32", *SCRATCH_PARAMS))


# An entry whose second parameter is 64-bit where aotc would pass an i32.
FOUR_POINTER_ENTRY = ".entry scale_rows(\n\t.param .u64 p0,\n\t.param .u64 p1,\n\t.param .u64 p2,\n\t.param .u64 p3\n)"


def test_a_cache_hit_compiles_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = AotOptions(cache_dir=str(tmp_path), jobs=1)
    compile_kernels([_add()], ("sm_80",), opts)
    monkeypatch.setattr(aot, "compile_one", lambda spec: pytest.fail(f"compiled {spec['name']} again"))
    assert compile_kernels([_add()], ("sm_80",), opts)["add_kernel"].cubin("sm_80").data[:4] == ELF
    # Without sm_80 among the targets it is still compiled (from the cache here) for the portable PTX.
    monkeypatch.undo()
    only90 = compile_kernels([_add()], ("sm_90",), opts)["add_kernel"]
    assert only90.archs == ("sm_90",) and "\n.target sm_80" in only90.ptx


HIT_SCRIPT = """
import pickle, sys
from aotc.kernels.aot import AotOptions, compile_kernels
kernel = pickle.loads(sys.stdin.buffer.read())
assert compile_kernels([kernel], ("sm_80",), AotOptions(cache_dir=sys.argv[1], jobs=1))["add_kernel"].ptx
print(sorted(m for m in sys.modules if m == "triton" or m.startswith("triton.")))
"""


def test_a_cache_hit_imports_no_triton(tmp_path: Path) -> None:
    compile_kernels([_add()], ("sm_80",), AotOptions(cache_dir=str(tmp_path), jobs=1))
    cmd = [sys.executable, "-c", HIT_SCRIPT, str(tmp_path)]
    out = subprocess.run(cmd, input=pickle.dumps(_add()), capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip() == "[]"


def test_cache_keys_cover_what_changes_the_output() -> None:
    plain, opts = _add(), AotOptions()
    bundled = opts.toolchain("sm_80")

    def key(
        kernel: Kernel = plain,
        arch: str = "sm_80",
        options: AotOptions = opts,
        triton: str = "3.9.0",
        chain: Toolchain | None = None,
    ) -> str:
        return spec_key(job_spec(kernel, arch, options, chain or options.toolchain(arch)), triton)

    base = key()
    assert key() == base
    assert key(options=AotOptions(jobs=7, cache_dir="/elsewhere")) == base  # how it runs is not what it makes
    # The same ptxas release at another path (another machine's virtualenv) hits the same entries.
    moved = dataclasses.replace(bundled.ptxas, path="/elsewhere/bin/ptxas")
    assert key(chain=Toolchain(moved, bundled.ptx_version)) == base
    other_ptxas = dataclasses.replace(bundled.ptxas, build="12.9.99")
    changed = [
        key(_add(ADD.replace("+ tl.load(y_ptr", "+  tl.load(y_ptr"))),
        key(_add(ADD.replace("mask=mask)", "mask=mask, other=0.0)", 1))),
        key(arch="sm_90"),
        key(options=AotOptions(enable_fp_fusion=False)),
        key(options=AotOptions(line_info=True)),
        key(options=AotOptions(ptx_version=83)),
        key(options=AotOptions(cuda_driver_floor="12.8")),
        key(chain=Toolchain(other_ptxas, bundled.ptx_version)),
        key(triton="3.6.0"),
        key(_add(warps=8)),
        key(_add(divisible=(3,))),
    ]
    assert len({base, *changed}) == len(changed) + 1


def test_the_cache_file_round_trips_and_a_corrupt_entry_is_a_miss(tmp_path: Path) -> None:
    meta = LaunchMeta("k", "sm_80", 4, 1, 0, 0, 1, 0, 1, ("*fp32", "i32", *SCRATCH_PARAMS), "3.9.0", "8.8", True)
    cache = KernelCache(tmp_path)
    entry = Compiled(ELF + b"\x00\xff" * 10, ".version 8.8\n.target sm_80\n", meta)
    key = cache_key({"k": 1})
    assert cache.get(key) is None
    cache.put(key, entry)
    assert cache.get(key) == entry
    assert not [p for p in cache.path(key).parent.iterdir() if p.name.startswith(".tmp-")]
    cache.path(key).write_text(cache.path(key).read_text()[:-20])
    assert cache.get(key) is None


def test_a_kernel_that_does_not_compile_names_itself(tmp_path: Path) -> None:
    bad = ADD.replace("def add_kernel", "def bad_kernel").replace("tl.arange(0, BLOCK)", "tl.arange(0, n)")
    with pytest.raises(KernelCompileError, match=r"^kernel bad_kernel does not compile for sm_80: \w+"):
        compile_kernels([_add(bad, "bad_kernel")], ("sm_80",), AotOptions(cache_dir=str(tmp_path), jobs=1))
    with pytest.raises(
        KernelCompileError,
        match=r"kernel other does not compile for sm_80: AotcError: its source defines no @triton\.jit function named 'other'",
    ):
        compile_kernels([_add(ADD, "other")], ("sm_80",), AotOptions(cache_dir=str(tmp_path), jobs=1))
    with pytest.raises(AotcError, match="two different kernels are named 'add_kernel'"):
        compile_kernels([_add(), _add(warps=8)], ("sm_80",), AotOptions(cache=False))


def test_a_dead_worker_fails_its_own_job_and_the_others_carry_on(tmp_path: Path) -> None:
    """Workers take jobs one at a time: one that dies (here, while defining its kernel) fails the job it held;
    the other compiles the rest, and the error names the kernel and the worker's last words."""
    dies = _add(
        ADD.replace("def add_kernel", "def dies").replace(
            "import triton\n", "import os\nimport triton\nos._exit(3)\n", 1
        ),
        "dies",
    )
    kernels = [dies, _add(), _add(ADD.replace("def add_kernel", "def add_two"), "add_two")]
    done: list[tuple[int, int]] = []
    opts = AotOptions(cache_dir=str(tmp_path), jobs=2)
    with pytest.raises(
        KernelCompileError, match=r"kernel dies: the compile worker for sm_80 failed \(it stopped answering, status 3\)"
    ) as e:
        compile_kernels(kernels, ("sm_80",), opts, on_done=lambda *c: done.append(c))
    assert "more failures" not in str(e.value)
    assert done[-1] == (3, 3)
    # the two that compiled are cached: only the one that died is left
    hits: list[tuple[int, int]] = []
    with pytest.raises(KernelCompileError):
        compile_kernels(kernels, ("sm_80",), opts, on_done=lambda *c: hits.append(c))
    assert hits[0] == (2, 3)


@pytest.mark.slow
def test_worker_processes_report_each_failure(tmp_path: Path) -> None:
    bad = [
        _add(ADD.replace("def add_kernel", f"def bad{i}").replace("tl.arange(0, BLOCK)", "tl.arange(0, n)"), f"bad{i}")
        for i in range(2)
    ]
    with pytest.raises(
        KernelCompileError, match=r"(?s)kernel bad\d does not compile for sm_80: .*\(and 1 more failures\)"
    ):
        compile_kernels(bad, ("sm_80",), AotOptions(cache_dir=str(tmp_path), jobs=2))


def test_an_old_or_missing_triton_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for version, said in (("3.5.1", "triton 3.5.1 is installed"), (None, "triton is not installed")):

        def fake(_name: str, v: str | None = version) -> str:
            if v is None:
                raise aot.metadata.PackageNotFoundError("triton")
            return v

        monkeypatch.setattr(aot.metadata, "version", fake)
        with pytest.raises(UnsupportedError, match=f"needs triton >= 3.6, but {said}"):
            compile_kernels([_add()], ("sm_80",), AotOptions(cache=False))


def test_targets_are_checked() -> None:
    assert parse_targets(["sm_90", "sm_80", "sm_90"]) == ("sm_90", "sm_80")
    with pytest.raises(UnsupportedError, match="'sm_75' is not supported; aotc kernels need sm_80 or newer"):
        parse_targets(["sm_75"])
    with pytest.raises(AotcError, match="unknown GPU target 'gfx90a'"):
        parse_targets(["gfx90a"])
    with pytest.raises(AotcError, match="targets must be a non-empty list"):
        parse_targets("sm_80")


@pytest.mark.slow
def test_matmul_with_and_without_divisibility_hints(tmp_path: Path) -> None:
    params = ("*fp16", "*fp16", "*fp16", "i32", "i32", "i32")
    opts = AotOptions(cache_dir=str(tmp_path), jobs=2)
    hinted = compile_kernels([_matmul(divisible=(0, 1, 2, 3, 4, 5))], ("sm_80", "sm_90"), opts)["matmul_kernel"]
    for arch, isa in (("sm_80", "sm_80"), ("sm_90", "sm_90a")):
        c = hinted.cubin(arch)
        assert c.data[:4] == ELF
        _check_meta(c.meta, "matmul_kernel", isa, params, 8)
    assert "mma.sync" in hinted.ptx and "cp.async" in hinted.ptx  # tensor cores, software-pipelined loads
    plain = compile_kernels([_matmul(divisible=())], ("sm_80",), opts)["matmul_kernel"]
    # Without the hints Triton cannot prove aligned rows, so it does not pipeline: less shared memory.
    assert plain.cubin("sm_80").meta.shared < hinted.cubin("sm_80").meta.shared


def test_a_compile_after_an_interpreter_launch_still_works(tmp_path: Path) -> None:
    """The interpreter patches triton.language process-wide; compiles must not run where it did."""
    import numpy as np

    from aotc.runtime.backends.triton_interp import launch

    kernel = _add()
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, dtype=np.float32)
    launch(kernel, (1, 1, 1), [x, x, out, 8])
    np.testing.assert_array_equal(out, 2 * x)
    binary = compile_kernels([kernel], ("sm_80",), AotOptions(cache_dir=str(tmp_path), jobs=1))["add_kernel"]
    assert binary.cubins[0].data.startswith(ELF)


def test_a_variant_compiles_for_its_target_only(tmp_path: Path) -> None:
    """An sm_90 variant gets an sm_90 cubin and that target's PTX; the launch's own kernel, which every
    Hopper GPU now skips, only the oldest target's cubin and the portable PTX."""
    base = _add()
    source = ADD.replace("def add_kernel(", "def add_kernel_sm90(", 1)
    variant = _add(source, "add_kernel_sm90", warps=8)
    kernel = base.replace(arch_launches=(ArchLaunch("sm_90", variant),))
    out = compile_kernels([kernel], ("sm_80", "sm_90"), AotOptions(cache_dir=str(tmp_path), jobs=1))
    assert out["add_kernel"].archs == ("sm_80",) and out["add_kernel"].ptx_meta.arch == "sm_80"
    # a second launch of the same code with no variant still needs its sm_90 cubin
    both = compile_kernels([kernel, base], ("sm_80", "sm_90"), AotOptions(cache_dir=str(tmp_path), jobs=1))
    assert both["add_kernel"].archs == ("sm_80", "sm_90")
    v = out["add_kernel_sm90"]
    assert v.archs == ("sm_90",) and v.cubin("sm_90").data[:4] == ELF
    assert v.ptx_meta.arch.startswith("sm_90") and v.cubin("sm_90").meta.num_warps == 8
    with pytest.raises(AotcError, match="not a target"):
        compile_kernels([kernel], ("sm_80",), AotOptions(cache_dir=str(tmp_path), jobs=1))
