"""Builds what the GPU check carries, on a machine with no GPU (scripts/gpu_prep.sh runs it twice: under the
GPU image's Triton and under the newest one).

    python scripts/gpu_prep.py cache CARRY       # under the GPU image's triton (3.6): fill CARRY/cache
    python scripts/gpu_prep.py artifacts CARRY   # under any triton: CARRY/smoke/*.aotc and CARRY/models/*

``cache`` compiles everything the GPU check compiles there (tests/runtime/test_cuda_gpu.py's artifacts and
every benchmark case), so that on the GPU machine, whose Triton is the same release, every kernel is a cache hit
and nothing is compiled. ``artifacts`` writes, with this Triton:

- ``smoke/<toolchain>.aotc``: a small bf16 MLP (three tensor-core matmuls with fused epilogues) for
  each toolchain worth knowing about: this Triton at the default driver floor (12.4), at a CUDA 13.0 floor,
  and as Triton builds by itself (its newest PTX, and for sm_90 the CUDA 13.4 ptxas of Triton 3.9). The GPU
  check loads every cubin and PTX of each with no fallback and records what the driver accepted;
- ``models/<name>.aotc`` and ``models/<name>.npz``: every example model (small configs) with inputs at two
  shapes and the cpu backend's outputs, so the GPU runs files built here and compares to answers made here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aotc  # noqa: E402
from aotc.lowering.options import CompileOptions  # noqa: E402

TARGETS = ("sm_80", "sm_90")  # what an sm_90 GPU's check compiles (test_cuda_gpu, benchmarks)


def _triton() -> str:
    from importlib import metadata

    return metadata.version("triton")


def _newest_ptxas_major() -> int:
    from aotc.kernels.toolchain import available_ptxas

    return max(p.release[0] for p in available_ptxas())


def smoke_model() -> tuple[aotc.nn.Module, dict[str, aotc.TensorSpec]]:
    from aotc_cli.loader import import_file

    return import_file(ROOT / "models" / "mlp.py").build(d_in=64, d_hidden=128, d_out=32)


def toolchains() -> dict[str, str]:
    """Name -> CUDA driver floor: each toolchain the smoke step loads, for this Triton."""
    tag = "triton" + _triton().replace(".", "")[:2]  # triton36, triton39
    out = {f"{tag}-floor12.4": "12.4"}
    if _newest_ptxas_major() >= 13:
        out[f"{tag}-floor13.0"] = "13.0"
        out[f"{tag}-as-triton-builds"] = "13.4"  # Triton 3.9's own choice: ptxas 13.4, PTX 9.4
    else:
        out[f"{tag}-as-triton-builds"] = "12.8"  # Triton 3.6's own choice: ptxas 12.8, PTX 8.7
    return out


def build_smoke(carry: Path) -> None:
    folder = carry / "smoke"
    folder.mkdir(parents=True, exist_ok=True)
    for name, floor in toolchains().items():
        model, inputs = smoke_model()
        options = CompileOptions(targets=TARGETS, precision="bf16", cuda_driver_floor=floor)
        start = time.perf_counter()
        aotc.compile(model, inputs, name="smoke_mlp", options=options).save(folder / f"{name}.aotc")
        print(f"smoke/{name}.aotc (floor {floor}) in {time.perf_counter() - start:.1f} s", flush=True)


def build_models(carry: Path) -> None:
    from aotc.runtime import Executable
    from aotc_cli.loader import import_file
    from tests.kernel_layer.model_kit import CONFIGS, DIMS, MODELS, feeds

    folder = carry / "models"
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted(DIMS):
        start = time.perf_counter()
        model, inputs = import_file(MODELS / f"{name}.py").build(**CONFIGS[name])
        compiled = aotc.compile(model, inputs, name=name, options=CompileOptions(targets=TARGETS))
        path = folder / f"{name}.aotc"
        compiled.save(path)
        art = aotc.runtime.load(path, device="cpu").artifact
        cpu = Executable(art, "cpu")
        stored: dict[str, np.ndarray] = {}
        for i, dims in enumerate(DIMS[name]):
            xs = feeds(name, art.variants[0].graph, dims, seed=i)
            for input_name, x in zip(cpu.input_names, xs):
                stored[f"case{i}_in_{input_name}"] = x
            for j, y in enumerate(cpu.run(dict(zip(cpu.input_names, xs)))):
                stored[f"case{i}_out_{j}"] = y
        np.savez(folder / f"{name}.npz", **stored)
        print(f"models/{name}.aotc and .npz in {time.perf_counter() - start:.1f} s", flush=True)


def build_cache(carry: Path) -> None:
    """Compile what the GPU check compiles there, into CARRY/cache (AOTC_CACHE_DIR must point at it)."""
    from aotc_cli.loader import import_file
    from tests.kernel_layer.model_kit import CONFIGS, MODELS

    for name in sorted(CONFIGS):  # test_cuda_gpu._artifact: targets (sm_80, sm_90) on an sm_90 GPU
        model, inputs = import_file(MODELS / f"{name}.py").build(**CONFIGS[name])
        aotc.compile(model, inputs, name=name, options=CompileOptions(targets=TARGETS))
        print(f"cache: test_cuda_gpu's {name}", flush=True)
    build_smoke(carry)  # the GPU image's own toolchains, loaded by the smoke step
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "bench_kernels.py"),
        "--compile-only",
        "--targets",
        ",".join(TARGETS),
    ]
    subprocess.run(cmd, check=True)
    # the tma step's attention at a 12.8 floor, where sm_90 loads q, k, v through tensor descriptors
    tma = [*cmd[:2], "attention", *cmd[2:]]
    subprocess.run(tma, check=True, env={**os.environ, "AOTC_CUDA_DRIVER_FLOOR": "12.8"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("cache", "artifacts"))
    parser.add_argument("carry", type=Path)
    args = parser.parse_args()
    args.carry.mkdir(parents=True, exist_ok=True)
    if args.what == "cache":
        build_cache(args.carry)
    else:
        build_smoke(args.carry)
        build_models(args.carry)
    (args.carry / f"built-{args.what}-triton{_triton()}.json").write_text(
        json.dumps({"triton": _triton(), "python": sys.version.split()[0], "numpy": np.__version__}) + "\n"
    )


if __name__ == "__main__":
    main()
