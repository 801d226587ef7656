"""The compile worker processes behind ``aot.compile_kernels``: fresh interpreters, each compiling the job specs
it is sent (one JSON line each) and answering one JSON line per job.

A worker's first half second goes to starting up: importing aotc and Triton (``warm_up``; Triton's own key of
its install, a read of the 500 MB libtriton, is replaced by one from the files' sizes and times). On a cold compile
(an empty kernel cache: a fresh CI machine, a user's first compile) ``prestart`` launches the workers when
the kernel stage begins, so that start-up overlaps the scheduling of the kernels instead of delaying the
first compile; a compile whose kernels are all cached starts none.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from aotc.kernels.cache import Compiled, from_json

__all__ = ["prestart", "release_prestarted", "run_jobs", "warm_up"]

_COMMAND = "from aotc.kernels.aot import worker_main; worker_main()"  # aot imports this module, not back
_lock = threading.Lock()
_ready: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []  # prestarted workers and their stderr files


def _spawn() -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    err = tempfile.TemporaryFile()  # a file, not a pipe: a chatty compile must never block on a full stderr pipe
    proc = subprocess.Popen(
        [sys.executable, "-c", _COMMAND], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env
    )
    return proc, err


def prestart(jobs: int | None = None) -> None:
    """Start the workers a compile of many kernels will use (``jobs``; None: one per CPU) now, so their start-up
    runs while the caller is still scheduling. Workers no job takes are closed by ``release_prestarted``."""
    want = max(1, jobs or os.cpu_count() or 1)
    with _lock:
        while len(_ready) < want:
            _ready.append(_spawn())


def release_prestarted() -> None:
    """Close the prestarted workers no compile took (the kernels were all cached, or the schedule failed)."""
    with _lock:
        left = _ready[:]
        _ready.clear()
    for proc, err in left:
        _close(proc, err)


def _close(proc: subprocess.Popen[bytes], err: IO[bytes]) -> None:
    # an unused worker holds nothing: stopped at once rather than left to finish its warm-up
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, err):
        if pipe is not None:
            pipe.close()


def _take_process() -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    with _lock:
        while _ready:
            proc, err = _ready.pop()
            if proc.poll() is None:
                return proc, err
            err.close()  # died while waiting (killed from outside): start a fresh one
    return _spawn()


def run_jobs(
    specs: list[dict[str, Any]], jobs: int | None, on_done: Callable[[int], None] | None = None
) -> list[Compiled | str]:
    """Each spec compiled by ``compile_one`` in a worker process; a failure comes back as its message.
    ``on_done(n)`` is called with the count finished so far."""
    workers = max(1, min(jobs or os.cpu_count() or 1, len(specs)))
    # Fresh interpreters running this module, never this process: the Triton interpreter (the
    # interpret backend) patches triton.language process-wide, after which an in-process compile
    # fails. Not multiprocessing either: spawn would re-run an unguarded user script that called the
    # compiler, and fork would copy the parent's threads mid-state.
    # Each worker takes the next job when it finishes one, the biggest first: a few slow kernels (a long
    # recurrence, a wide matmul) spread over the workers instead of queueing behind one.
    todo = collections.deque(sorted(range(len(specs)), key=lambda i: -len(specs[i]["source"])))
    results: list[Compiled | str] = [""] * len(specs)
    lock = threading.Lock()
    finished = 0

    def take() -> int | None:
        with lock:
            return todo.popleft() if todo else None

    def one_done(i: int, result: Compiled | str) -> None:
        nonlocal finished
        with lock:
            results[i] = result
            finished += 1
            if on_done is not None:
                on_done(finished)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(_run_worker, specs, take, one_done) for _ in range(workers)]:
            f.result()
    for i in todo:  # every worker died before taking these
        results[i] = f"kernel {specs[i]['name']}: no compile worker was left to compile it for {specs[i]['arch']}"
    return results


def _run_worker(
    specs: list[dict[str, Any]], take: Callable[[], int | None], one_done: Callable[[int, Compiled | str], None]
) -> None:
    """One worker process (a prestarted one if there is one): it is sent one JSON line per job it takes
    (``take``) and answers one JSON line each."""
    i = take()
    if i is None:
        return
    proc, err = _take_process()
    assert proc.stdin is not None and proc.stdout is not None
    try:
        while i is not None:
            proc.stdin.write(json.dumps(specs[i]).encode() + b"\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if not line:
                raise ValueError("it stopped answering")
            r = json.loads(line)
            one_done(i, from_json(r["ok"]) if "ok" in r else str(r["error"]))
            i = take()
        proc.stdin.close()
        code = proc.wait()
        if code != 0:
            raise ValueError(f"exit status {code}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        proc.kill()
        code = proc.wait()
        err.seek(0)
        tail = err.read().decode(errors="replace").strip()[-2000:]
        if i is not None:  # the job it died on; the other workers take the rest
            s = specs[i]
            one_done(i, f"kernel {s['name']}: the compile worker for {s['arch']} failed ({e}, status {code}): {tail}")
    finally:
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):  # a killed worker's stdin may fail its last flush
                pipe.close()
        err.close()


def warm_up() -> None:
    """What every first compile in a process pays, paid before the first job arrives: importing Triton's
    compiler, and the key of its install that its compile cache files entries under (``install_key``)."""
    try:
        import triton
        import triton.compiler
        from triton.runtime import cache
    except ImportError:
        return  # compile_one reports a missing Triton per job, with the install hint
    key = install_key(Path(triton.__file__).parent, triton.__version__)
    cache.triton_key = lambda: key  # as Triton's own warm-up pool hands its workers the key


def install_key(root: Path, version: str) -> str:
    """A key of the Triton install at ``root`` that changes whenever any of its Python modules or native
    libraries does: their paths, sizes and modification times. Triton's own ``triton_key`` reads every byte of
    them, the 500 MB libtriton included: about 0.5 s of CPU in each worker of every compile (both cores'
    worth on a 2-core machine), for a key only Triton's own cache of intermediate files uses (aotc's kernel
    cache keys on the Triton version and the whole job)."""
    h = hashlib.sha256(version.encode())
    for p in sorted(root.rglob("*")):
        if p.suffix in (".py", ".so") and p.is_file():
            st = p.stat()
            h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return f"{version}-aotc-{h.hexdigest()}"
