"""Compile workers started ahead of a cold compile (aotc/kernels/compile_workers.py): a cold kernel stage prestarts
them and its jobs take them; a compile whose kernels are all cached starts none and leaves none running."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton")

import aotc
from aotc.kernels import compile_workers
from aotc.kernels.aot import AotOptions, compile_kernels
from aotc.kernels.cache import KernelCache
from tests.kernel_fixtures import ADD, hand_kernel, ptr, size


def _add(name: str) -> object:
    args = [ptr("x_ptr", 0), ptr("y_ptr", 1), ptr("out_ptr", 2), size("n", 1024)]
    return hand_kernel(name, ADD.replace("def add_kernel", f"def {name}"), args, (4, 1, 1), [("BLOCK", 256)])


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of every worker process started during the test."""
    pids: list[int] = []
    spawn = compile_workers._spawn

    def counted() -> object:
        proc, err = spawn()
        pids.append(proc.pid)
        return proc, err

    monkeypatch.setattr(compile_workers, "_spawn", counted)
    yield pids
    compile_workers.release_prestarted()


def test_prestarted_workers_take_the_jobs(tmp_path: Path, spawned: list[int]) -> None:
    compile_workers.prestart(2)
    assert len(spawned) == 2 and len(compile_workers._ready) == 2
    out = compile_kernels([_add("add_a"), _add("add_b")], ("sm_80",), AotOptions(cache_dir=str(tmp_path), jobs=2))
    assert sorted(out) == ["add_a", "add_b"]
    assert len(spawned) == 2  # the two jobs ran on the prestarted workers: none was started for them
    assert compile_workers._ready == []


def test_unused_prestarted_workers_are_closed(spawned: list[int]) -> None:
    compile_workers.prestart(2)
    procs = [p for p, _ in compile_workers._ready]
    compile_workers.release_prestarted()
    assert compile_workers._ready == [] and all(p.poll() is not None for p in procs)  # none left running


def test_a_cold_compile_prestarts_and_a_warm_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list[int]
) -> None:
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path))
    calls: list[int | None] = []
    prestart = compile_workers.prestart
    monkeypatch.setattr(compile_workers, "prestart", lambda jobs=None: calls.append(jobs) or prestart(jobs))
    x = aotc.TensorSpec((aotc.Dim("batch", min=1, max=8), 4), "float32")
    model = lambda x: aotc.functional.relu(x) * 2.0  # noqa: E731

    assert KernelCache().is_empty()
    cold = aotc.compile(model, {"x": x}, options=aotc.CompileOptions(targets=("sm_80",)))
    assert len(calls) == 1 and compile_workers._ready == []  # prestarted, taken or closed
    assert not KernelCache().is_empty()
    before = len(spawned)
    warm = aotc.compile(model, {"x": x}, options=aotc.CompileOptions(targets=("sm_80",)))
    assert len(calls) == 1 and len(spawned) == before  # every kernel cached: no worker started
    feed = {"x": np.arange(12, dtype=np.float32).reshape(3, 4) - 6}
    np.testing.assert_array_equal(cold(**feed), warm(**feed))


def test_the_install_key_changes_with_any_module_or_library_of_the_install(tmp_path: Path) -> None:
    """Triton's compile cache files its entries under the key warm_up installs: any changed, added or removed
    module or native library of the install must change it (a stale entry would be another compiler's output)."""
    root = tmp_path / "triton"
    (root / "compiler").mkdir(parents=True)
    (root / "_C").mkdir()
    (root / "compiler" / "code.py").write_text("x = 1\n")
    (root / "_C" / "libtriton.so").write_bytes(b"\0" * 64)
    (root / "notes.txt").write_text("not code")
    key = compile_workers.install_key(root, "3.9.0")
    assert key == compile_workers.install_key(root, "3.9.0") and key.startswith("3.9.0-")
    assert compile_workers.install_key(root, "3.9.1") != key
    (root / "notes.txt").write_text("still not code, longer")
    assert compile_workers.install_key(root, "3.9.0") == key
    keys = [key]
    for change in (
        lambda: (root / "compiler" / "code.py").write_text("x = 22\n"),  # another size
        lambda: (root / "_C" / "libtriton.so").write_bytes(b"\1" * 65),
        lambda: (root / "compiler" / "more.py").write_text(""),
        lambda: (root / "compiler" / "more.py").unlink(),  # back to the install before it was added
    ):
        change()
        keys.append(compile_workers.install_key(root, "3.9.0"))
    assert len(set(keys[:4])) == 4 and keys[4] == keys[2]


def test_a_warmed_up_worker_keys_tritons_cache_by_the_install_key() -> None:
    """In a fresh interpreter (as a worker): after warm_up, Triton's cache key reads the install key, not a hash of
    its 500 MB library."""
    import subprocess
    import sys

    code = (
        "import triton, pathlib; from triton.runtime import cache; from aotc.kernels import compile_workers as w; "
        "w.warm_up(); k = cache.triton_key(); "
        "assert k == w.install_key(pathlib.Path(triton.__file__).parent, triton.__version__), k; print(k)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "-aotc-" in out.stdout
