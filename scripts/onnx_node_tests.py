#!/usr/bin/env python
"""Run ONNX's backend node tests (onnx/backend/test/case/node) through aotc's ONNX backend.

Prints passed / failed / skipped per operator and in total. A test whose model aotc refuses at import time
with UnsupportedError (an operator, dtype or attribute aotc doesn't handle) counts as skipped, with the
reason; anything else that goes wrong (a wrong result, a crash, another error) is a failure.

``--device interpret`` runs the compiled artifact's scheduled Triton kernels under the Triton interpreter instead
of the cpu backend's numpy references, against the same expected outputs: it tests the generated kernels. There a
test whose model got no kernels counts as skipped, with the reason: the scheduler refused it (its reason), or the
model needs none (its outputs are inputs, weights or views of them).

    python scripts/onnx_node_tests.py                 # every node test
    python scripts/onnx_node_tests.py --subset        # a bounded quick run (CI)
    python scripts/onnx_node_tests.py --ops Conv,Gemm --verbose
    python scripts/onnx_node_tests.py --json report.json
    python scripts/onnx_node_tests.py --device interpret --ops Softmax   # the kernels, interpreted

Exit status 1 when any test fails.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# Case modules (onnx/backend/test/case/node/<name>.py) for --subset: common ops, a few hundred tests, quick.
SUBSET_MODULES = (
    "abs", "add", "argmax", "atan", "averagepool", "batch_normalization", "cast", "clip", "concat", "constant",
    "constantofshape", "conv", "div", "dropout", "equal", "erf", "expand", "flatten", "gather", "gelu", "gemm",
    "globalaveragepool", "identity", "layernormalization", "leakyrelu", "less", "matmul", "maxpool", "mul", "neg",
    "pow", "rangeop", "reducemean", "reducesum", "relu", "reshape", "scatterelements", "scatternd", "shape",
    "sigmoid", "slice", "softmax", "split", "sqrt", "squeeze", "sub", "sum", "tanh", "transpose", "unsqueeze",
    "where",
)  # fmt: skip


HALF_RTOL = 2**-9  # two float16 ulps


@dataclass
class Result:
    name: str
    op: str
    status: str  # passed | failed | skipped
    reason: str = ""
    seconds: float = 0.0


def load_cases(modules: Sequence[str] | None) -> list[Any]:
    """Node test cases: all of them, or those the given case modules define."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # the case modules compute expected outputs with overflowing casts
        if modules is None:
            from onnx.backend.test.loader import load_node_model_tests

            return list(load_node_model_tests())
        import onnx.backend.test.case.node as node_pkg

        for m in modules:
            importlib.import_module(f"{node_pkg.__name__}.{m}")
        return list(node_pkg._NodeTestCases)


def op_of_cases(cases: Iterable[Any]) -> dict[str, str]:
    """Test name -> the operator it tests (an expanded function test counts for the op it expands)."""
    ops = {c.name: c.model.graph.node[0].op_type for c in cases if len(c.model.graph.node) == 1}
    out = {}
    for c in cases:
        base = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        out[c.name] = ops.get(base) or ops.get(c.name) or c.model.graph.node[0].op_type
    return out


def run_case(case: Any, op: str, device: str = "cpu") -> Result:
    from onnx.backend.test.runner import Runner, _normalize_tensor

    from aotc.errors import UnsupportedError
    from aotc.onnx_backend import AotcBackend

    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = AotcBackend.prepare(case.model, runtime_device=device)
    except UnsupportedError as e:
        return Result(case.name, op, "skipped", str(e), time.perf_counter() - start)
    except Exception as e:  # any other import failure is aotc's bug, reported as a failure
        return Result(case.name, op, "failed", f"import: {type(e).__name__}: {e}", time.perf_counter() - start)
    try:
        for inputs, outputs in case.data_sets:
            got = rep.run([_normalize_tensor(x) for x in inputs])
            expected = [_normalize_tensor(y) for y in outputs]
            # aotc computes half-precision math in float32 (as GPU kernels accumulate), so a float16 result may
            # sit two float16 ulps from an expectation computed in float16: the allowance onnx's runner already
            # gives bfloat16.
            half = any(getattr(y, "dtype", None) == np.float16 for y in expected)
            rtol = max(case.rtol, HALF_RTOL) if half else case.rtol
            Runner.assert_similar_outputs(expected, list(got), rtol=rtol, atol=case.atol)
    except UnsupportedError as e:  # a model specialized on its shape inputs at run time
        return Result(case.name, op, "skipped", str(e), time.perf_counter() - start)
    except Exception as e:  # wrong numbers, a crash or an error while running
        msg = " ".join(str(e).split())
        return Result(case.name, op, "failed", f"{type(e).__name__}: {msg[:400]}", time.perf_counter() - start)
    return Result(case.name, op, "passed", "", time.perf_counter() - start)


