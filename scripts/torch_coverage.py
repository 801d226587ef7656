"""How much of the PyTorch world the torch importer takes: every model of scripts/coverage_zoo.py's suites through
``aotc.compile(module, specs)`` (dynamic batch, and sequence or height/width where the model allows), compared with
eager torch at two values of each dim (the compiled model's own call: the artifact on the reference backend), and
the core ATen opset against the importer's table.

    python scripts/torch_coverage.py                       # every suite, writes docs/torch_coverage.md
    python scripts/torch_coverage.py --suite torchvision --only classification/resnet18 --out -
    python scripts/torch_coverage.py --sample              # the fixed sample CI could run (~20 models)
    python scripts/torch_coverage.py --suite hf --slice 1/4 --resume /tmp/cov.json   # a quarter, resumable

``--resume FILE`` reads the results already in FILE, runs only the models missing there and writes FILE again
after each model, so a sweep that is stopped (or run in ``--slice`` parts on a shared machine) continues where it
was; the table is written from every result in FILE that the chosen suites hold. The repo keeps the last
sweep's results in docs/torch_coverage.json, so a later sitting resumes or reruns from them
(``--resume docs/torch_coverage.json --rerun refused,timeout``) instead of sweeping the hour-long suites again.

Each model runs in a worker process (restarted after a crash or a timeout), so one model cannot take the sweep
down. A result is one of: ``pass``; ``refused`` (a typed aotc error: its first line, the op it names and the
source line it points at); ``mismatch`` (an answer beyond float tolerance: a bug); ``export differs`` (a
mismatch where aotc gives what torch.export's own program of the model gives: the model traces differently from
how it runs eagerly, a finding for the model or torch, counted as a failure); ``error`` (any other
exception: a bug, since every failure should be a refusal); ``memory`` (past the worker's ``--memory-gb`` cap: a
model the shrink leaves big); ``timeout``; ``crash``; ``skip`` (the model does not
build or run eagerly at the sweep's sizes: not counted).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

# A fixed sample across suites and failure kinds (CI-sized: a few minutes on 2 cores).
SAMPLE = (
    "torchvision:classification/resnet18",
    "torchvision:classification/mobilenet_v2",
    "torchvision:classification/squeezenet1_1",
    "torchvision:classification/shufflenet_v2_x0_5",
    "torchvision:classification/regnet_y_400mf",
    "torchvision:classification/googlenet",
    "torchvision:classification/mnasnet0_5",
    "torchvision:segmentation/lraspp_mobilenet_v3_large",
    "torchvision:segmentation/fcn_resnet50",
    "torchvision:video/r3d_18",
    "hf:bert/BertModel",
    "hf:gpt2/GPT2Model",
    "hf:llama/LlamaModel",
    "hf:roberta/RobertaModel",
    "hf:distilbert/DistilBertModel",
    "hf:albert/AlbertModel",
    "hf:electra/ElectraModel",
    "hf:mistral/MistralModel",
    "hf:llama4_text/Llama4TextModel",  # complex rotary embedding: polar, view_as_complex, view_as_real
    "hf:vit/ViTModel",
    "hf:convnext/ConvNextModel",
)
RTOL, ATOL = 1e-3, 1e-4  # atol scaled by each output's largest magnitude (random weights grow activations)
_OP = re.compile(r"\b(aten\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+|aten\.[A-Za-z0-9_]+)")
_WHERE = re.compile(r"([\w./-]+\.py):(\d+)")
_TORCH_OOM = re.compile(r"DefaultCPUAllocator: can't allocate memory|can't allocate memory: you tried to allocate")
_NO_CAPTURE = "torch.export could not capture the model"
_SPECIALIZED_SEQ = re.compile(r"dim 'seq' .* is declared dynamic, but the model specialized it")


# -- one model, in a worker ------------------------------------------------------------------


def run_case(suite: str, name: str) -> dict[str, Any]:
    from coverage_zoo import Skip, build, with_mask

    start = time.perf_counter()
    try:
        case = build(suite, name)
    except Skip as e:
        return {"status": "skip", "detail": str(e)}
    out = _run(case)
    masked = with_mask(case) if out["status"] == "refused" and _NO_CAPTURE in out["detail"] else None
    if masked is not None:  # the model's code needs the mask under export: given all ones, as a user would
        case, out = masked, _run(masked) | {"unmasked": out["detail"]}
    if out["status"] == "refused" and case.static_seq is not None and _SPECIALIZED_SEQ.search(out["detail"]):
        # seq is not the model's to vary (a recurrence unrolled over it): declared static, as a user would
        out = _run(case.static_seq) | {k: v for k, v in out.items() if k == "unmasked"} | {"specialized": out["detail"]}
    if out["status"] == "pass":
        out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def _run(case: Any) -> dict[str, Any]:
    import torch

    import aotc
    from aotc.errors import AotcError

    out: dict[str, Any] = {"dims": case.dims}
    try:
        model = aotc.compile(case.module, case.inputs, options=aotc.CompileOptions(targets=()))
        for feeds in case.feeds:
            tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
            with torch.no_grad():
                want = _leaves(case.module(**tensors))
            got = _leaves(model(**feeds))
            wrong = _differs(got, want, feeds)
            if wrong and _differs(got, _exported(case.module, tensors), feeds) is None:
                # aotc gives what torch.export's own program gives: the model traces to another program than
                # the one it runs eagerly (PaliGemma's text-only mask: bidirectional eagerly, causal traced)
                return out | {"status": "export differs", "detail": f"{wrong}; torch.export's program gives aotc's"}
            if wrong:
                return out | {"status": "mismatch", "detail": wrong}
        return out | {"status": "pass"}
    except AotcError as e:
        if isinstance(e.__cause__, MemoryError):  # the run's numpy evaluation past the cap (a big attention matrix)
            return _memory(out, str(e).strip()[:200])
        text = str(e)
        op, where = _OP.search(text), _WHERE.search(text)
        return out | {
            "status": "refused",
            "kind": type(e).__name__,
            "detail": text.strip().splitlines()[0][:240] if text.strip() else type(e).__name__,
            "op": op.group(1) if op else "",
            "where": f"{where.group(1)}:{where.group(2)}" if where else "",
        }
    except MemoryError as e:  # the worker's --memory-gb cap: a model the shrink leaves big
        return _memory(out, f"MemoryError: {str(e).strip()[:160]}")
    except RuntimeError as e:
        if not _TORCH_OOM.search(str(e)):
            return _error(out, e)
        # torch's CPU allocator past the same cap (a tensor torch's eager run allocates): not aotc's failure
        return _memory(out, str(e).strip()[:160])
    except Exception as e:  # an untyped error is the finding
        return _error(out, e)


def _memory(out: dict[str, Any], what: str) -> dict[str, Any]:
    return out | {"status": "memory", "detail": f"past the sweep's memory cap: {what}"}


def _error(out: dict[str, Any], e: Exception) -> dict[str, Any]:
    frame = traceback.extract_tb(e.__traceback__)[-1]
    return out | {
        "status": "error",
        "detail": f"{type(e).__name__}: {str(e).strip()[:200]} ({Path(frame.filename).name}:{frame.lineno})",
    }


def _differs(got: dict[str, Any], want: dict[str, Any], feeds: dict[str, Any]) -> str | None:
    """How ``got`` differs from ``want`` beyond float tolerance, or None."""
    import numpy as np

    if set(got) != set(want):
        return f"outputs {sorted(got)}, torch gives {sorted(want)}"
    for key, w in want.items():
        g = got[key]
        if g.shape != w.shape:
            return f"{key or 'output'}: shape {g.shape}, torch {w.shape}"
        w64, g64 = w.astype(np.float64), g.astype(np.float64)
        scale = float(np.abs(w64).max()) if w64.size else 0.0
        err = float(np.abs(g64 - w64).max()) if w64.size else 0.0
        if not np.allclose(g64, w64, rtol=RTOL, atol=ATOL * max(1.0, scale), equal_nan=True):
            shape = tuple(feeds[next(iter(feeds))].shape)
            return f"{key or 'output'} at {shape}: max |diff| {err:.3g}"
    return None


def _exported(module: Any, tensors: dict[str, Any]) -> dict[str, Any]:
    """The outputs of torch.export's program of ``module`` at these inputs, run by torch."""
    import torch

    with torch.no_grad():
        program = torch.export.export(module, (), tensors, strict=False)
        return _leaves(program.module()(**tensors))


