"""Total the tests a CI run executed into one closing line: ``ci: N passed, N failed, N skipped``.

Reads any number of pytest outputs (each one's last summary line: the main run's, the Triton-floor run's) and
of ``onnx_node_tests.py --json`` files, so a green run says how many tests it ran rather than only that nothing
failed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

# pytest's summary words, folded into the three totals the closing line reports
_PYTEST_WORDS = {
    "passed": "passed",
    "xpassed": "passed",
    "failed": "failed",
    "error": "failed",
    "errors": "failed",
    "skipped": "skipped",
    "xfailed": "skipped",
}
_SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)\b")


def pytest_counts(text: str) -> Counter[str]:
    """Counts from the last line of pytest output that carries a summary ("3 passed, 1 skipped in 2.0s")."""
    for line in reversed(text.splitlines()):
        found = _SUMMARY.findall(line)
        if found and (" in " in line or line.startswith("=")):
            out: Counter[str] = Counter()
            for n, word in found:
                out[_PYTEST_WORDS[word]] += int(n)
            return out
    raise SystemExit("ci_totals: no pytest summary line found")


def node_suite_counts(path: Path) -> Counter[str]:
    summary = json.loads(path.read_text())["summary"]
    out: Counter[str] = Counter()
    for per_op in summary.values():
        out.update({k: per_op[k] for k in ("passed", "failed", "skipped")})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pytest", action="append", default=[], help="a file holding pytest's output (repeatable)")
    p.add_argument("--node-json", action="append", default=[], help="a JSON file from onnx_node_tests.py --json")
    args = p.parse_args(argv)
    total: Counter[str] = Counter()
    for f in args.pytest:
        total += pytest_counts(Path(f).read_text(errors="replace"))
    for f in args.node_json:
        total += node_suite_counts(Path(f))
    print(f"ci: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 1 if total["failed"] or not total["passed"] else 0


if __name__ == "__main__":
    sys.exit(main())
