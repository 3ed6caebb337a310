#!/usr/bin/env bash
# GPU check of SpecTune's CUDA variant, for one lent NVIDIA H200 machine (Python, nvcc and
# CMake there, no network). In one run it compiles ggml's CUDA module (scripts/setup.sh's
# ggml arguments, CMAKE_CUDA_ARCHITECTURES=90) from a carried sdist and adds it to the CPU
# wheel built here and carried (what `scripts/setup.sh --cuda` makes), builds native/ against it, writes random-weight pairs shaped like Llama-3.1-8B and Llama-3.2-1B
# (in parallel with the build), and prints one table: plain decode tok/s and its share of
# the memory-bandwidth limit, speculative tok/s per method and K, the lab against
# llama-server, and NVML readings. bench/gpu_check.py does the work; see its docstring.
#
# Time, measured on the H200 on 2026-12-04 (bench/results/gpu_check-2026-12-04-1332.txt): the CUDA module
# built in 224-268 s on 16 cores, the 8B models written in 216-253 s beside it, so the measurements start
# about 280 s into the call (plus about 30 s to start the machine). The Python side keeps to
# GPU_CHECK_BUDGET_S (default 540 s from its start): rows that would start too late are reported as
# skipped, most telling ones first (8B plain, K=4, server comparisons). If the call is cut off anyway,
# $OUT/gpu_check.log shows how far it got. Before the pairs, --diagnose runs the lab's path step by step
# in a child (gdb where there is one; the device image had none) in both load orders; a pair whose lab
# worker dies still gets llama-server-only rows.
#
# Prepare here, once, from the repository root, with network to PyPI:
#   bash bench/gpu_check.sh --prepare
# which runs exactly:
#   grep -qx '/.whl/' .gitignore                       # .whl/ must stay ignored: it travels by `carry`
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl gguf==0.19.0 platformdirs==4.14.8
#   python3 packaging/cuda_build.py trim-sdist ~/.cache/spectune/llama/sdist/llama_cpp_python-VERSION.tar.gz \
#     .whl/llama_cpp_python-VERSION.tar.gz
#   cp ~/.cache/spectune/llama/wheels/VERSION-cpu-*/llama_cpp_python-*.whl .whl/llama/   # the newest portable one (setup.sh --portable)
# The machine's image has numpy, pyyaml, requests, tqdm, nvidia-ml-py, packaging, cmake and
# ninja already; the wheels above are what it lacks. The sdist (73 MiB, over the 64 MiB a
# call may carry) is repacked without git history, docs, benchmark data and test
# vocabularies: about 12 MiB; the CPU wheel is 28 MB. Check `du -sh .whl` (about 42 MiB) and
# that the working tree has no other large untracked files before the call.
#
# Run on the device machine (device tool), with nothing else:
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=600)
# Output: the table on stdout and in $OUT/gpu_check-<date>.txt, raw rows in $OUT/*.json, the
# end of the build log in $OUT/build-tail.log, the whole output in $OUT/gpu_check.log, and
# bench/results/gpu_check-<date>.txt (on the device; copy it from $OUT into the repo).
#
# Rehearse here without a GPU (CPU, tiny shapes, one llama.cpp thread; its budget is 100 s, so
# on a busy machine late rows are reported as skipped rather than the run taking longer):
#   bash bench/gpu_check.sh --cpu-dry-run
# The same path with python3 and PYTHONPATH as on the device, the carried wheels installed
# the same way, and the carried CPU wheel as it is in place of the CUDA one.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
LLAMA_CPP_VERSION=$(sed -n 's/^ *"llama-cpp-python==\([^"]*\)".*/\1/p' "$root/pyproject.toml" | head -n 1)   # the one pin
[ -n "$LLAMA_CPP_VERSION" ] || { echo "$0: no llama-cpp-python==VERSION in pyproject.toml" >&2; exit 1; }
CARRIED="gguf==0.19.0 platformdirs==4.14.8"
sdist=".whl/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
mode=gpu
case "${1:-}" in
  "") ;;
  --cpu-dry-run) mode=cpu ;;
  --prepare) mode=prepare ;;
  -h|--help) sed -n '2,/^set -euo/{/^set -euo/!p}' "$0"; exit 0 ;;
  *) echo "gpu_check.sh: unknown option $1 (--prepare, --cpu-dry-run, or nothing on the GPU machine)" >&2; exit 2 ;;
esac
py=python3

if [ "$mode" = prepare ]; then
  grep -qx '/.whl/' .gitignore || { echo "gpu_check.sh: .gitignore must list /.whl/ (it travels by carry)" >&2; exit 1; }
  cache=${SPECTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spectune}
  src="$cache/llama/sdist/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
  [ -f "$src" ] || { echo "gpu_check.sh: no sdist at $src; run scripts/setup.sh first" >&2; exit 1; }
  # shellcheck disable=SC2086  # the pins are words
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl $CARRIED
  "$py" packaging/cuda_build.py trim-sdist "$src" "$sdist"
  cpu_wheel=$(ls -t "$cache"/llama/wheels/"$LLAMA_CPP_VERSION"-cpu-*/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
  [ -n "$cpu_wheel" ] || { echo "gpu_check.sh: no portable CPU wheel in $cache/llama/wheels; run scripts/setup.sh --portable first" >&2; exit 1; }
  rm -rf .whl/llama && mkdir -p .whl/llama && cp "$cpu_wheel" .whl/llama/
  du -sh .whl
  exit 0
fi

wheel=$(ls .whl/llama/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
[ -f "$sdist" ] && [ -n "$wheel" ] || { echo "gpu_check.sh: $sdist or .whl/llama/ is missing: run 'bash bench/gpu_check.sh --prepare' here and carry .whl" >&2; exit 1; }
work=/tmp/gpu_check-$mode
site=$work/site-packages          # find_install() looks in sys.path folders named site-packages
mkdir -p "$work"
out=${OUT:-}
log=$work/gpu_check.log
[ -n "$out" ] && log=$out/gpu_check.log

{
  echo "# $(date -u +%FT%TZ) $(uname -srm); $("$py" --version 2>&1) at $(command -v "$py")"
  if [ "$mode" = gpu ]; then
    nvidia-smi -L || true
    nvcc --version | tail -n 2 || true
    cmake --version | head -n 1 || true
  fi
  rm -rf "$site"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  budget=540; [ "$mode" = cpu ] && budget=100
  args=(run --mode "$mode" --site "$site" --sdist "$sdist" --wheel "$wheel" --work "$work" --budget-s "${GPU_CHECK_BUDGET_S:-$budget}" --diagnose)
  [ -n "$out" ] && args+=(--out-dir "$out")
  if [ "$mode" = cpu ]; then
    # what the device image has and this Python may lack, fetched here (the device needs no network)
    "$py" -m pip install -q --no-deps --upgrade --target "$work/image-stand-ins" tqdm nvidia-ml-py
    export PYTHONPATH="$PYTHONPATH:$work/image-stand-ins"
  fi
  PYTHONUNBUFFERED=1 "$py" bench/gpu_check.py "${args[@]}"
} 2>&1 | tee "$log"
