"""The GPU check's ``tune`` step: time every candidate of a tuning bundle (aotc/kernels/tuned/bundle.py built it,
here with no compiler) with CUDA events, and write the results as JSON for scripts/tune_merge.py.

Each cubin is loaded with the cuda backend's loader (modules.py) and launched through its ``Launch``; each
key's buffers are allocated ``ROTATE`` times and every launch takes the next set, so a candidate never reads
what the one before left in L2. Timing is ``profile.timed`` (events around one launch block), the same primitive
``--autotune``'s profile uses. Each candidate is timed in two rounds (forward, then backward order, so drift
over the run favours no one), each round ``blocks`` blocks interleaved across the key's candidates, and its
round's time is the median block's per-launch time. The budget is split over keys and candidates up front
from one probe launch of each key's heuristic; a key the budget cannot reach is reported untimed. Clocks,
temperature, power and throttle reasons are read from ``nvidia-smi`` before, between and after the rounds.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aotc.errors import AotcError
from aotc.ir.launch import Cubin, KernelBinary, LaunchMeta
from aotc.runtime.backends.cuda.driver import Device
from aotc.runtime.backends.cuda.launch import Launch, Params
from aotc.runtime.backends.cuda.modules import load_kernel, unload
from aotc.runtime.backends.cuda.profile import timed

RESULTS_FORMAT = 1
ROTATE = 3  # buffer sets per key
ROUNDS = 2
BLOCKS = 3
MAX_REPS = 100
SHARE = 0.6
# A 32-bit fill per dtype: small finite values (1/128-ish), so no input is NaN, Inf or denormal.
FILL = {"bfloat16": 0x3C003C00, "float16": 0x20002000, "float32": 0x3C000000}
CLOCK_FIELDS = "name,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active"


def read_bundle(path: str | Path) -> tuple[dict[str, Any], zipfile.ZipFile]:
    z = zipfile.ZipFile(path)
    try:
        index = json.loads(z.read("index.json"))
    except (KeyError, ValueError) as e:
        z.close()
        raise AotcError(f"tune bundle {path}: no readable index.json ({e})") from None
    if index.get("format") != 1:
        z.close()
        raise AotcError(f"tune bundle {path}: format {index.get('format')!r}, expected 1")
    return index, z


def clocks() -> dict[str, Any]:
    """The GPU's clocks and state now (``nvidia-smi``), or why they could not be read."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={CLOCK_FIELDS}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:
        return {"t": time.time(), "error": f"nvidia-smi: {type(e).__name__}"}
    if out.returncode != 0:
        return {"t": time.time(), "error": out.stderr.strip()[:200]}
    first = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    return {"t": time.time(), **dict(zip(CLOCK_FIELDS.split(","), (v.strip() for v in first.split(","))))}


def run_bundle(
    path: str | Path,
    driver: Any = None,
    budget_s: float = 80.0,
    log: Any = print,
    max_reps: int = MAX_REPS,
    on_binary: Any = None,
    checkpoint: Any = None,
) -> dict[str, Any]:
    """Time ``path``'s candidates on GPU 0 (``driver``: the cuda bindings, or a fake) within about ``budget_s``,
    at most ``max_reps`` launches a block; ``on_binary(binary)`` sees each KernelBinary before it loads (the fake
    driver learns its kernel there); ``checkpoint(result)`` gets the results so far after each round (a step
    killed by its timeout keeps its first round)."""
    began = time.perf_counter()
    index, z = read_bundle(path)
    dev = Device(driver)
    info = dev.info
    result: dict[str, Any] = {
        "format": RESULTS_FORMAT, "bundle": str(path), "arch": index["arch"], "toolchain": index["toolchain"],
        "gpu": {"name": info.name, "sm_count": _sm_count(dev), "arch": info.arch, "driver": info.driver_cuda},
        "clocks": [clocks()], "keys": [],
    }  # fmt: skip
    stream = dev.stream()
    keys: list[_Key] = []
    events = (dev.get("cuEventCreate", dev.drv.cuEventCreate(0)), dev.get("cuEventCreate", dev.drv.cuEventCreate(0)))
    try:
        for raw in index["keys"]:
            keys.append(_Key(dev, stream, z, raw, max_reps, on_binary))
        loaded = time.perf_counter() - began
        log(f"tune: {sum(len(k.ready) for k in keys)} candidates of {len(keys)} keys loaded in {loaded:.1f} s")
        for k in keys:
            k.probe(events)
        # Blocks are sized by the heuristic's time; slower candidates take longer than their share: plan for 60%.
        left = SHARE * (budget_s - (time.perf_counter() - began))
        per_key = _split(keys, left)
        for r in range(ROUNDS):
            for k, share in zip(keys, per_key):
                if time.perf_counter() - began > budget_s:
                    k.note = k.note or f"budget of {budget_s:.0f} s spent before round {r + 1}"
                    continue
                k.round(events, r, share / ROUNDS)
            result["clocks"].append(clocks())
            log(f"tune: round {r + 1} done at {time.perf_counter() - began:.1f} s")
            if checkpoint is not None:
                checkpoint({**result, "keys": [k.report() for k in keys], "partial": r + 1 < ROUNDS})
        result["keys"] = [k.report() for k in keys]
    finally:
        for k in keys:
            k.close()
        for e in events:
            dev.destroy_event(e)
        dev.destroy_stream(stream)
        z.close()
        dev.release()
    result["elapsed_s"] = round(time.perf_counter() - began, 2)
    return result