def run(
    modules: Sequence[str] | None = None,
    ops: Sequence[str] | None = None,
    pattern: str | None = None,
    device: str = "cpu",
) -> list[Result]:
    cases = load_cases(modules)
    op_of = op_of_cases(cases)
    results = []
    for case in cases:
        op = op_of[case.name]
        if ops and op not in ops:
            continue
        if pattern and not re.search(pattern, case.name):
            continue
        results.append(run_case(case, op, device))
    return results


def summarize(results: Sequence[Result]) -> dict[str, dict[str, int]]:
    per_op: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
    for r in results:
        per_op[r.op][r.status] += 1
    return dict(sorted(per_op.items()))


def report(results: Sequence[Result], verbose: bool) -> str:
    per_op = summarize(results)
    lines = [f"{'operator':<32} {'passed':>6} {'failed':>6} {'skipped':>7}"]
    for op, c in per_op.items():
        lines.append(f"{op:<32} {c['passed']:>6} {c['failed']:>6} {c['skipped']:>7}")
    total = Counter(r.status for r in results)
    lines.append(f"{'TOTAL':<32} {total['passed']:>6} {total['failed']:>6} {total['skipped']:>7}")
    failed = [r for r in results if r.status == "failed"]
    if failed:
        lines.append("\nfailures:")
        lines += [f"  {r.name} ({r.op}): {r.reason if verbose else r.reason[:160]}" for r in failed]
    skipped = [r for r in results if r.status == "skipped"]
    if skipped:
        reasons = Counter(_reason_kind(r.reason) for r in skipped)
        lines.append("\nskip reasons:")
        lines += [f"  {n:>4}  {reason}" for reason, n in reasons.most_common()]
        if verbose:
            lines += [f"  {r.name}: {r.reason}" for r in skipped]
    return "\n".join(lines)


def _reason_kind(reason: str) -> str:
    """A skip reason with test-specific names removed, so equal causes count together."""
    reason = re.sub(r"node '[^']*'", "node", reason)
    reason = re.sub(r"graph input '[^']*'", "graph input", reason)
    reason = re.sub(r"input \d+", "input", reason)
    return reason[:140]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--subset", action="store_true", help="only the common ops in SUBSET_MODULES (quick, for CI)")
    p.add_argument("--ops", help="comma-separated operator names to run (e.g. Conv,Gemm)")
    p.add_argument("-k", dest="pattern", help="only tests whose name matches this regex")
    p.add_argument("--json", dest="json_path", help="also write the results as JSON to this path ('-' for stdout)")
    p.add_argument(
        "--device",
        choices=("cpu", "interpret"),
        default="cpu",
        help="the runtime backend: cpu (numpy references, default) or interpret (the Triton kernels, interpreted)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="full failure messages and every skip")
    args = p.parse_args(argv)
    start = time.perf_counter()
    modules = SUBSET_MODULES if args.subset else None
    results = run(modules, args.ops.split(",") if args.ops else None, args.pattern, args.device)
    if args.json_path:
        blob = json.dumps({"summary": summarize(results), "results": [asdict(r) for r in results]}, indent=1)
        if args.json_path == "-":
            print(blob)
        else:
            with open(args.json_path, "w") as f:
                f.write(blob)
    if args.json_path != "-":
        print(report(results, args.verbose))
        print(f"\nonnx node suite: {len(results)} cases, {time.perf_counter() - start:.1f} s")
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
