#!/usr/bin/env bash
# The H200's crash (SIGSEGV inside dlopen(libspecrt) once ggml's CUDA module was loaded,
# bench/results/gpu_check-2026-12-04-1332.txt) recreated as far as a machine without a driver allows, and
# issue 48's hypotheses checked there. Writes its findings to stdout; bench/results/gpu_crash_hypotheses.txt
# keeps a run with the verdicts.
#
#   bash bench/gpu_crash_repro.sh
#
# Needs: `bash bench/gpu_check.sh --prepare` done (the CUDA variant for sm_90 unpacked in
# /tmp/gpu_check/site-packages, libspecrt built against it: the device's layout, byte for byte), the
# cuBLAS and runtime wheels of the 'cuda' extra in .venv or the CUDA worktree's venv, a Python 3.12
# (pyenv's; the device ran /usr/lib/python3.12) with numpy and pyyaml on PYTHONPATH, and cc.
# What stands in for the device: a libcuda.so.1 made from cuda.h whose every function fails
# (packaging/cuda_build.py's link stub), so the CUDA module and cuBLAS load and ggml's CUDA backend
# registers with no device, instead of the real driver with one H200.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
base=/tmp/gpu_check
site=$base/site-packages
py312=${PY312:-$(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -n 1 || true)}
extras=${PY312_EXTRAS:-/tmp/py312-extras}   # numpy, pyyaml for that Python (pip install --target)
stub=/tmp/gpu_crash_stub
[ -x "$py312" ] || { echo "no Python 3.12 (set PY312)" >&2; exit 1; }
[ -f "$site/bin/libggml-cuda.so" ] || { echo "no CUDA module in $site: run bench/gpu_check.sh --prepare after the sm_90 CUDA build" >&2; exit 1; }
[ -d "$extras/numpy" ] || "$py312" -m pip install -q --target "$extras" numpy pyyaml
cublas=$(ls -d "$root"/.venv/lib/python3*/site-packages/nvidia/cu13/lib /work/wt-cuda/.venv/lib/python3*/site-packages/nvidia/cu13/lib 2>/dev/null | head -n 1 || true)
[ -n "$cublas" ] || { echo "no pip cuBLAS (nvidia-cublas) found" >&2; exit 1; }
cuda_h=$(ls /usr/local/cuda*/include/cuda.h "$cublas"/../include/cuda.h 2>/dev/null | head -n 1 || true)
mkdir -p "$stub"
[ -f "$stub/libcuda.so.1" ] || PYTHONPATH=packaging "$py312" -c \
  "import sys; from pathlib import Path; from cuda_build import libcuda_stub; libcuda_stub(Path(sys.argv[1]), Path(sys.argv[2]))" \
  "$stub/libcuda.so.1" "$cuda_h"

export LD_LIBRARY_PATH="$stub:$cublas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$site:$extras:$root"
export SPECTUNE_SPECRT=$base/libspecrt.so SPECTUNE_CACHE_DIR=$base/repro-cache
echo "# $(date -u +%FT%TZ) $("$py312" --version) ($py312); $(ldd --version | head -n 1); CUDA module $(stat -c %s "$site/bin/libggml-cuda.so") B; cuBLAS from $cublas; libcuda: the failing stub"

models=$base/repro-models
[ -f "$models/target.gguf" ] || "$py312" bench/gpu_models.py "$models" --n-embd 256 --n-layer 4 --n-head 4 --n-head-kv 2 --n-ff 768 >/dev/null

rm -f "$base"/repro-lddebug-*
for order in modules-first specrt-first; do
  echo "## the lab's library loading, $order (the H200 died in modules-first), under LD_DEBUG=files,bindings"
  set +e
  LD_DEBUG=files,bindings LD_DEBUG_OUTPUT=$base/repro-lddebug-$order timeout 120 \
    "$py312" -X faulthandler bench/gpu_check.py diagnose "$models" 0 "$order" > "$base/repro-$order.log" 2>&1
  rc=$?
  set -e
  grep -h "\[diagnose\]" "$base/repro-$order.log" | cut -c1-220
  echo "exit status $rc ($( [ $rc -eq 0 ] && echo clean || echo FAILED))"
  echo "objects opened, in order: $(cat "$base"/repro-lddebug-"$order".* | grep -c 'file=.*\[0\];  generating link map')"
  echo "initialisers called last: $(cat "$base"/repro-lddebug-"$order".* | grep 'calling init' | tail -n 4 | sed 's/.*calling init: //' | tr '\n' ' ')"
  # hypothesis 4 at run time: a symbol of libspecrt or of llama.cpp's libraries bound to the CUDA module, cuBLAS,
  # the CUDA runtime or the driver (the loader's own record of every binding it made)
  across=$(cat "$base"/repro-lddebug-"$order".* | grep -E 'binding file [^ ]*/(libspecrt\.so|libllama[^/ ]*\.so[^/ ]*|libggml(-base)?\.so[^/ ]*) \[0\] to [^ ]*(ggml-cuda|cublas|cudart|libcuda)' || true)
  echo "bindings from libspecrt / llama.cpp's libraries to CUDA's objects: $(printf '%s' "$across" | grep -c . || true)"
  printf '%s\n' "$across" | head -n 5 | sed 's/^ *[0-9]*: *//' | cut -c1-240
done

echo "## the worker's mapped objects and the four hypotheses (bench/loaded_objects.py)"
set +e
"$py312" bench/loaded_objects.py --python "$py312" --pythonpath "$site:$extras"
echo "loaded_objects exit status $?"
