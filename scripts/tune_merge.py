"""Merges the GPU check's tune results into the shipped tuned table (aotc/kernels/tuned/merge.py does it).

python scripts/tune_merge.py OUT/tune_results.json [MORE.json ...]            # into aotc/kernels/tuned/
python scripts/tune_merge.py RESULTS.json --table /tmp/sm_90.json --dry-run   # say what it would write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aotc.errors import AotcError  # noqa: E402
from aotc.kernels.tuned.merge import empty_table, merge, read_results  # noqa: E402
from aotc.kernels.tuned.table import TABLE_DIR  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--table", type=Path, help="the table file (default: the shipped one for the results' arch)")
    parser.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
    args = parser.parse_args()
    try:
        results = [read_results(p) for p in args.results]
        arch = results[0]["arch"]
        path = args.table or TABLE_DIR / f"{arch}.json"
        table = json.loads(path.read_text()) if path.exists() else empty_table(arch)
        for p, r in zip(args.results, results):
            print(f"{p} ({r['gpu']['name']}, {r['gpu']['sm_count']} SMs, triton {r['toolchain'].get('triton')}):")
            for line in merge(table, r):
                print(f"  {line}")
    except AotcError as e:
        print(f"tune_merge: {e}", file=sys.stderr)
        return 2
    if not args.dry_run:
        path.write_text(json.dumps(table, indent=1) + "\n")
        print(f"{path}: {len(table['entries'])} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
