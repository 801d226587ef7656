"""What bench_cuda.py and bench_kernels.py share.

- ``gpu_targets``: the GPU targets a timed run compiles for on a GPU of a given compute capability. It is the
  one place that choice is made: ``--compile-only --targets ...`` fills the kernel cache for exactly what a
  timed run on that GPU asks for, so the timed run (which must never compile kernels) finds every one.
- ``compile_model``: the one ``aotc.compile`` call both benchmarks make (timed run, ``--compile-only`` and
  ``--check`` alike), with the kernel cache's entries counted before and after, so a run says how many kernel
  binaries it compiled and how many it found in the cache.
- ``Recorder``: each measured row printed as soon as it is measured (flushed) and appended to a JSONL file
  (``--jsonl PATH``, flushed per row); a case that fails writes a row with ``"error"`` and the run goes on.
- ``interleaved`` / ``per_call_ms``: timing on a GPU, each call synchronized before the clock is read.
- ``gpt2_model``: models/gpt2.py with weights drawn fast and in place (float32; precision casts them later).

Importing this module needs neither torch nor a GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
if str(ROOT) not in sys.path:  # models/ and the cli package import as they do for `aotc compile`
    sys.path.insert(0, str(ROOT))

import aotc  # noqa: E402
from aotc.kernels.cache import KernelCache  # noqa: E402
from aotc.lowering.options import CompileOptions, check_targets, parse_targets  # noqa: E402

# The oldest target aotc compiles for: its PTX is what a GPU with no fitting cubin JITs.
BASE_TARGET = "sm_80"


def gpu_targets(capability: tuple[int, int]) -> tuple[str, ...]:
    """The targets a timed run compiles for on a GPU of this compute capability: sm_80 and the GPU's own
    (an sm_90 GPU: ("sm_80", "sm_90"), aotc's default targets). ``--compile-only --targets`` names the same
    list to fill the cache for that GPU."""
    major, minor = capability
    return check_targets((BASE_TARGET, f"sm_{major}{minor}"))


def targets_from_flag(text: str) -> tuple[str, ...]:
    """``--targets sm_80,sm_90`` as a checked tuple; ValueError for an empty list or one no GPU would use."""
    targets = parse_targets(text)
    if not targets:
        raise ValueError("--targets needs at least one GPU target, such as sm_80,sm_90")
    if targets != gpu_targets(_capability(targets[-1])):
        raise ValueError(
            f"--targets {','.join(targets)} is not what a timed run compiles for on any GPU, so its cache would "
            f"not be hit; a {targets[-1]} GPU compiles for {','.join(gpu_targets(_capability(targets[-1])))}"
        )
    return targets


def _capability(target: str) -> tuple[int, int]:
    digits = target.removeprefix("sm_")
    return int(digits[:-1]), int(digits[-1])


# -- compiling, with the kernel cache counted ----------------------------------------------------------------


def cache_entries() -> int:
    """How many compiled kernels the kernel cache (AOTC_CACHE_DIR, else ~/.cache/aotc) holds."""
    root = KernelCache().root
    if not root.is_dir():
        return 0
    return sum(1 for p in root.glob("*/*.json") if not p.name.startswith(".tmp-"))


def binary_jobs(compiled: aotc.CompiledModel) -> int:
    """How many (kernel, target) binaries the compile needed: each cubin, and the PTX's when no cubin of the
    same target carried it (the cache holds one entry per pair)."""
    jobs: set[tuple[str, str]] = set()
    for b in compiled.kernels.binaries.values():
        jobs.update((b.name, c.arch) for c in b.cubins)
        found = re.match(r"sm_\d+", b.ptx_meta.arch)
        jobs.add((b.name, found.group(0) if found else b.ptx_meta.arch))
    return len(jobs)


@dataclasses.dataclass
class CacheTally:
    """Kernel binaries compiled vs. found in the cache, over every ``compile_model`` call of a run."""

    compiled: int = 0
    found: int = 0

    def line(self) -> str:
        return (
            f"kernel cache {KernelCache().root}: {self.compiled} kernel binaries compiled, {self.found} found in "
            f"the cache; it holds {cache_entries()} entries, {cache_megabytes():.1f} MB"
        )


TALLY = CacheTally()


def cache_megabytes() -> float:
    root = KernelCache().root
    return sum(p.stat().st_size for p in root.glob("*/*.json")) / 1e6 if root.is_dir() else 0.0


def compile_model(
    built: tuple[Any, Mapping[str, Any]], name: str, targets: tuple[str, ...], **options: Any
) -> tuple[aotc.CompiledModel, int]:
    """``aotc.compile`` with the options every path of both benchmarks uses, and how many kernel binaries it
    compiled (new cache entries; the rest were cache hits). Options come from the environment first, so the
    AOTC_NO_* switches that bisect a miscompile reach the benchmarks too (and both machines must agree)."""
    model, inputs = built
    opts = dataclasses.replace(CompileOptions.from_env(), targets=targets, **options)
    before = cache_entries()
    compiled = aotc.compile(model, inputs, name=name, options=opts)
    new = max(cache_entries() - before, 0) if targets else 0
    TALLY.compiled += new
    TALLY.found += max(binary_jobs(compiled) - new, 0) if targets else 0
    return compiled, new


# -- rows -----------------------------------------------------------------------------------------------------


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become None, numpy scalars plain numbers, tuples lists."""
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def shape_text(shape: Any) -> str:
    if isinstance(shape, Mapping):
        return "x".join(str(v) for v in shape.values()) + " (" + ",".join(shape) + ")"
    return str(shape)


class Recorder:
    """Measured rows: printed one line each as it comes (flushed), appended to ``jsonl`` (one object a line,
    flushed), kept for the closing table. ``context`` fields (GPU, versions, targets) go into every row."""

    def __init__(self, bench: str, jsonl: str | Path | None = None, out: TextIO | None = None) -> None:
        self.bench = bench
        self.jsonl = Path(jsonl) if jsonl else None
        self.out = out
        self.context: dict[str, Any] = {}
        self.rows: list[dict[str, Any]] = []
        if self.jsonl is not None:
            self.jsonl.parent.mkdir(parents=True, exist_ok=True)

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("error")]

    def add(
        self,
        case: str,
        shape: Any,
        *,
        dtype: str | None,
        aotc_ms: float,
        ref_name: str | None,
        ref_ms: float | None,
        aim: float | None = None,
        aim_text: str = "",
        meets: bool | None = None,
        aim_metric: str = "ratio",
        **extra: Any,
    ) -> dict[str, Any]:
        """One measured row. ``ratio`` is ref_ms / aotc_ms (above 1: aotc faster); ``meets`` defaults to
        ratio >= aim when ``aim`` is a number and ``aim_metric`` is "ratio"."""
        ratio = ref_ms / aotc_ms if ref_ms is not None and aotc_ms and aotc_ms > 0 else None
        if meets is None and aim is not None and aim_metric == "ratio" and ratio is not None:
            meets = ratio >= aim
        row = {
            "bench": self.bench, "case": case, "shape": shape, "dtype": dtype, "aotc_ms": aotc_ms,
            "ref_name": ref_name, "ref_ms": ref_ms, "ratio": ratio, "aim": aim, "aim_metric": aim_metric,
            "aim_text": aim_text, "meets": meets, **extra,
        }  # fmt: skip
        return self._emit(row)

    def error(
        self,
        case: str,
        shape: Any,
        error: BaseException | str,
        *,
        dtype: str | None = None,
        ref_name: str | None = None,
        aim: float | None = None,
        aim_text: str = "",
        aim_metric: str = "ratio",
        **extra: Any,
    ) -> dict[str, Any]:
        """A row for a case that failed: no times, ``meets`` null, ``error`` the exception's type and message."""
        message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        row = {
            "bench": self.bench, "case": case, "shape": shape, "dtype": dtype, "aotc_ms": None,
            "ref_name": ref_name, "ref_ms": None, "ratio": None, "aim": aim, "aim_metric": aim_metric,
            "aim_text": aim_text, "meets": None, "error": message, **extra,
        }  # fmt: skip
        return self._emit(row)

    @contextlib.contextmanager
    def attempt(self, case: str, shape: Any, **fields: Any) -> Iterator[None]:
        """Run one row's work: an exception becomes an error row (with ``fields``) and is swallowed, so the
        next row still runs."""
        try:
            yield
        except Exception as e:  # one row failing must not hide the others
            self.error(case, shape, e, **fields)
            release_gpu_memory()

    def _emit(self, row: dict[str, Any]) -> dict[str, Any]:
        row = _clean({**row, **self.context, "time": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        self.rows.append(row)
        print(self.line(row), file=self.out or sys.stdout, flush=True)
        if self.jsonl is not None:
            with self.jsonl.open("a") as f:
                f.write(json.dumps(row) + "\n")
                f.flush()
        return row

    @staticmethod
    def line(row: Mapping[str, Any]) -> str:
        head = f"[{row['bench']}] {row['case']} {shape_text(row['shape'])}" + (
            f" {row['dtype']}" if row.get("dtype") else ""
        )
        if row.get("error"):
            return f"{head}: FAILED: {row['error']}"
        text = f"{head}: aotc {row['aotc_ms']:.4f} ms"
        if row.get("kernels_ms") is not None:
            text += f" (its kernels alone {row['kernels_ms']:.4f} ms)"
        if row.get("ref_ms") is not None:
            text += f", {row['ref_name']} {row['ref_ms']:.4f} ms, ratio {row['ratio']:.2f}x"
        if row.get("aim_text"):
            met = {True: "yes", False: "NO", None: "n/a"}[row.get("meets")]
            text += f"; aim {row['aim_text']}: {met}"
        return text

    def table(self, columns: list[tuple[str, str]]) -> str:
        """The rows as an aligned table: ``columns`` are (header, row key); floats print to 4 places."""

        def cell(row: Mapping[str, Any], key: str) -> str:
            if row.get("error") and key not in ("case", "shape", "dtype"):
                return "FAILED" if key == "aotc_ms" else ""
            value = row.get(key)
            if key == "shape":
                return shape_text(value).split(" (")[0]
            if key == "meets":
                return {True: "yes", False: "NO", None: ""}[value]
            if isinstance(value, float):
                return f"{value:.4f}" if abs(value) < 1000 else f"{value:.0f}"
            return "" if value is None else str(value)

        body = [[h for h, _ in columns]] + [[cell(r, k) for _, k in columns] for r in self.rows]
        widths = [max(len(r[i]) for r in body) for i in range(len(columns))]
        return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body)


def release_gpu_memory() -> None:
    """Give torch's cached GPU memory back after a failed row (an out-of-memory error, say), if torch is in use."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


class DLPackOnly:
    """A torch CUDA tensor handed to aotc through DLPack alone. torch exports bfloat16 through
    ``__cuda_array_interface__`` with typestr '<V2', which aotc's array-interface path reads as void16 and
    refuses (GuardError "has dtype void16"); DLPack carries bfloat16's own type code."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.tensor.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return self.tensor.__dlpack_device__()


# -- timing ---------------------------------------------------------------------------------------------------


def interleaved(calls: Mapping[str, Callable[[], object]], sync: Callable[[], None], runs: int) -> dict[str, float]:
    """Median milliseconds per call of each, timed round-robin so drift hits all alike. Every call is timed
    to completion: the GPU is synchronized before the clock starts and before it stops (an aotc call on the
    GPU work queued by either side is inside the time: torch calls and aotc calls with device outputs return
    while their streams run, hence the synchronize)."""
    for call in calls.values():
        for _ in range(3):  # warm-up: module loads, CUDA graph capture (aotc's second call), torch.compile
            call()
    sync()
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(runs):
        for name, call in calls.items():
            sync()
            start = time.perf_counter()
            call()
            sync()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def per_call_ms(call: Callable[[], object], sync: Callable[[], None], calls: int = 200, repeats: int = 7) -> float:
    """Wall milliseconds per call of ``call`` run back to back (each call synchronized), median over repeats."""
    for _ in range(10):
        call()
    sync()
    means = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
            sync()
        means.append((time.perf_counter() - start) * 1e3 / calls)
    return statistics.median(means)


# -- models ---------------------------------------------------------------------------------------------------


def import_model_file(file: str) -> Any:
    from aotc_cli.loader import import_file

    return import_file(MODELS / f"{file}.py")


def gpt2_model(config: Mapping[str, int], seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """models/gpt2.py's model and input specs (as its ``build`` makes them), its weights drawn in place: standard
    normals in float32 (no float64 copy), scaled as ``random_weights`` scales them. GPT-2-small takes about a
    second and no memory beyond its parameters."""
    from aotc import Dim, TensorSpec

    module = import_model_file("gpt2")
    model = module.GPT2(**config)
    rng = np.random.default_rng(seed)
    state = model.state_dict()
    for name, arr in state.items():
        if arr.dtype != np.float32:
            continue
        rng.standard_normal(arr.shape, dtype=np.float32, out=arr)
        if arr.ndim == 2:
            fan_in = arr.shape[1] if name in ("wte.weight", "wpe.weight") else arr.shape[0]
            arr *= np.float32(1.0 / math.sqrt(fan_in))
        elif name.endswith(("ln_1.weight", "ln_2.weight")) or name == "ln_f.weight":
            arr *= np.float32(0.1)
            arr += np.float32(1.0)
        else:
            arr *= np.float32(0.05)
    fresh = model.state_dict()
    if not all(np.shares_memory(fresh[k], v) for k, v in state.items()):  # state_dict() gave copies: load them
        model.load_state_dict(state)
    batch = Dim("batch", min=1, max=64)
    seq = Dim("seq", min=1, max=config.get("n_positions", 128))
    return model, {"input_ids": TensorSpec((batch, seq), "int64")}
