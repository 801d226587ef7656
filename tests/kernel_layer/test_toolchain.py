"""Which ptxas and PTX version build each target for a CUDA driver floor, and what really comes out: the ELF
headers of the cubins and the ``.version`` line of the PTX (read from the built files, as a driver reads them)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from aotc.errors import AotcError, UnsupportedError
from aotc.ir.launch import check_driver_floor, driver_for_ptx, ptx_for_driver
from aotc.ir.schedule import Kernel
from aotc.kernels import aot
from aotc.kernels.toolchain import Ptxas, available_ptxas, choose_toolchain
from tests.kernel_fixtures import ADD, hand_kernel, ptr, size

P128 = Ptxas("/t/ptxas", (12, 8), "12.8.93", "triton")
P129 = Ptxas("/t/ptxas", (12, 9), "12.9.86", "triton")
P134 = Ptxas("/t/ptxas-blackwell", (13, 4), "13.4.59", "triton")


def test_ptx_and_driver_tables_are_inverse() -> None:
    assert driver_for_ptx((8, 4)) == (12, 4) and driver_for_ptx((8, 7)) == (12, 8) and driver_for_ptx((9, 4)) == (13, 4)
    assert ptx_for_driver((12, 4)) == (8, 4) and ptx_for_driver((12, 6)) == (8, 5) and ptx_for_driver((13, 0)) == (9, 0)
    for cuda in [(12, m) for m in (0, 1, 2, 3, 4, 5, 7, 8, 9)] + [(13, 0), (13, 4)]:
        assert driver_for_ptx(ptx_for_driver(cuda)) == cuda


def test_the_default_floor_takes_a_cuda_12_ptxas_and_ptx_8_4() -> None:
    for arch in ("sm_80", "sm_90"):
        chain = choose_toolchain(arch, "12.4", [P134, P129])
        assert chain.ptxas is P129 and chain.ptx_version == 84
    # A CUDA 13 floor may use the CUDA 13 ptxas, and PTX up to what a 13.0 driver JIT-compiles.
    assert choose_toolchain("sm_90", "13.0", [P134, P129]) == choose_toolchain("sm_90", "13.0", [P129, P134])
    chain = choose_toolchain("sm_90", "13.0", [P134, P129])
    assert chain.ptxas is P134 and chain.ptx_version == 90
    # Never newer PTX than the ptxas reads; never older than the architecture needs.
    assert choose_toolchain("sm_90", "13.0", [P128]).ptx_version == 87
    assert choose_toolchain("sm_100", "12.4", [P129]).ptx_version == 86


def test_a_ptxas_named_in_tritons_variables_wins_when_it_qualifies() -> None:
    mine = Ptxas("/opt/cuda-12.4/bin/ptxas", (12, 4), "12.4.131", "TRITON_PTXAS_PATH")
    assert choose_toolchain("sm_90", "12.4", [mine, P129]).ptxas is mine
    too_new = Ptxas("/opt/cuda-13.0/bin/ptxas", (13, 0), "13.0.88", "TRITON_PTXAS_PATH")
    assert choose_toolchain("sm_90", "12.4", [too_new, P129]).ptxas is P129


def test_no_fitting_ptxas_and_bad_floors_are_clear_errors() -> None:
    with pytest.raises(UnsupportedError, match=r"no ptxas can build sm_90 for CUDA drivers from 12\.4 on: .*13\.4"):
        choose_toolchain("sm_90", "12.4", [P134])
    with pytest.raises(UnsupportedError, match=r"sm_100 .*release 12\.7 or newer"):
        choose_toolchain("sm_100", "12.4", [Ptxas("/p", (12, 4), "12.4.1", "triton")])
    with pytest.raises(AotcError, match=r"CUDA driver floor must be MAJOR\.MINOR such as '12\.4', got 'latest'"):
        check_driver_floor("latest")
    with pytest.raises(UnsupportedError, match=r"'11\.8' is below the oldest aotc can build for \(12\.0"):
        check_driver_floor("11.8")
    with pytest.raises(AotcError, match="CUDA driver floor"):
        aot.AotOptions(cuda_driver_floor="12")


# -- real builds (triton's bundled ptxas) ----------------------------------------------------------------------

triton = pytest.importorskip("triton")


def _add() -> Kernel:
    args = [ptr("x_ptr", 0), ptr("y_ptr", 1), ptr("out_ptr", 2), size("n", 8)]
    return hand_kernel("add_kernel", ADD, args, (1, 1, 1), [("BLOCK", 64)])


def elf_abi(cubin: bytes) -> tuple[int, int]:
    """(OSABI, ABI version) from the ELF identification bytes: CUDA 12 ptxas writes (0x33, 7), CUDA 13 (0x41, 8)."""
    assert cubin[:4] == b"\x7fELF"
    return cubin[7], cubin[8]


def ptx_version(ptx: str) -> str:
    return re.search(r"^\.version\s+(\S+)", ptx, re.M).group(1)


def test_the_default_floor_builds_cuda_12_cubins_and_ptx_8_4(tmp_path: Path) -> None:
    binary = aot.compile_kernels([_add()], ("sm_80", "sm_90"), aot.AotOptions(cache_dir=str(tmp_path), jobs=2))[
        "add_kernel"
    ]
    assert ptx_version(binary.ptx) == "8.4" and binary.ptx_meta.ptx_version == "8.4"
    for c in binary.cubins:
        assert elf_abi(c.data) == (0x33, 7), c.arch
        assert c.meta.ptx_version == "8.4" and c.meta.ptxas_version.startswith("12.")


def test_a_cuda_13_floor_uses_the_cuda_13_ptxas_where_triton_has_one(tmp_path: Path) -> None:
    if not any(p.release[0] >= 13 for p in available_ptxas()):
        pytest.skip("this triton bundles no CUDA 13 ptxas")
    opts = aot.AotOptions(cuda_driver_floor="13.0", cache_dir=str(tmp_path), jobs=2)
    binary = aot.compile_kernels([_add()], ("sm_80", "sm_90"), opts)["add_kernel"]
    sm90 = binary.cubin("sm_90")
    assert elf_abi(sm90.data) == (0x41, 8) and sm90.meta.ptxas_version.startswith("13.")
    assert ptx_version(binary.ptx) == "9.0"


def test_switching_ptxas_is_a_cache_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ptxas that says another version (a wrapper around the bundled one) must not reuse old cubins."""
    opts = aot.AotOptions(cache_dir=str(tmp_path / "cache"), jobs=1)
    aot.compile_kernels([_add()], ("sm_80",), opts)
    real = next(p for p in available_ptxas() if p.release[0] == 12)
    wrapper = tmp_path / "ptxas"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then\n'
        f"  {real.path} --version | sed 's/V{real.build}/V{real.build}9/'\n"
        "  exit 0\n"
        "fi\n"
        f'exec {real.path} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    compiled: list[str] = []
    run_jobs = aot._run_jobs
    monkeypatch.setattr(
        aot,
        "_run_jobs",
        lambda specs, jobs, *rest: compiled.extend(s["name"] for s in specs) or run_jobs(specs, jobs, *rest),
    )
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(wrapper))
    binary = aot.compile_kernels([_add()], ("sm_80",), opts)["add_kernel"]
    assert compiled == ["add_kernel"]  # recompiled with the new ptxas, not found in the cache
    assert binary.ptx_meta.ptxas_version == real.version
    monkeypatch.delenv("TRITON_PTXAS_PATH")
    compiled.clear()
    aot.compile_kernels([_add()], ("sm_80",), opts)
    assert compiled == []  # the bundled one's entries are still there
    assert os.environ.get("TRITON_PTXAS_BLACKWELL_PATH") is None  # the compile left Triton's variables alone
