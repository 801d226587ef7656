"""The GPU check's results as one Markdown page (what benchmarks/results/ keeps per run):

    python scripts/gpu_report.py OUT > OUT/report.md
    python scripts/gpu_report.py --verdict OUT        # exit 1 unless every step passed (CI's dry run)

reads OUT/summary.txt (one line per step), OUT/env.log (device, driver, versions) and OUT/results.jsonl (one JSON
row per figure, written by scripts/gpu_smoke.py and the benchmarks as they measure), and puts every figure beside
its aim, and under each aim missed the profile of its slowest kernels. Rows it does not know are listed as they
are, so nothing measured is dropped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def rows(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"bench": "?", "error": f"unreadable row: {line[:200]}"})
    return out


def _fmt(x: Any, digits: int = 3) -> str:
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    if isinstance(x, dict):
        return " ".join(f"{k}={v}" for k, v in x.items())
    return "" if x is None else str(x)


def _note(r: dict[str, Any]) -> str:
    """What a speed row adds: host overhead per call, achieved TFLOP/s, how often a CUDA graph replayed."""
    parts = []
    if r.get("overhead_us") is not None:
        parts.append(f"host {r['overhead_us']:.0f} us + GPU {r.get('gpu_us', 0):.0f} us per call")
    if r.get("tflops"):
        parts.append(f"{r['tflops']:.0f} TFLOP/s (ref {r.get('ref_tflops') or 0:.0f})")
    if r.get("aotc_graph_replays") is not None:
        parts.append(f"replayed {r['aotc_graph_replays']:.0%}")
    return "; ".join(parts) or str(r.get("note") or "")


def table(header: list[str], body: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in body]
    return lines + [""]


def report(out: Path) -> str:
    lines = ["# GPU check", ""]
    env = out / "env.log"
    if env.exists():
        lines += ["## Machine", "", "```", *env.read_text().strip().splitlines()[:40], "```", ""]
    summary = out / "summary.txt"
    if summary.exists():
        lines += ["## Steps", "", "```", *summary.read_text().strip().splitlines(), "```", ""]
    data = rows(out / "results.jsonl")
    loads = [r for r in data if r.get("bench") == "smoke" and r.get("case") == "load"]
    if loads:
        lines += ["## What the driver loads (no fallback)", ""]
        lines += table(
            ["toolchain", "kernel", "image", "ISA", "PTX", "ptxas", "ELF OSABI/ABI", "loaded", "error"],
            [
                [
                    r["toolchain"],
                    r["kernel"],
                    r["image"],
                    r["isa"],
                    r["ptx"],
                    r["ptxas"],
                    r["elf"],
                    r["loaded"],
                    (r.get("error") or "")[:120],
                ]
                for r in loads
            ],
        )
    runs = [r for r in data if r.get("bench") in ("smoke", "models") and r.get("case") == "run"]
    if runs:
        lines += ["## cuda == cpu", ""]
        lines += table(
            ["step", "model", "shape", "ok", "max abs diff", "replay == eager", "note"],
            [
                [r["bench"], r.get("model") or r.get("toolchain"), r.get("shape"), r.get("ok"), r.get("max_abs_diff"),
                 r.get("replay_equal"), (r.get("error") or ("skipped" if r.get("skipped") else ""))[:160]]
                for r in runs
            ],
        )  # fmt: skip
    bench = [r for r in data if r.get("bench") not in ("smoke", "models", "serve", "?")]
    bench = [r for r in bench if r.get("bench") != "bench_host" or r.get("wall_us") is not None]  # not fake rows
    lines += host_section([r for r in data if r.get("bench") == "bench_host"])
    if bench:
        lines += ["## Speed (ratio = reference ms / aotc ms: above 1, aotc is faster)", ""]
        lines += table(
            ["bench", "case", "shape", "dtype", "aotc ms", "its kernels ms", "reference", "ref ms", "ratio", "aim",
             "meets", "note"],
            [
                [r.get("bench"), r.get("case"), r.get("shape"), r.get("dtype"), r.get("aotc_ms"), r.get("kernels_ms"),
                 r.get("ref_name"), r.get("ref_ms"), r.get("ratio"), r.get("aim_text") or r.get("aim"), r.get("meets"),
                 (r.get("error") or _note(r))[:160]]
                for r in bench
            ],
        )  # fmt: skip
        lines += profile_section(bench)
    lines += serve_section([r for r in data if r.get("bench") == "serve"])
    lines += tune_section(out / "tune_results.json")
    lines += tune_section(out / "tune_results_tma.json")  # TUNE_TMA=1: attention's TMA form
    load = out / "load.log"
    if load.exists():
        lines += [
            "## Load (benchmarks/bench_load.py)",
            "",
            "```",
            *load.read_text().strip().splitlines()[-16:],
            "```",
            "",
        ]
    unknown = [r for r in data if r.get("bench") == "?"]
    if unknown:
        lines += ["## Unreadable rows", "", *[f"- {r['error']}" for r in unknown], ""]
    if not data:
        lines += ["No results were recorded.", ""]
    return "\n".join(lines)


def profile_section(bench: list[dict[str, Any]]) -> list[str]:
    """For each aim a speed row missed, its slowest kernels (benchmarks/kernel_profile.py, as the steps print)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from kernel_profile import report_lines

    return ["## Profiles of the aims missed (slowest kernels, share of the kernels' time, achieved)", "", "```",
            *report_lines(bench), "```", ""]  # fmt: skip