def _leaves(x: Any, path: str = "") -> dict[str, Any]:
    """Arrays by path: a tensor or array as itself, dicts (ModelOutput) by key, tuples by position."""
    import numpy as np

    if x is None:
        return {}
    if hasattr(x, "detach"):
        return {path: x.detach().numpy()}
    if isinstance(x, np.ndarray):
        return {path: x}
    if isinstance(x, dict):
        return {k2: v2 for k, v in x.items() for k2, v2 in _leaves(v, f"{path}.{k}" if path else str(k)).items()}
    if isinstance(x, (tuple, list)):
        return {k2: v2 for i, v in enumerate(x) for k2, v2 in _leaves(v, f"{path}[{i}]").items()}
    return {}


def _worker(conn: Any, memory_gb: float) -> None:
    if memory_gb:  # a model past the cap fails with MemoryError here instead of the OOM killer taking the machine
        import resource

        cap = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            conn.send(run_case(*job))
        except BaseException as e:  # the worker reports and keeps serving
            conn.send({"status": "error", "detail": f"{type(e).__name__}: {str(e)[:200]}"})


class Worker:
    """One process running cases in turn; replaced after a crash or a timeout."""

    def __init__(self, memory_gb: float = 0.0) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, memory_gb), daemon=True)
        self.proc.start()

    def run(self, suite: str, name: str, timeout: float) -> dict[str, Any]:
        self.conn.send((suite, name))
        if self.conn.poll(timeout):
            try:
                return self.conn.recv()
            except EOFError:
                pass
            return {"status": "crash", "detail": f"the worker died (exit code {self.proc.exitcode})"}
        self.proc.kill()
        return {"status": "timeout", "detail": f"no result in {timeout:.0f} s"}

    def alive(self) -> bool:
        return self.proc.is_alive()

    def close(self) -> None:
        if self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()


