"""The GPU check's first two steps over what scripts/gpu_prep.sh carried (needs only what ``import aotc.runtime``
needs, plus cuda-bindings):

    python scripts/gpu_smoke.py smoke CARRY [--jsonl FILE] [--fake]    # which toolchains' images the driver loads
    python scripts/gpu_smoke.py models CARRY [--jsonl FILE] [--fake]   # carried example models: cuda == cpu

``smoke`` loads every cubin and the PTX of every kernel of each ``CARRY/smoke/*.aotc`` exactly as stored, with
no fallback, and records what the driver accepted (with the image's PTX ISA, its ptxas release and its ELF
ABI); then it runs each file whose images all loaded on the cuda backend and compares with the cpu backend.
``models`` runs each ``CARRY/models/*.aotc`` (built with the newest Triton) at the shapes stored beside it and
compares with the cpu outputs computed where it was built, eagerly and from the CUDA graph.
``--fake`` uses the test suite's fake driver (kernels under the Triton interpreter): the dry run CI makes of
this script. Each result is a line on stdout and a JSON row in ``--jsonl``; the exit status is 1 if a
comparison failed (a load the driver refused is a finding, not a failure).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aotc.artifact.reader import Artifact, read_artifact  # noqa: E402
from aotc.runtime import Executable  # noqa: E402
from aotc.runtime.backends.cuda import CudaBackend  # noqa: E402
from aotc.runtime.backends.cuda.modules import Image, load_image, unload  # noqa: E402

TOL = {"rtol": 2e-3, "atol": 2e-3}  # float32 models; the smoke model is bf16 (its own tolerance below)


class Report:
    def __init__(self, path: Path | None) -> None:
        self.file = path.open("a") if path is not None else None
        self.failed = False

    def row(self, step: str, line: str, **fields: Any) -> None:
        print(f"{step}: {line}", flush=True)
        if self.file is not None:
            self.file.write(json.dumps({"bench": step, **fields}, default=str) + "\n")
            self.file.flush()


def driver(fake: bool, arts: list[Artifact]) -> Any:
    if not fake:
        return None
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from fake_cuda import FakeDriver

    drv = FakeDriver()
    for art in arts:
        for v in art.variants:
            if v.plan is not None:
                drv.register(v.plan, art.kernels)
    return drv


def elf_abi(data: bytes) -> str:
    return f"0x{data[7]:02x}/{data[8]}" if data[:4] == b"\x7fELF" else "not ELF"


def carried(carry: Path, step: str, report: Report) -> list[Path]:
    """The artifacts gpu_prep.sh carried for ``step`` (its folder); none is a failure of the step."""
    paths = sorted((carry / step).glob("*.aotc"))
    if not paths:
        report.failed = True
        report.row(step, f"no artifacts under {carry / step}: run scripts/gpu_prep.sh first", error="no carry")
    return paths


def smoke(carry: Path, report: Report, fake: bool) -> None:
    for path in carried(carry, "smoke", report):
        art, toolchain = read_artifact(path), path.stem
        # The fake driver knows kernels by name, and names repeat across files: one fake per file.
        with CudaBackend(driver=driver(fake, [art])) as backend:
            dev = backend.device
            all_loaded = True
            for binary in art.kernels.values():
                images = [Image("cubin", c.arch, c.data, c.meta) for c in binary.cubins]
                images.append(Image("ptx", "ptx", binary.ptx.encode() + b"\0", binary.ptx_meta))
                for image in images:
                    fields = {
                        "toolchain": toolchain,
                        "floor": art.cuda_driver_floor,
                        "kernel": binary.name,
                        "image": image.arch if image.kind == "cubin" else "ptx",
                        "isa": image.meta.arch,
                        "ptx": image.meta.ptx_version,
                        "ptxas": image.meta.ptxas_version,
                        "triton": image.meta.triton_version,
                        "elf": elf_abi(image.data) if image.kind == "cubin" else "",
                        "driver": dev.info.driver_cuda,
                        "gpu": dev.info.name,
                    }
                    what = f"{toolchain} {binary.name} {fields['image']} ({image.meta.arch}, PTX {fields['ptx']}, ptxas {fields['ptxas'] or '?'})"
                    start = time.perf_counter()
                    try:
                        loaded = load_image(dev, binary.name, image)
                    except Exception as e:  # every refusal is the finding this step records
                        name = getattr(e, "name", type(e).__name__)
                        report.row(
                            "smoke",
                            f"{what}: refused ({name})",
                            case="load",
                            loaded=False,
                            error=name,
                            detail=str(e),
                            **fields,
                        )
                        if image.meta.arch == dev.info.arch + "a" or image.kind == "ptx":
                            all_loaded = False
                        continue
                    ms = (time.perf_counter() - start) * 1e3
                    unload(dev, loaded)
                    report.row(
                        "smoke", f"{what}: loaded in {ms:.1f} ms", case="load", loaded=True, load_ms=ms, **fields
                    )
            if not all_loaded:
                report.row("smoke", f"{toolchain}: an image this GPU would use was refused", toolchain=toolchain)
            floor = tuple(int(p) for p in art.cuda_driver_floor.split("."))
            if dev.info.driver_version < floor[0] * 1000 + floor[1] * 10:
                report.row(
                    "smoke",
                    f"{toolchain}: not run (its floor {art.cuda_driver_floor} is above this driver's "
                    f"{dev.info.driver_cuda}: the runtime refuses it, as it should)",
                    case="run",
                    toolchain=toolchain,
                    skipped=True,
                )
                continue
            run_model(report, "smoke", toolchain, art, backend, {"rtol": 3e-2, "atol": 3e-2}, smoke_feeds(art))


def smoke_feeds(art: Artifact) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    shape = art.variants[0].graph.inputs[0].type.shape
    return [{"x": rng.standard_normal((b, *shape[1:])).astype(np.float32)} for b in (3, 17)]


def run_model(
    report: Report,
    step: str,
    name: str,
    art: Artifact,
    backend: CudaBackend,
    tol: dict[str, float],
    cases: list[dict[str, np.ndarray]],
    expected: list[list[np.ndarray]] | None = None,
) -> None:
    """cuda == cpu (or the stored outputs) per case, eagerly, then from the CUDA graph (second and third call)."""
    try:
        exe = Executable(art, backend)
    except Exception as e:
        report.failed = True
        report.row(
            step, f"{name}: does not load on cuda: {type(e).__name__}: {e}", case="run", model=name, error=str(e)
        )
        return
    cpu = Executable(art, "cpu")
    for i, feeds in enumerate(cases):
        dims = {k: list(v.shape) for k, v in feeds.items()}
        try:
            want = expected[i] if expected is not None else cpu.run(feeds)
            got = [exe.run(feeds) for _ in range(3)]  # eager, captured, replayed
            err = max(float(np.max(np.abs(g.astype(np.float64) - w))) if w.size else 0.0 for g, w in zip(got[0], want))
            for a, b in zip(got[0], want):
                np.testing.assert_allclose(a, b, **tol)
            same = all(a.tobytes() == b.tobytes() for run in got[1:] for a, b in zip(run, got[0]))
        except Exception as e:
            report.failed = True
            report.row(
                step,
                f"{name} {dims}: FAILED {type(e).__name__}: {e}",
                case="run",
                model=name,
                shape=dims,
                ok=False,
                error=str(e),
            )
            continue
        if not same:
            report.failed = True
        report.row(
            step,
            f"{name} {dims}: cuda == cpu (max |diff| {err:.2e}); graph replay == eager bit for bit: {same}",
            case="run",
            model=name,
            shape=dims,
            ok=same,
            max_abs_diff=err,
            replay_equal=same,
        )


def models(carry: Path, report: Report, fake: bool) -> None:
    for path in carried(carry, "models", report):
        art = read_artifact(path)
        stored = np.load(path.with_suffix(".npz"))
        n = 1 + max(int(k.split("_")[0][4:]) for k in stored.files)
        cases, expected = [], []
        for i in range(n):
            cases.append({k.split("_in_", 1)[1]: stored[k] for k in stored.files if k.startswith(f"case{i}_in_")})
            outs = sorted(
                (k for k in stored.files if k.startswith(f"case{i}_out_")), key=lambda k: int(k.rsplit("_", 1)[1])
            )
            expected.append([stored[k] for k in outs])
        with CudaBackend(driver=driver(fake, [art])) as backend:
            run_model(report, "models", path.stem, art, backend, TOL, cases, expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("smoke", "models"))
    parser.add_argument("carry", type=Path)
    parser.add_argument("--jsonl", type=Path)
    parser.add_argument("--fake", action="store_true", help="the fake driver (a dry run with no GPU)")
    args = parser.parse_args()
    report = Report(args.jsonl)
    (smoke if args.what == "smoke" else models)(args.carry, report, args.fake)
    raise SystemExit(1 if report.failed else 0)


if __name__ == "__main__":
    main()
