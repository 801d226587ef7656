#!/usr/bin/env bash
# Builds, on a machine with no GPU, everything scripts/gpu_check.sh carries to the GPU machine, in one folder:
#
#   bash scripts/gpu_prep.sh [CARRY]        # CARRY defaults to .gpu_carry (git-ignored)
#
#   CARRY/cache/      the kernel cache of every kernel the GPU check compiles, built with the GPU image's Triton
#                     (TRITON_FLOOR, 3.6.0) so that only lowering runs there: every compile is a cache hit
#   CARRY/smoke/      a small bf16 model per toolchain (GPU image's Triton and the newest one; driver floors
#                     12.4 and 13.0; as Triton builds by itself): the smoke step loads each image with no fallback
#   CARRY/models/     every example model built with the newest Triton, with inputs and cpu outputs
#   CARRY/tune_bundle.zip  the tuning candidates (scripts/tune_bundle.py: sm_90 cubins of the benchmark kernels'
#                     heuristic and grid configs, built with the newest Triton), which the tune step times
#   CARRY/tune_bundle_tma.zip  with TUNE_TMA=1: attention's candidates in their TMA form (a 12.8 driver floor)
#   CARRY/wheels/     for the GPU image's Python 3.12: blake3 and cryptography (the load step's signed loads), and
#                     KServe's SDK and tritonclient with what they need beyond the image (the serve step)
#
# Then send it along: device run with carry [".gpu_carry"] and the command `bash scripts/gpu_check.sh`.
# Needs python3 and pip (the newest Triton comes from the README's .venv; the GPU image's from .venv-triton36).
set -euo pipefail
cd "$(dirname "$0")/.."
carry=${1:-.gpu_carry}
# STEPS, as gpu_check.sh takes it: what only some steps read (the load and serve steps' wheels, the tune step's
# bundles) is built only when a step that reads it will run, so a check of a few steps carries less.
steps=${STEPS:-env smoke tune correctness kernels e2e host tma load serve decode}
wants() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
floor_triton=${TRITON_FLOOR:-3.6.0}
start=$SECONDS
rm -rf "$carry"
mkdir -p "$carry/cache"
carry=$(cd "$carry" && pwd) # absolute: the cache dirs below must not land under the repo for a path like /tmp/c

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]'
fi
if [ ! -x .venv-triton36/bin/python ]; then
    python3 -m venv .venv-triton36
fi
.venv-triton36/bin/pip install -q -e '.[compiler]' "triton==$floor_triton"

echo "== kernel cache with triton $floor_triton ($((SECONDS - start)) s)"
AOTC_CACHE_DIR="$carry/cache" .venv-triton36/bin/python scripts/gpu_prep.py cache "$carry"
echo "== the sign extra's wheels for the GPU image's Python ($((SECONDS - start)) s)"
# gpu_check.sh's load step installs them where the image lacks blake3 or cryptography (nothing is fetched there).
wheels_for_image() {
    .venv/bin/pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
        --platform any "$@"
}
mkdir -p "$carry/wheels"
if wants load; then
    wheels_for_image -d "$carry/wheels" blake3 cryptography
fi
echo "== the serve extra's wheels, less what the GPU image holds ($((SECONDS - start)) s)"
# gpu_check.sh's serve step installs them (scripts/gpu_wheels.py). The image's own numpy, pandas, pillow, grpcio,
# ml_dtypes, uvloop, aiohttp and pyyaml (~55 MB of wheels) are not carried: the carry's limit is 64 MiB.
if wants serve; then
    serve_wheels=$(mktemp -d)
    wheels_for_image -d "$serve_wheels" "kserve>=0.21,<0.22" "tritonclient[http]"
    for wheel in "$serve_wheels"/*.whl; do
        case $(basename "$wheel" | cut -d- -f1 | tr 'A-Z' 'a-z') in
        numpy | pandas | pillow | grpcio | ml_dtypes | uvloop | aiohttp | pyyaml | setuptools) ;;
        *) mv -n "$wheel" "$carry/wheels/" ;;
        esac
    done
    rm -rf "$serve_wheels"
fi
echo "== artifacts with the newest triton ($((SECONDS - start)) s)"
AOTC_CACHE_DIR="$carry/build-cache" .venv/bin/python scripts/gpu_prep.py artifacts "$carry"
rm -rf "$carry/build-cache"
echo "== the tuning bundle with the newest triton ($((SECONDS - start)) s)"
# ~580 candidates at ~1.7 s each on 2 cores (the kernel cache keeps them: a rebuild is quick). TUNE_LIMIT builds a
# subset (the heuristics first, then each key's grid in turn).
if wants tune; then
    .venv/bin/python scripts/tune_bundle.py "$carry/tune_bundle.zip" ${TUNE_LIMIT:+--limit "$TUNE_LIMIT"}
fi
# TUNE_TMA=1: also the attention candidates in their TMA form (a 12.8 floor, as the tma step compiles them; their
# keys say loads=descriptor), which the tune step then times after the main bundle. Off by default: ~270 more
# candidates, ~3 MiB, and the whole carry (56 MiB on 2026-12-07, 31 of it wheels) has no room left for them unless
# STEPS leaves out the load and serve steps.
if [ "${TUNE_TMA:-0}" = 1 ] && wants tune; then
    .venv/bin/python scripts/tune_bundle.py "$carry/tune_bundle_tma.zip" --floor 12.8 --only attention \
        ${TUNE_LIMIT:+--limit "$TUNE_LIMIT"}
fi

size=$(du -sm "$carry" | cut -f1)
entries=$(find "$carry/cache" -name '*.json' | wc -l)
# The device tool's 64 MiB holds the working tree (tracked and untracked-not-ignored files) and the carry together.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null \
    | awk '{ s += $1 } END { printf "%d", s / 1048576 + 1 }')
echo "gpu_prep: $carry holds $size MiB ($entries cached kernels), the working tree $tree MiB, in $((SECONDS - start)) s"
if [ $((size + tree)) -gt 63 ]; then
    echo "gpu_prep: $carry and the working tree come to $((size + tree)) MiB, over the device tool's 64 MiB (less" \
        "1 MiB of room): leave out a step's share with STEPS (the serve step's wheels are the most)" >&2
    exit 1
fi