# -- the core ATen opset -------------------------------------------------------------------------


def aten_rows() -> list[dict[str, Any]]:
    """Every overload of PyTorch's core ATen opset (``torch.Tag.core``): translated by the importer's table (or,
    for the ops only complex tensors take, its complex one), or not."""
    import torch

    from aotc.torch_export.ops_complex import COMPLEX
    from aotc.torch_export.table import ATEN

    rows = []
    for name in sorted(dir(torch.ops.aten)):
        packet = getattr(torch.ops.aten, name)
        if not hasattr(packet, "overloads"):
            continue
        for overload in packet.overloads():
            if torch.Tag.core in getattr(packet, overload).tags:
                key = f"aten.{name}.{overload}"
                rows.append({"op": key, "supported": key in ATEN or key in COMPLEX})
    return rows


# -- the sweep and its table ---------------------------------------------------------------------------


def sweep(
    jobs: list[tuple[str, str]],
    timeout: float,
    log: Any,
    results: dict[str, dict[str, Any]] | None = None,
    save: Path | None = None,
    memory_gb: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """Run ``jobs`` not already in ``results`` (added to it); with ``save``, the results are written there after
    each model, so an interrupted sweep resumes."""
    results = {} if results is None else results
    jobs = [(suite, name) for suite, name in jobs if f"{suite}:{name}" not in results]
    worker = Worker(memory_gb)
    try:
        for i, (suite, name) in enumerate(jobs, 1):
            if not worker.alive():
                worker = Worker(memory_gb)
            t0 = time.perf_counter()
            r = worker.run(suite, name, timeout)
            if r["status"] in ("timeout", "crash", "memory"):
                worker.close()  # a worker that ran out of memory may hold it still
                worker = Worker(memory_gb)
            results[f"{suite}:{name}"] = r | {"swept": time.strftime("%Y-%m-%d")}
            if save is not None:
                save.write_text(json.dumps(results, indent=1))
            print(
                f"[{i}/{len(jobs)}] {suite}:{name}: {r['status']} ({time.perf_counter() - t0:.0f} s) "
                f"{r.get('detail', '')[:160]}",
                file=log,
                flush=True,
            )
    finally:
        worker.close()
    return results


def counted(results: dict[str, dict[str, Any]], prefix: str) -> tuple[int, int]:
    rows = [r for k, r in results.items() if k.startswith(prefix) and r["status"] != "skip"]
    return sum(r["status"] == "pass" for r in rows), len(rows)


def table(results: dict[str, dict[str, Any]], aten: list[dict[str, Any]], command: str, carried: str = "") -> str:
    lines = [
        "# Torch importer coverage",
        "",
        f"Written by `{command}` on {time.strftime('%Y-%m-%d')} (scripts/torch_coverage.py; do not edit by hand).",
        *([carried] if carried else []),
        "Each model: `aotc.compile(module, specs)` with the dims listed dynamic, compared with eager torch at two",
        "values of each, run as the compiled model's own call does (the artifact on the numpy reference backend; no",
        "kernel runs). `skip` rows (the model does not build from a small config or does not",
        "run eagerly at the sweep's sizes) are not counted. Hugging Face models are built from their default",
        "config shrunk (and their sub-configs', AutoConfig towers such as LLaVA's CLIP and Llama included, and",
        "backbones that are transformers, SAM3's ViT; not staged backbones such as ResNet or Swin; a config whose",
        "validators refuse a size keeps the sizes they take, and is skipped if that",
        "leaves it over 50M parameters or 8 layers), zero-initialized weight matrices given small random values",
        "(and a model whose init loses the input before its top-k, PP-DocLayout-V4, fan-in scaled convolutions), MoE",
        "experts as HF's `batched_mm`, fed `decoder_input_ids` too where they take them, and `pixel_values` too",
        "where they take both (else text alone), images at the config's size or the first of 64, 128, 224 that",
        "runs eagerly: scripts/coverage_zoo.py says why each. A model that specializes seq (aotc refuses it, naming",
        "the line) is run again with seq static and batch dynamic, as a user would declare it: its row lists `batch`",
        "and quotes the first refusal; one torch.export cannot capture without an attention mask (LongT5) is run",
        "again with an all-ones `attention_mask`, and its row says so.",
        "",
        "| suite | passed | of |",
        "|---|---|---|",
    ]
    for prefix, label in (
        ("torchvision:classification/", "torchvision classification"),
        ("torchvision:segmentation/", "torchvision segmentation"),
        ("torchvision:video/", "torchvision video"),
        ("hf:", "Hugging Face architectures"),
    ):
        passed, total = counted(results, prefix)
        if total:
            lines.append(f"| {label} | {passed} ({100 * passed / total:.0f}%) | {total} |")
    if aten:
        n = sum(r["supported"] for r in aten)
        lines.append(f"| core ATen overloads | {n} ({100 * n / len(aten):.0f}%) | {len(aten)} |")
    statuses = Counter(r["status"] for r in results.values())
    lines += ["", "Results: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())), ""]
    ops = Counter(r["op"] for r in results.values() if r["status"] == "refused" and r.get("op"))
    if ops:
        lines += ["## Ops that refuse the most models", "", "| op | models |", "|---|---|"]
        lines += [f"| `{op}` | {n} |" for op, n in ops.most_common(25)] + [""]
    lines += [
        "## Models",
        "",
        "| model | dynamic dims | result | first refused op | where | detail |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in sorted(results.items()):
        detail = r.get("detail", "") or (f"seq static: {r['specialized']}" if r.get("specialized") else "")
        if r.get("unmasked"):
            detail = f"an all-ones attention_mask given (without: {r['unmasked']}) {detail}".strip()
        detail = detail.replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {key} | {r.get('dims', '')} | {r['status']} | {r.get('op', '')} | {r.get('where', '')} | {detail} |"
        )
    if aten:
        lines += ["", "## Core ATen opset", "", "| overload | translated |", "|---|---|"]
        lines += [f"| `{r['op']}` | {'yes' if r['supported'] else 'no'} |" for r in aten]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from coverage_zoo import SUITES, names

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", action="append", choices=SUITES, help="a suite to sweep (repeatable; default all)")
    ap.add_argument("--only", action="append", default=[], help="a model name within the suites (repeatable)")
    ap.add_argument("--sample", action="store_true", help="the fixed CI-sized sample instead of whole suites")
    ap.add_argument("--limit", type=int, default=0, help="at most this many models per suite")
    ap.add_argument(
        "--slice", help="K/N: only the K-th of N equal parts of the models chosen (every N-th, from the K-th)"
    )
    ap.add_argument("--resume", help="a results JSON: run only models missing there, and save there after each")
    ap.add_argument("--rerun", default="", help="with --resume: statuses to run again, e.g. error,mismatch")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per model (default 600)")
    ap.add_argument("--carry", help="a table this script wrote: its rows kept for the models not run now")
    ap.add_argument("--no-run", action="store_true", help="run nothing: the table of --resume's (and --carry's) rows")
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap per worker (0: none)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "torch_coverage.md"), help="the table ('-': stdout)")
    ap.add_argument("--json", help="also write the results as JSON here")
    ap.add_argument("--no-aten", action="store_true", help="leave out the core ATen table")
    args = ap.parse_args(argv)
    if args.sample:
        jobs = [tuple(s.split(":", 1)) for s in SAMPLE]
    else:
        jobs = []
        for suite in args.suite or SUITES:
            listed = [n for n in names(suite) if not args.only or n in args.only]
            jobs += [(suite, n) for n in (listed[: args.limit] if args.limit else listed)]
    if args.slice:
        k, n = _slice(ap, args.slice)
        jobs = sliced(jobs, k, n)
    if not jobs:
        ap.error("no model matches --suite/--only")
    save = Path(args.resume) if args.resume else None
    results = json.loads(save.read_text()) if save is not None and save.exists() else {}
    again = {s for s in args.rerun.split(",") if s}
    chosen_jobs = {f"{suite}:{name}" for suite, name in jobs}
    results = {k: r for k, r in results.items() if not (k in chosen_jobs and r["status"] in again)}
    if not args.no_run:
        results = sweep(jobs, args.timeout, sys.stderr, results, save, args.memory_gb)
    if not args.sample:  # the table holds the chosen suites' results (a resume file may hold others too)
        chosen = tuple(f"{suite}:" for suite in args.suite or SUITES)
        results = {k: r for k, r in results.items() if k.startswith(chosen)}
    notes = []
    if args.carry:
        old, made = carry(Path(args.carry))
        kept = {k: r for k, r in old.items() if k not in results}
        results |= kept
        notes.append(f"{len(kept)} rows carried over unchanged from the table written by {made}.")
    for suite in dict.fromkeys(s for s, _ in jobs):
        ran = sum(k.startswith(f"{suite}:") for k in results)
        total = sum(s == suite for s, _ in jobs)
        if ran < total:  # say so: a partial sweep's percentages are of the models it reached
            notes.append(f"Suite {suite}: {ran} of its {total} models swept so far; the rest are not in this table.")
    notes += _sweep_dates(results)
    note = "\n".join(notes)
    aten = [] if args.no_aten else aten_rows()
    command = "python scripts/torch_coverage.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = table(results, aten, command.strip(), note)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    bad = [k for k, r in results.items() if r["status"] in ("mismatch", "error", "crash")]
    if bad:
        print(f"torch_coverage: {len(bad)} wrong answers or untyped errors: {', '.join(bad[:10])}", file=sys.stderr)
    return 1 if bad else 0


