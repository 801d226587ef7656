"""Where a missed aim's time goes: the slowest kernels of the measured call, each with its share of the kernels'
time and what it achieved (TFLOP/s for matmuls and attention, GB/s of the bytes its buffers span otherwise).

benchmarks/bench_kernels.py records a profile in every timed row (``profile``: the slowest kernels, launches of
one kernel code summed, as a layer's kernel runs in every layer) and prints, after its table, the profile of
every row whose aim it missed; scripts/gpu_report.py puts the same lines in report.md.

    python benchmarks/kernel_profile.py OUT/results.jsonl    # the missed aims' profiles of a recorded run
    python benchmarks/kernel_profile.py --fake matmul gpt2 [--jsonl OUT/results.jsonl]  # no GPU: the --check
        # artifacts profiled on the instant fake driver (0.25 ms per launch)

The ``--fake`` run is the GPU check's dry run of this path (GPU_CHECK_DRY=1): its figures are the fake driver's,
and every row counts as missed so that each profile prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

TOP = 5  # kernels listed per missed aim


def summarize(times: Iterable[Any], top: int = TOP) -> list[dict[str, Any]]:
    """The ``top`` kernels of one call by their summed time, from ``profile()``'s KernelTime rows (name, kind,
    ms, bytes, flops, mnk): launches of one kernel code grouped, each with its share of all kernels' time."""
    groups: dict[str, dict[str, Any]] = {}
    for t in times:
        g = groups.setdefault(
            t.name, {"kernel": t.name, "kind": t.kind, "launches": 0, "ms": 0.0, "flops": 0, "bytes": 0, "mnk": t.mnk}
        )
        g["launches"] += 1
        g["ms"] += t.ms
        g["flops"] += t.flops
        g["bytes"] += t.bytes
    total = sum(g["ms"] for g in groups.values())
    out = []
    for g in sorted(groups.values(), key=lambda g: -g["ms"])[:top]:
        ms = g["ms"]
        out.append(
            {
                "kernel": g["kernel"],
                "kind": g["kind"],
                "launches": g["launches"],
                "ms": ms,
                "share": ms / total if total > 0 else None,
                "tflops": g["flops"] / ms / 1e9 if g["flops"] and ms > 0 else None,
                "gbps": g["bytes"] / ms / 1e6 if ms > 0 else None,
                "mnk": list(g["mnk"]) if g["mnk"] else None,  # its first matmul's (M, N, K), batch in M
            }
        )
    return out