def host_section(rows: list[dict[str, Any]]) -> list[str]:
    """bench_host.py's rows: a call's host cost beside the driver's floors, and the driver calls it makes."""
    if not rows:
        return []
    lines = ["## Host cost per call (benchmarks/bench_host.py; issue 26)", ""]
    gpu = [r for r in rows if r.get("wall_us") is not None]
    if gpu:
        lines += table(
            ["case", "whole call us", "host us", "prepared us", "GPU us", "overhead us (aim <= 20)",
             "bare launch us", "bare graph us", "vs floor (aim <= 2x)", "reference", "ref us", "driver calls"],
            [
                [r["case"], r["wall_us"], r.get("host_us"), r.get("prepared_wall_us"), r.get("gpu_us"),
                 r.get("overhead_us"), r.get("floor_launch_us"), r.get("floor_graph_us"), r.get("vs_floor"),
                 r.get("ref_name"), None if r.get("ref_ms") is None else r["ref_ms"] * 1e3,
                 " ".join(f"{k}:{v:g}x/{r.get('driver_us_per_call', {}).get(k, 0):.1f}us"
                          for k, v in (r.get("driver_calls_per_call") or {}).items())]
                for r in gpu
            ],
        )  # fmt: skip
    fake = [r for r in rows if r.get("wall_us") is None and r.get("aotc_ms") is not None]
    if fake:
        lines += table(
            ["path (instant fake driver)", "aotc Python us", "driver calls", "which"],
            [[r["case"], r["aotc_ms"] * 1e3, r.get("driver_calls"), r.get("note")] for r in fake],
        )
    return lines


def tune_section(path: Path) -> list[str]:
    """The tune step's results (scripts/tune_run.py): per key, the fastest candidate against the heuristic."""
    if not path.exists():
        return []
    try:
        result = json.loads(path.read_text())
    except ValueError as e:
        return ["## Tune", "", f"- unreadable results: {e}", ""]
    body = []
    for k in result.get("keys", []):
        timed = [c for c in k.get("candidates", []) if len(c.get("ms") or []) == 2]
        best = min(timed, key=lambda c: sum(c["ms"]), default=None)
        base = next((c for c in timed if c.get("heuristic")), None)
        failed = sum("error" in c for c in k.get("candidates", []))
        gain = sum(base["ms"]) / sum(best["ms"]) if best and base else None
        body.append([k.get("label"), len(timed), failed, sum(base["ms"]) / 2 if base else None,
                     sum(best["ms"]) / 2 if best else None, gain, best["tiles"] if best else k.get("note")])  # fmt: skip
    gpu = result.get("gpu", {})
    head = f"## Tune ({gpu.get('name')}, {gpu.get('sm_count')} SMs, {result.get('elapsed_s')} s)"
    return [head, ""] + table(["key", "timed", "failed", "heuristic ms", "best ms", "gain", "best tiles"], body)


