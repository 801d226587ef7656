#!/usr/bin/env bash
# The interpret backend's tests under the lowest Triton that pyproject.toml allows (its "triton>=X", pinned as
# triton==X) with the newest numpy, in a venv of their own (~1 min, most of it the install).
#
#   bash scripts/ci_triton_floor.sh [LOG]    # pytest's output is also written to LOG, for scripts/ci_totals.py
#
# The interpreter changes between Triton releases (3.6's breaks on numpy >= 2.4 where 3.9's does not), and the
# main test run only sees the newest, so this run is what keeps the declared floor true. It runs the interpreter
# launcher and backend tests and the kernel templates' interpreter tests; exit 0 only when they all pass (pytest's
# 5, no tests collected, is a failure).
set -uo pipefail
cd "$(dirname "$0")/.."
log=${1:-/dev/null}
: >"$log"

floor=$(sed -n 's/.*"triton>=\([0-9][0-9.]*\)".*/\1/p' pyproject.toml | head -n 1)
if [ -z "$floor" ]; then
    echo "ci_triton_floor: pyproject.toml declares no \"triton>=X\"" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
venv=$tmp/venv
# The compiler and cpu extras as pyproject.toml declares them (device="cpu" is onnxruntime, as tests compare with), with
# Triton held at the floor (pip fails if they conflict).
if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q -e '.[compiler,cpu]' "triton==$floor" 'pytest>=8'; }; then
    echo "ci_triton_floor: installing aotc with triton==$floor failed" >&2
    exit 1
fi
"$venv/bin/python" - "$floor" <<'EOF' || exit 1
import sys

import numpy
import triton

want = sys.argv[1]
print(f"triton {triton.__version__}, numpy {numpy.__version__}, python {sys.version.split()[0]}")
if triton.__version__.split("+")[0].split(".")[:3] != (want + ".0.0").split(".")[:3]:
    sys.exit(f"ci_triton_floor: got triton {triton.__version__}, not the floor {want}")
EOF

tests=(
    tests/runtime/test_interpret_*.py
    tests/kernel_layer/test_attention.py
    tests/kernel_layer/test_matmul.py
    tests/kernel_layer/test_splitk_interpret.py
    tests/kernel_layer/test_conv.py
    tests/kernel_layer/test_reduction.py
    tests/kernel_layer/test_pointwise.py
    tests/kernel_layer/test_gather.py
    tests/kernel_layer/test_scatter.py
    tests/kernel_layer/test_models_interpret.py
    tests/kernel_layer/test_node_suite_regressions.py
)
timeout 300 "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -eq 5 ]; then
    echo "ci_triton_floor: pytest collected no tests" >&2
    exit 1
elif [ "$status" -ne 0 ]; then
    echo "ci_triton_floor: tests failed under triton==$floor (exit $status)" >&2
fi
exit "$status"