def missed(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows that measured an aim and missed it (``meets`` false; an error row has ``meets`` null)."""
    return [r for r in rows if r.get("meets") is False]


def _shape(shape: Any) -> str:
    if isinstance(shape, Mapping):
        return " ".join(f"{k}={v}" for k, v in shape.items())
    return str(shape)


def _rate(p: Mapping[str, Any]) -> str:
    if p.get("tflops") is not None:
        return f"{p['tflops']:.3g} TFLOP/s"
    return f"{p['gbps']:.3g} GB/s" if p.get("gbps") is not None else "-"


def row_lines(row: Mapping[str, Any]) -> list[str]:
    """One missed aim: what it measured against the aim, then its slowest kernels, one line each."""
    metric = row.get("aim_metric") or "ratio"
    value = row.get("ratio") if metric == "ratio" else row.get(metric)
    measured = f"{metric} {value:.3g}" if isinstance(value, (int, float)) else metric
    call = f"{row['aotc_ms']:.3f} ms call" if isinstance(row.get("aotc_ms"), (int, float)) else "call"
    kernels = row.get("kernels_ms")
    spent = f"its kernels {kernels:.3f} ms of a {call}" if isinstance(kernels, (int, float)) else f"a {call}"
    head = f"{row.get('case')} [{_shape(row.get('shape'))}]: {measured}, aim {row.get('aim_text') or row.get('aim')}"
    lines = [f"{head}; {spent}"]
    profile = row.get("profile") or []
    if not profile:
        return [*lines, "    (no per-kernel profile recorded)"]
    for p in profile:
        share = f"{p['share']:6.1%}" if p.get("share") is not None else "     -"
        mnk = "  [M={} N={} K={}]".format(*p["mnk"]) if p.get("mnk") else ""
        lines.append(f"    {share} {p['ms']:9.4f} ms  {p['kernel']} ({p['kind']}) x{p['launches']}  {_rate(p)}{mnk}")
    return lines


def report_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every missed aim's profile; one line saying so when none was missed."""
    rows = list(rows)
    bad = missed(rows)
    if not bad:
        aims = sum(r.get("meets") is True for r in rows)
        return [f"every aim measured was met ({aims} rows)"]
    out = []
    for r in bad:
        out += row_lines(r)
    return out


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise SystemExit(f"{path}:{n}: not a JSON row ({e})") from None
    return rows


# -- --fake: the dry run ----------------------------------------------------------------------------------------


def fake_rows(cases: Sequence[str]) -> list[dict[str, Any]]:
    """Each case's --check artifacts (small, no GPU targets) profiled on the instant fake driver (launches return
    at once, each event pair reads 0.25 ms): rows as bench_kernels records them, each marked missed so that its
    profile prints. What this exercises is the path, not the figures: the launches, bytes and FLOPs are real."""
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here.parent / "tests" / "runtime"), str(here)]
    from bench_kernels import parse
    from fake_cuda import fake_binaries
    from fake_cuda_calls import OK, InstantDriver
    from kernel_cases import builds, compile_build

    from aotc.ir.variant import Variant
    from aotc.runtime.backends.cuda import CudaBackend
    from aotc.runtime.backends.cuda.profile import profile
    from aotc.runtime.guards import Binder

    class Instant(InstantDriver):
        """Its events never complete (nothing runs): every timed launch reads the fake's fixed 0.25 ms."""

        def cuEventElapsedTime(self, start: Any, end: Any) -> tuple[Any, float]:
            return OK, 0.25

    args = parse(["--check", *cases])
    out = []
    for case in cases:
        for build in builds(case, args):
            compiled, _ = compile_build(build, (), args)
            graph, schedule = compiled.lowered, compiled.schedule
            feeds = _small_feeds(graph)
            binaries = fake_binaries(schedule)
            fake = Instant(memory=8 << 30)
            fake.register(schedule, binaries)
            with CudaBackend(driver=fake) as backend:
                program = backend.prepare(Variant(graph, schedule), binaries)
                times = profile(program, feeds, Binder(graph).bind(feeds), repeats=1)
            out.append(
                {
                    "bench": "kernel_profile_dry",
                    "case": build.name,
                    "shape": {n: "x".join(map(str, x.shape)) for n, x in zip(graph.input_names, feeds)},
                    "aim_metric": "ratio",
                    "aim_text": "dry run (fake driver: every aim counts as missed)",
                    "meets": False,
                    "kernels_ms": sum(t.ms for t in times),
                    "profile": summarize(times),
                }
            )
    return out


def _small_feeds(graph: Any) -> list[Any]:
    """Random inputs with every dynamic dim at its smallest allowed value (a multiple of its divisor)."""
    import numpy as np

    from aotc.ir.symbolic_values import evaluate

    env = {s.name: max(s.min, s.multiple_of) for s in graph.symbols}
    rng = np.random.default_rng(0)
    feeds = []
    for v in graph.inputs:
        shape = tuple(evaluate(d, env) for d in v.type.shape)
        dt = v.type.dtype.np
        if dt.kind in "iu":
            feeds.append(rng.integers(0, 8, size=shape).astype(dt))
        else:
            feeds.append(rng.standard_normal(shape).astype(np.float32).astype(dt))
    return feeds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="+", help="a results.jsonl, or with --fake the bench_kernels cases")
    parser.add_argument("--fake", action="store_true", help="no GPU: profile the --check artifacts on the fake driver")
    parser.add_argument(
        "--jsonl", metavar="PATH", help="with --fake: append its rows (scripts/gpu_report.py reads them)"
    )
    args = parser.parse_args(argv)
    if args.fake:
        rows = fake_rows(args.what)
        if not rows or not all(r["profile"] for r in rows):
            print("kernel_profile: a dry-run case recorded no kernels", file=sys.stderr)
            return 1
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
    else:
        rows = [r for path in args.what for r in read_rows(Path(path))]
    print("profiles of the aims missed (slowest kernels, their share of the kernels' time, what they achieved):")
    print("\n".join(report_lines(rows)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