def serve_section(served: list[dict[str, Any]]) -> list[str]:
    """bench_serve.py's rows, and issue 17's two aims read off them."""
    if not served:
        return []
    lines = ["## Serving (benchmarks/bench_serve.py: closed-loop clients; CPU: the server's, or the direct calls')", ""]
    lines += table(
        ["model", "device", "mode", "concurrency", "req/s", "p50 ms", "p99 ms", "p50 vs direct ms", "CPU ms/req"],
        [
            [r["model"], r["device"], r["mode"], r["concurrency"], round(r["req_per_s"]), r["p50_ms"], r["p99_ms"],
             None if r.get("direct_p50_ms") is None else r["p50_ms"] - r["direct_p50_ms"], r["cpu_ms_per_req"]]
            for r in served
        ],
    )  # fmt: skip
    by = {(r["model"], r["mode"], r["concurrency"]): r for r in served}
    for model in dict.fromkeys(r["model"] for r in served):
        off = by.get((model, "serve, batching off", 1))
        if off is not None and off.get("direct_p50_ms") is not None:
            added = off["p50_ms"] - off["direct_p50_ms"]
            lines.append(f"- {model}: the server adds {added:.2f} ms p50 at concurrency 1 (aim <= 1 ms)")
        top = max((c for m, _, c in by if m == model), default=None)
        off = by.get((model, "serve, batching off", top))
        for mode, says in (("serve, batching on", "batching gives"), ("serve, fixed batches", "fixed batches give")):
            on = by.get((model, mode, top))
            if on is not None and off is not None:
                gain = on["req_per_s"] / off["req_per_s"]
                lines.append(f"- {model}: {says} {gain:.2f}x the throughput at concurrency {top} (aim >= 3x, BERT)")
    return lines + [""]


STEPS = ("env", "smoke", "correctness", "kernels", "e2e", "host", "serve")


def verdict(out: Path) -> list[str]:
    """What is wrong with a finished check (empty: every step ran and exited 0, every model run matched)."""
    problems = []
    summary = (out / "summary.txt").read_text() if (out / "summary.txt").exists() else ""
    for step in STEPS:
        line = next((x for x in summary.splitlines() if x.startswith(f"{step}:")), None)
        if line is None or not line.startswith(f"{step}: exit 0,"):
            problems.append(f"step {step}: {line or 'did not run'}")
    data = rows(out / "results.jsonl")
    if not any(r.get("case") == "load" and r.get("loaded") for r in data):
        problems.append("the smoke step loaded no image")
    runs = [r for r in data if r.get("case") == "run" and not r.get("skipped")]
    if not runs:
        problems.append("no model ran")
    problems += [
        f"{r.get('bench')} {r.get('model')} {r.get('shape')}: {r.get('error') or 'not ok'}"
        for r in runs
        if not r.get("ok")
    ]
    if not (out / "report.md").exists() or "## Steps" not in (out / "report.md").read_text():
        problems.append("no report.md")
    return problems


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--verdict"] and len(args) == 2:
        problems = verdict(Path(args[1]))
        for p in problems:
            print(f"gpu check: {p}", file=sys.stderr)
        print(f"gpu check: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        raise SystemExit(1 if problems else 0)
    if len(args) != 1:
        raise SystemExit("usage: python scripts/gpu_report.py [--verdict] OUT_DIR")
    sys.stdout.write(report(Path(args[0])))


if __name__ == "__main__":
    main()