def _sweep_dates(results: dict[str, dict[str, Any]]) -> list[str]:
    """When the rows come from more than one sweep (a resumed or partly re-run one), how many each date gave; rows
    from before the results held a date are counted as such."""
    dates = Counter(r.get("swept", "") for r in results.values())
    if len(dates) < 2:
        return []
    parts = [f"{d}: {n}" if d else f"an undated earlier sweep: {n}" for d, n in sorted(dates.items(), reverse=True)]
    return [f"Rows by the date they were swept: {'; '.join(parts)}."]


def carry(path: Path) -> tuple[dict[str, dict[str, Any]], str]:
    """The results in the Models section of a table this script wrote, and the command and date that wrote it."""
    text = path.read_text()
    made = re.search(r"Written by `([^`]*)` on (\S+)", text)
    rows = {}
    keys = ("dims", "status", "op", "where", "detail")
    for line in text.split("## Models", 1)[-1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 6 and ":" in cells[0] and cells[2] != "result":
            r = dict(zip(keys, (c.replace("\\|", "|") for c in cells[1:])))
            rows[cells[0]] = {k: v for k, v in r.items() if v or k == "status"}
    return rows, f"`{made.group(1)}` on {made.group(2)}" if made else str(path)


def sliced(jobs: list[Any], k: int, n: int) -> list[Any]:
    """The K-th of N parts, each every N-th model: the slow ones (multimodal models sit together in the name order)
    spread over the parts, so N processes on a shared machine finish together."""
    return jobs[k - 1 :: n]


def _slice(ap: argparse.ArgumentParser, text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        ap.error(f"--slice {text!r}: expected K/N with 1 <= K <= N, e.g. 2/4")
    return int(m.group(1)), int(m.group(2))


if __name__ == "__main__":
    sys.exit(main())
