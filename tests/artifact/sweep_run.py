"""Running what the reader accepted: each mutated file that loads as a model other than the original is called on
every backend it can run on (cpu; the interpret backend; the cuda backend over the fake driver, tests/runtime/
fake_cuda.py, where the file has binaries) with one small feed, and what happened is classified.

What must never happen, each counted and failed on by the sweep:

- an out-of-bounds access: the interpreter's address fence refuses it (the interpret backend, and the fake driver,
  which runs each launch's source under the interpreter), here with every pointer narrowed to the offsets its
  extents claim (``triton_interp.CHECK_EXTENTS``), so an extent the compiler derived unsoundly counts too;
- a hang: a read or a call that runs past ``TIMEOUT`` seconds;
- an untyped error: anything but an AotcError (GuardError, ExecError, ArtifactError for a per-shape fact, ...);
- an allocation over ``MAX_ALLOC`` bytes by the interpret backend or on the fake GPU;
- a silent difference that is not a weight edit: outputs that differ from the original file's (the backends
  must also agree with each other: the kernels compute the file's own graph).
"""

from __future__ import annotations

import signal
import sys
import types
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from aotc.artifact import Artifact
from aotc.errors import AotcError
from aotc.ir.graph import Graph
from aotc.ir.symbolic_values import evaluate
from aotc.runtime import Executable
from aotc.runtime.backends import interpret as interpret_module
from aotc.runtime.backends import triton_interp
from aotc.runtime.backends.address_fence import AddressFenceError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from fake_cuda import FakeDriver

TIMEOUT = 120
MAX_ALLOC = 1 << 30


class Violation(BaseException):
    """Something the sweep must never see. A BaseException, so no ``except Exception`` on the way (the reader's
    last resort, a backend's error wrapping) can turn a hang the alarm interrupts into a typed refusal."""


def small_env(graph: Graph) -> dict[str, int]:
    """Each symbol at a small value in its range (2, or its min), on its multiple."""
    env = {}
    for s in graph.symbols:
        v = max(s.min, min(2, s.max))
        v = -(-v // s.multiple_of) * s.multiple_of
        env[s.name] = v if v <= s.max else s.max // s.multiple_of * s.multiple_of
    return env


def feeds_for(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    env = small_env(graph)
    out = {}
    for name, v in zip(graph.input_names[: graph.num_feeds], graph.inputs):  # a state is the session's
        shape = tuple(evaluate(d, env) for d in v.type.shape)
        dt = v.type.dtype.np
        if dt == np.bool_:
            out[name] = rng.integers(0, 2, shape).astype(bool)
        elif dt.kind in "iu":
            out[name] = rng.integers(0, 3, shape).astype(dt)
        else:
            out[name] = rng.standard_normal(shape).astype(dt)
    return out


def leaves(tree: Any) -> list[np.ndarray]:
    if isinstance(tree, np.ndarray):
        return [tree]
    if isinstance(tree, Mapping):
        return [x for v in tree.values() for x in leaves(v)]
    if isinstance(tree, (list, tuple)):
        return [x for v in tree for x in leaves(v)]
    return [np.asarray(tree)]


def same(a: list[np.ndarray], b: list[np.ndarray], tol: float = 1e-3) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.dtype.kind == "f" and not np.allclose(x, y, rtol=tol, atol=tol, equal_nan=True):
            return False
        if x.dtype.kind != "f" and not np.array_equal(x, y):
            return False
    return True


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def fire(*_: Any) -> None:
        raise Violation(f"hang: a call ran past {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class _Counting(types.ModuleType):
    """numpy for the interpret backend, with the bytes of each array it allocates recorded."""

    def __init__(self, seen: list[int]) -> None:
        super().__init__("numpy")
        self._seen = seen

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    def empty(self, shape: Any, dtype: Any = float, *args: Any, **kwargs: Any) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self._seen.append(n)
        if n > MAX_ALLOC:
            raise Violation(f"the interpret backend allocates {n} bytes")
        return np.empty(shape, dtype, *args, **kwargs)


def run(art: Artifact, feeds: Mapping[str, np.ndarray], ref: list[np.ndarray] | None) -> tuple[str, list]:
    """Call ``art`` on every backend it runs on; (what happened, the cpu outputs). Raises Violation."""
    outs: dict[str, list[np.ndarray]] = {}
    refusals = []
    with deadline(TIMEOUT), mock.patch.object(triton_interp, "CHECK_EXTENTS", True):
        for device in ("cpu", "interpret", "cuda"):
            if device != "cpu" and art.variants[0].plan is None:
                continue
            if device == "cuda" and (not art.kernels or art.variants[0].graph.states):
                continue  # the cuda backend keeps no state yet
            try:
                outs[device] = _call(art, device, feeds)
            except Violation:
                raise
            except AddressFenceError as e:
                raise Violation(f"out of bounds on {device}: {e}") from None
            except AotcError as e:
                refusals.append(f"{device}:{type(e).__name__}")
            except Exception as e:
                raise Violation(f"untyped error on {device}: {type(e).__name__}: {e}") from e
    got = list(outs.values())
    if any(not same(got[0], g) for g in got[1:]):
        raise Violation(f"the backends disagree: {sorted(outs)}")
    label = "ran" if not refusals else "refused at the call (" + ", ".join(sorted(set(refusals))) + ")"
    if got and ref is not None and not same(got[0], ref):
        label += ", outputs differ"
    return label, got[0] if got else []


def _call(art: Artifact, device: str, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    if device == "cuda":
        from aotc.runtime.backends.cuda import CudaBackend

        fake = FakeDriver(memory=MAX_ALLOC)
        fake.register(art.variants[0].plan, art.kernels)
        asked: list[int] = []
        alloc, pooled = fake.cuMemAlloc, fake.cuMemAllocFromPoolAsync
        fake.cuMemAlloc = lambda n: (asked.append(n), alloc(n))[1]  # type: ignore[method-assign]
        fake.cuMemAllocFromPoolAsync = lambda n, *a: (asked.append(n), pooled(n, *a))[1]  # type: ignore[method-assign]
        try:
            with Executable(art, CudaBackend(driver=fake)) as exe:
                out = leaves(exe(**{k: v.copy() for k, v in feeds.items()}))
        finally:
            if fake.faults:
                raise Violation(f"out of bounds on the fake GPU: {fake.faults[0]}")
            if any(n > MAX_ALLOC for n in asked):
                raise Violation(f"the cuda backend asks the GPU for {max(asked)} bytes")
        return out
    seen: list[int] = []
    with mock.patch.object(interpret_module, "np", _Counting(seen)):
        return leaves(call_once(Executable(art, device), {k: v.copy() for k, v in feeds.items()}))


def call_once(exe: Executable, feeds: Mapping[str, np.ndarray]) -> Any:
    """One call: in a fresh session for a model that keeps state (its states at their initial values)."""
    return (exe.session() if exe.stateful else exe)(**feeds)


def tally(outcomes: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
