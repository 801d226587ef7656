"""The GPU check's ``tune`` step (scripts/gpu_check.sh): time a tuning bundle's candidates on GPU 0 and write
the results for scripts/tune_merge.py (aotc/runtime/backends/cuda/tune_run.py does the timing).

    python scripts/tune_run.py BUNDLE.zip --out OUT/tune_results.json [--budget 80]
    python scripts/tune_run.py BUNDLE.zip --out OUT/tune_results.json --fake   # no GPU: the test suite's fake
                                                                               # driver (a bundle built --sources)
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aotc.runtime.backends.cuda.tune_run import run_bundle  # noqa: E402


def fake_driver(bundle: Path):
    """The fake driver, taught each candidate's kernel (it runs the Triton source under the interpreter)."""
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from fake_cuda import FakeDriver

    with zipfile.ZipFile(bundle) as z:
        if "kernels.pickle" not in z.namelist():
            raise SystemExit(f"{bundle}: built without --sources, which the fake driver needs")
        kernels = pickle.loads(z.read("kernels.pickle"))  # written by scripts/tune_bundle.py of this repository
    drv = FakeDriver()
    return drv, lambda binary: drv.register_kernel(kernels[binary.name], binary)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=80.0, help="seconds for loading and timing (default 80)")
    parser.add_argument("--max-reps", type=int, default=100, help="launches per timed block at most")
    parser.add_argument("--fake", action="store_true", help="the fake driver (a dry run with no GPU)")
    args = parser.parse_args()
    driver, hook = fake_driver(args.bundle) if args.fake else (None, None)
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write(result: dict) -> None:
        args.out.write_text(json.dumps(result, indent=1))

    result = run_bundle(args.bundle, driver, args.budget, max_reps=args.max_reps, on_binary=hook, checkpoint=write)
    write(result)
    timed = [c for k in result["keys"] for c in k["candidates"] if len(c.get("ms", [])) == 2]
    failed = [c for k in result["keys"] for c in k["candidates"] if "error" in c]
    print(f"tune: {len(timed)} candidates timed twice, {len(failed)} failed, {result['elapsed_s']} s on "
          f"{result['gpu']['name']}; results in {args.out}")  # fmt: skip
    for k in result["keys"]:
        ok = [c for c in k["candidates"] if len(c.get("ms", [])) == 2]
        if not ok:
            print(f"  {k['label']}: nothing timed {k.get('note', '')}")
            continue
        best = min(ok, key=lambda c: sum(c["ms"]))
        base = next((c for c in ok if c["heuristic"]), None)
        ratio = f", {sum(base['ms']) / sum(best['ms']):.2f}x the heuristic" if base else ""
        print(f"  {k['label']}: best {best['tiles']} {min(best['ms']):.4f} ms{ratio}")
    return 0 if timed else 1


if __name__ == "__main__":
    sys.exit(main())
