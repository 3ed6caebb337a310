#!/usr/bin/env bash
# GPU check of SpecTune's CUDA variant, in one call of the device tool (one NVIDIA H100 or H200; Python,
# numpy and the CUDA toolkit there, no network). Nothing is compiled there: everything is built here and
# carried in .whl/ (under 64 MiB), and the measurements start within seconds of the call.
#
# What it measures (bench/gpu_check.py does the work; its docstring has the details): llama-shaped random
# pairs of Llama-3.1-8B's and Llama-3.2-1B's shapes, each in F16 and Q4_K_M (bench/gpu_models.py writes
# them in seconds), and for each: plain decode, draft-simple at K=2, 4 and 8, and ngram-mod; SpecTune's
# engine (the lab) and llama-server on the same setting in alternating order, their drafted/accepted counts
# compared generation by generation; the share of peak memory bandwidth; the speed model's prediction beside
# each row; NVML readings. Before the pairs, --diagnose walks the lab's library loading step by step in a
# child (both load orders, LD_DEBUG=files on the one that died on the H200) so a crash is named.
#
# Prepare here, once (after `CMAKE_CUDA_ARCHITECTURES=90 bash scripts/setup.sh --portable --cuda`, which
# builds the CUDA wheel for sm_90: H100 and H200):
#   bash bench/gpu_check.sh --prepare
# It installs that wheel, gguf and platformdirs into /tmp/gpu_check/site-packages (the path the device uses:
# libspecrt's RUNPATH points there), builds libspecrt against it, drops the CPU variants no H100/H200 host
# needs, links duplicate library files to one copy, and packs it all into .whl/gpu_check.tar.xz (about
# 45 MiB; .whl/ is git-ignored and travels by `carry`).
#
# Run on the device machine (device tool), with nothing else:
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=420)
# Output: the table on stdout and in $OUT/gpu_check-<date>.txt, raw rows in $OUT/*.json, diagnose logs,
# the whole output in $OUT/gpu_check.log. Copy the table into bench/results/ and docs/platforms.md's CUDA section.
#
# Rehearse here without a GPU (the same carried tree, tiny shapes, the CUDA module present but no driver,
# so llama.cpp runs on the CPU):
#   bash bench/gpu_check.sh --cpu-dry-run
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
LLAMA_CPP_VERSION=$(sed -n 's/^ *"llama-cpp-python==\([^"]*\)".*/\1/p' "$root/pyproject.toml" | head -n 1)   # the one pin
[ -n "$LLAMA_CPP_VERSION" ] || { echo "$0: no llama-cpp-python==VERSION in pyproject.toml" >&2; exit 1; }
CARRIED="gguf==0.19.0 platformdirs==4.14.8"
base=/tmp/gpu_check            # the same path here and on the device: libspecrt's RUNPATH names it
site=$base/site-packages        # find_install() looks in sys.path folders named site-packages
pack=.whl/gpu_check.tar.xz
mode=gpu
case "${1:-}" in
  "") ;;
  --cpu-dry-run) mode=cpu ;;
  --prepare) mode=prepare ;;
  -h|--help) sed -n '2,/^set -euo/{/^set -euo/!p}' "$0"; exit 0 ;;
  *) echo "gpu_check.sh: unknown option $1 (--prepare, --cpu-dry-run, or nothing on the GPU machine)" >&2; exit 2 ;;
esac
# the system's python3, as on the device: an activated venv's would find its own llama.cpp before the carried one
if [ -n "${VIRTUAL_ENV:-}" ]; then PATH=${PATH//"$VIRTUAL_ENV/bin:"/}; unset VIRTUAL_ENV; fi
py=python3

if [ "$mode" = prepare ]; then
  grep -qx '/.whl/' .gitignore || { echo "gpu_check.sh: .gitignore must list /.whl/ (it travels by carry)" >&2; exit 1; }
  cache=${SPECTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spectune}
  sdist="$cache/llama/sdist/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
  wheel=${GPU_CHECK_WHEEL:-}   # another wheel (the CPU one) only to rehearse before the CUDA wheel exists
  [ -n "$wheel" ] || for dir in $(ls -td "$cache"/llama/wheels/"$LLAMA_CPP_VERSION"-cuda-* 2>/dev/null); do
    if grep -q 'CMAKE_CUDA_ARCHITECTURES=90 ' "$dir/build.txt" 2>/dev/null; then
      wheel=$(ls "$dir"/llama_cpp_python-*.whl | head -n 1); break
    fi
  done
  [ -n "$wheel" ] || { echo "gpu_check.sh: no CUDA wheel for sm_90 in $cache; run CMAKE_CUDA_ARCHITECTURES=90 bash scripts/setup.sh --portable --cuda" >&2; exit 1; }
  [ -f "$sdist" ] || { echo "gpu_check.sh: no sdist at $sdist; run scripts/setup.sh first" >&2; exit 1; }
  rm -rf "$base" .whl/gpu_check.tar.xz && mkdir -p "$base" .whl
  # shellcheck disable=SC2086  # the pins are words
  "$py" -m pip download -q --no-deps --only-binary=:all: -d "$base/wheels" $CARRIED
  "$py" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel" "$base"/wheels/*.whl
  SPECTUNE_CACHE_DIR="$base/cache" SPECTUNE_SDIST="$sdist" PYTHONPATH="$site:$root" \
    "$py" -c "import shutil, sys; from engine.runtime.native_build import ensure_built; shutil.copy2(ensure_built(verbose=True), sys.argv[1])" "$base/libspecrt.so"
  "$py" bench/gpu_check.py slim "$site"
  (cd "$base" && tar -cf - site-packages libspecrt.so) | xz -T0 -6 > "$pack"
  rm -rf "$base/wheels" "$base/cache"
  ls -l "$pack"
  du -sh .whl
  exit 0
fi

[ -f "$pack" ] || { echo "gpu_check.sh: $pack is missing: run 'bash bench/gpu_check.sh --prepare' here and carry .whl" >&2; exit 1; }
out=${OUT:-}
work=$base/work-$mode
log=$work/gpu_check.log
[ -n "$out" ] && log=$out/gpu_check.log
mkdir -p "$work"

{
  echo "# $(date -u +%FT%TZ) $(uname -srm); $("$py" --version 2>&1) at $(command -v "$py"); $(ldd --version 2>&1 | head -n 1)"
  # the loader and C library matter to a crash inside dlopen (bench/results/gpu_crash_hypotheses.txt)
  echo "# $(grep -h PRETTY_NAME /etc/os-release 2>/dev/null | cut -d= -f2); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  t0=$SECONDS
  rm -rf "$site" "$base/libspecrt.so"
  xz -dc "$pack" | tar -xf - -C "$base"
  echo "# unpacked $(du -sh "$site" | cut -f1) in $((SECONDS - t0)) s"
  if [ "$mode" = gpu ]; then
    nvidia-smi -L || true
    # cuBLAS and the CUDA runtime: the module's RUNPATH looks in pip's nvidia folders, which the device image
    # lacks; its toolkit has them
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
      [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  export SPECTUNE_SPECRT=$base/libspecrt.so SPECTUNE_CACHE_DIR=$work/cache
  budget=290; [ "$mode" = cpu ] && budget=240
  args=(run --mode "$mode" --site "$site" --work "$work" --budget-s "${GPU_CHECK_BUDGET_S:-$budget}" --diagnose)
  [ -n "$out" ] && args+=(--out-dir "$out")
  PYTHONUNBUFFERED=1 "$py" bench/gpu_check.py "${args[@]}"
} 2>&1 | tee "$log"