def _sm_count(dev: Device) -> int:
    attr = getattr(dev.drv.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", None)
    if attr is None:
        return 0
    err, n = dev.drv.cuDeviceGetAttribute(attr, dev.dev)
    return int(n) if err == dev._success else 0


def _split(keys: list[_Key], seconds: float) -> list[float]:
    """Each key's share of the timing budget: by its candidate count (every candidate gets the same time)."""
    total = sum(len(k.ready) for k in keys) or 1
    return [max(seconds, 0.0) * len(k.ready) / total for k in keys]


class _Key:
    """One key's buffers (ROTATE sets) and loaded candidates."""

    def __init__(
        self, dev: Device, stream: Any, z: zipfile.ZipFile, raw: Mapping[str, Any], max_reps: int, on_binary: Any
    ) -> None:
        self.dev, self.stream, self.raw = dev, stream, raw
        self.max_reps, self.on_binary = max_reps, on_binary
        self.note = ""
        self.sets: list[dict[int, int]] = []
        self.owned: list[int] = []
        self.ready: list[dict[str, Any]] = []  # candidates that loaded: row, launch, params per set, grid
        self.failed: list[dict[str, Any]] = []
        self.probe_ms = 0.0
        try:
            for _ in range(ROTATE):
                self.sets.append({b["value"]: self._buffer(b["bytes"], b["dtype"]) for b in raw["buffers"]})
        except AotcError as e:
            self.note = f"buffers: {e}"
            return
        for c in raw["candidates"]:
            if "error" in c:
                self.failed.append({**_row(c), "error": "compile: " + c["error"]})
                continue
            try:
                self.ready.append(self._load(z, c))
            except AotcError as e:
                self.failed.append({**_row(c), "error": f"load: {e}"})

    def _buffer(self, nbytes: int, dtype: str) -> int:
        ptr = self.dev.alloc(nbytes, "a tuning buffer")
        self.owned.append(ptr)
        value = FILL.get(dtype, 0)
        self.dev.check("cuMemsetD32Async", self.dev.drv.cuMemsetD32Async(ptr, value, nbytes // 4, self.stream))
        return ptr

    def _load(self, z: zipfile.ZipFile, c: Mapping[str, Any]) -> dict[str, Any]:
        m = dict(c["meta"])
        meta = LaunchMeta(**{**m, "params": tuple(m["params"]), "constexprs": tuple(map(tuple, m["constexprs"]))})
        data = z.read(c["cubin"])
        binary = KernelBinary(c["name"], (Cubin(meta.arch.rstrip("a"), data, meta),), "", meta)
        if self.on_binary is not None:
            self.on_binary(binary)
        t0 = time.perf_counter()
        loaded = load_kernel(self.dev, binary)
        load_ms = (time.perf_counter() - t0) * 1e3
        launch = Launch(SimpleNamespace(name=c["name"]), loaded)  # type: ignore[arg-type]  # only its name is read
        grid = tuple(c["grid"])
        scratch = [self.dev.alloc(n, "a tuning scratch buffer") for n in launch.scratch_bytes(grid)]  # type: ignore[arg-type]
        self.owned += scratch
        flags = 0
        if any("flags" in a for a in c["args"]):
            flags = self._buffer(4 * max(a.get("flags", 1) for a in c["args"]), "int32")
        prepared = []
        for bufs in self.sets:
            values = [bufs[a["buffer"]] if "buffer" in a else a["int"] if "int" in a else flags for a in c["args"]]
            params = Params(len(meta.params))
            launch.pack(params, [*values, *scratch])
            prepared.append((params, launch.args(grid, params)))  # type: ignore[arg-type]
        return {"row": c, "launch": launch, "loaded": loaded, "prepared": prepared, "ms": [], "load_ms": load_ms}

    def _block(self, events: tuple[Any, Any], c: dict[str, Any], reps: int, start: int) -> float:
        def work() -> None:
            for i in range(reps):
                c["launch"].launch_args(self.dev, self.stream, c["prepared"][(start + i) % ROTATE][1])

        return timed(self.dev, self.stream, events, work) / reps

    def probe(self, events: tuple[Any, Any]) -> None:
        """One warm-up launch of every candidate (the first launch pays for module setup), then the heuristic's
        time, which sizes every candidate's blocks."""
        for c in self.ready:
            self._block(events, c, 1, 0)
        if self.ready:
            base = next((c for c in self.ready if c["row"]["heuristic"]), self.ready[0])
            self.probe_ms = max(self._block(events, base, 1, 1), 1e-3)

    def round(self, events: tuple[Any, Any], r: int, seconds: float) -> None:
        if not self.ready:
            return
        per_block_ms = seconds * 1e3 / (len(self.ready) * BLOCKS)
        reps = int(min(self.max_reps, max(1, per_block_ms // self.probe_ms)))
        order = self.ready if r % 2 == 0 else self.ready[::-1]
        times: dict[int, list[float]] = {id(c): [] for c in order}
        for b in range(BLOCKS):
            for c in order:
                times[id(c)].append(self._block(events, c, reps, b))
        for c in order:
            c["ms"].append(statistics.median(times[id(c)]))
            c["reps"] = reps

    def report(self) -> dict[str, Any]:
        rows = [{**_row(c["row"]), "ms": c["ms"], "reps": c.get("reps", 0), "load_ms": round(c["load_ms"], 2)}
                for c in self.ready]  # fmt: skip
        out = {"id": self.raw["id"], "label": self.raw["label"], "kernel": self.raw["kernel"],
               "probe_ms": self.probe_ms, "candidates": rows + self.failed}  # fmt: skip
        if self.note:
            out["note"] = self.note
        return out

    def close(self) -> None:
        for c in self.ready:
            unload(self.dev, c["loaded"])
        self.ready = []
        for ptr in self.owned:
            self.dev.free(ptr)
        self.owned = []


def _row(c: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": c["name"], "tiles": c["tiles"], "heuristic": c["heuristic"]}
