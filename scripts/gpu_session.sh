#!/usr/bin/env bash
# Everything aotc checks and measures on an NVIDIA GPU, in stages that each fit a 10-minute command.
#
#   bash scripts/gpu_session.sh STAGE [OUT_DIR]      # OUT_DIR defaults to $OUT, else ./gpu_out
#
# Stages (run them in this order; each writes STAGE.log under OUT_DIR):
#   tests      the GPU tests: every example model == cpu at two shapes, graph replay == eager, no leaks,
#              threads, a bad id then a good call, torch DLPack in and out (tests/runtime/test_cuda_gpu.py)
#   kernels    issue 10's benchmark: attention vs SDPA, matmul vs cuBLAS (8192^3, odd shapes padded and
#              not), GPT-2-small bf16 vs torch.compile (benchmarks/bench_kernels.py)
#   models     every example model and GPT-2-small vs eager and torch.compile (benchmarks/bench_cuda.py)
#   autotune   the kernels benchmark again, compiled with --autotune on this GPU
#
# The machine needs python3 with torch (CUDA), triton >= 3.6, cuda-bindings, numpy, flatbuffers, xxhash,
# click and pytest; aotc itself runs from this checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-}
out=${2:-${OUT:-gpu_out}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}  # the interpreter with torch and triton
case "$stage" in
tests | kernels | models | autotune) ;;
*)
    echo "usage: bash scripts/gpu_session.sh tests|kernels|models|autotune [OUT_DIR]" >&2
    exit 2
    ;;
esac
# aotc from this checkout with no install (nothing can be downloaded there): the cli/ folder is the
# aotc_cli package, as pyproject.toml maps it.
shim=$(mktemp -d)
ln -s "$PWD/cli" "$shim/aotc_cli"
export PYTHONPATH="$PWD:$shim${PYTHONPATH:+:$PYTHONPATH}"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    "$py" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" 2>&1
} | tee "$out/gpu.txt"
log="$out/$stage.log"
case "$stage" in
tests) timeout 540 "$py" -m pytest -q -p no:cacheprovider tests/runtime/test_cuda_gpu.py 2>&1 | tee "$log" ;;
kernels) timeout 540 "$py" benchmarks/bench_kernels.py --runs 20 2>&1 | tee "$log" ;;
models) timeout 540 "$py" benchmarks/bench_cuda.py --runs 20 2>&1 | tee "$log" ;;
autotune) timeout 540 "$py" benchmarks/bench_kernels.py --autotune --max-seq 4096 --runs 20 2>&1 | tee "$log" ;;
esac
status=${PIPESTATUS[0]}
echo "gpu_session: $stage exited $status; log in $log"
exit "$status"
