#!/usr/bin/env bash
# Sets up everything SpecTune needs in ./.venv, idempotently:
#   1. a virtual environment with the project and its test tools (not with --app);
#   2. llama-cpp-python==$LLAMA_CPP_VERSION built once with the tools SpecTune runs
#      (llama-server, llama-quantize) and kept as a wheel in the user cache,
#      keyed by version and build flags, because pip's own wheel cache ignores
#      CMAKE_ARGS;
#   3. the native runtime (native/, libspecrt) built against that llama.cpp.
# A second run with nothing changed takes a few seconds.
#
#   scripts/setup.sh            CPU build, or CUDA when nvcc and an NVIDIA GPU are both present
#   scripts/setup.sh --cuda     force the CUDA build (CMAKE_CUDA_ARCHITECTURES honoured)
#   scripts/setup.sh --cpu      force the CPU build
#   scripts/setup.sh --portable llama.cpp's CPU backend for every x86-64 level (what the bundles and the
#                               GPU check carry to other machines) instead of this machine's alone
#   scripts/setup.sh --app      without the test tools (pytest, ruff, mypy, ...): what scripts/run.sh needs
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# the one pin: pyproject.toml's "llama-cpp-python==VERSION" (engine.llama.install reads it too)
LLAMA_CPP_VERSION=$(sed -n 's/^ *"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml | head -n 1)
[ -n "$LLAMA_CPP_VERSION" ] || { echo "setup.sh: no llama-cpp-python==VERSION pin in pyproject.toml" >&2; exit 1; }

variant=${SPECTUNE_VARIANT:-auto}
portable=${SPECTUNE_PORTABLE:-0}
test_tools=1
for arg in "$@"; do
  case "$arg" in
    --cuda) variant=cuda ;;
    --cpu) variant=cpu ;;
    --portable) portable=1 ;;
    --app) test_tools=0 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
if [ "$variant" = auto ]; then
  variant=cpu
  if command -v nvcc >/dev/null 2>&1 && command -v nvidia-smi >/dev/null 2>&1 \
     && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    variant=cuda
  fi
fi

say() { printf '[setup] %s\n' "$*" >&2; }

# --- 1. virtual environment -------------------------------------------------
py=${PYTHON:-}
if [ -z "$py" ]; then
  for cand in python3.11 python3.12 python3.10 python3; do
    if command -v "$cand" >/dev/null 2>&1; then py=$cand; break; fi
  done
fi
[ -n "$py" ] || { echo "setup.sh: no python3 found; install Python 3.10+" >&2; exit 1; }
for tool in cmake c++; do
  command -v "$tool" >/dev/null 2>&1 || { echo "setup.sh: '$tool' is missing; install CMake and a C++ compiler (apt-get install cmake g++)" >&2; exit 1; }
done
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $py"
  "$py" -m venv .venv
fi
vpy="$root/.venv/bin/python"

# --- 2. llama-cpp-python with the server tools, built once ------------------
cache=${SPECTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spectune}
sdist_dir="$cache/llama/sdist"
sdist="$sdist_dir/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
if [ ! -f "$sdist" ]; then
  say "downloading the llama-cpp-python $LLAMA_CPP_VERSION source (it also supplies common/ headers for native/)"
  mkdir -p "$sdist_dir"
  "$vpy" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$sdist_dir"
fi

cmake_args="-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAVA_BUILD=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_TOOLS_INSTALL=ON"
# Every backend is a module loaded at run time (GGML_BACKEND_DL), as in llama.cpp's desktop releases:
# the CPU module(s) and, in a CUDA build, ggml's CUDA module install into bin/ beside llama-server, which
# looks for them in its own folder.
cmake_args="$cmake_args -DGGML_BACKEND_DL=ON"
# The tools in bin/ and the modules beside them find lib/ relative to themselves, wherever the venv
# or the bundle lies, so llama-server runs without LD_LIBRARY_PATH (lib/../lib is lib/ for the libraries).
cmake_args="$cmake_args -DCMAKE_INSTALL_RPATH=\$ORIGIN/../lib"
# The CPU backend. A source install runs where it was built, so by default it gets one CPU module with the
# features this CPU has (packaging/cpu_features.py): about 10 CPU-minutes, 5 minutes on 2 idle cores.
# --portable compiles it once per x86-64 level (GGML_CPU_ALL_VARIANTS; ggml loads the best one the CPU
# supports), so that one wheel runs on any x86-64 PC, as the bundles and the GPU check need: about 17
# CPU-minutes, 9 minutes on 2 idle cores (bench/results/llama_wheel-native.txt, -cpu.txt).
if [ "$portable" = 1 ]; then
  cpu_args=$("$vpy" packaging/cpu_features.py --portable)
  kind=cpu  # the key packaging/build_linux.sh and bench/gpu_check.sh look for
else
  cpu_args=$("$vpy" packaging/cpu_features.py)
  kind=native
fi
# Of llama.cpp's tools only llama-server and llama-quantize are built (packaging/llama_tools.cmake says
# why and how). Its path stays out of the key, so that every clone on this machine shares one wheel.
tools_cmake=packaging/llama_tools.cmake
tools_args="-DCMAKE_PROJECT_INCLUDE=$root/$tools_cmake"
# The CUDA variant is this CPU wheel plus ggml's CUDA module (step 2b), so both start here.
key="$LLAMA_CPP_VERSION-$kind-$(printf '%s %s' "$cmake_args" "$cpu_args" | cat - "$tools_cmake" | sha256sum | cut -c1-12)"
wheel_dir="$cache/llama/wheels/$key"
wheel=$(ls "$wheel_dir"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
extras=""
[ "$test_tools" = 1 ] && extras=test
[ "$variant" = cuda ] && extras=${extras:+$extras,}cuda
deps_pid=""
if [ -z "$wheel" ]; then
  # The Python dependencies install while llama.cpp compiles: pip mostly waits on the network and the disk,
  # so this takes 10-20 s off a first setup. Step 3 waits for it and completes whatever it left undone.
  deps=$("$vpy" packaging/dependencies.py ${extras:+--extras "$extras"} --without llama-cpp-python)
  # pip is upgraded in step 3, not here: the build's own pip runs from this venv meanwhile
  # shellcheck disable=SC2086  # one argument per requirement; none holds a space
  "$vpy" -m pip install -q $deps >.venv/dependencies.log 2>&1 &
  deps_pid=$!
  trap '[ -z "$deps_pid" ] || wait "$deps_pid" 2>/dev/null || true' EXIT  # no pip left writing to .venv
  jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
  say "building llama-cpp-python $LLAMA_CPP_VERSION with llama-server, for $([ "$kind" = cpu ] && echo 'every x86-64 level: about 9' || echo 'this CPU: about 5') minutes on 2 idle cores, once"
  rm -rf "$wheel_dir.tmp" && mkdir -p "$wheel_dir.tmp"
  started=$SECONDS
  times > "$wheel_dir.tmp/times"  # second line: CPU time of this script's finished children (user, system)
  CMAKE_ARGS="$cmake_args $cpu_args $tools_args" CMAKE_BUILD_PARALLEL_LEVEL=$jobs \
    "$vpy" -m pip wheel -q --no-deps --no-cache-dir -w "$wheel_dir.tmp" "$sdist"
  times >> "$wheel_dir.tmp/times"
  # what bench/llama_wheel.py reports: how long this build took, and how. The CPU seconds and the load
  # average tell a build slowed by other work on a shared machine from a slow build.
  cpu_seconds=$(awk 'NR % 2 == 0 { for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s[NR] += t[1] * 60 + t[2] } }
    END { printf "%d", s[4] - s[2] }' "$wheel_dir.tmp/times")
  rm -f "$wheel_dir.tmp/times"
  printf 'seconds %s\ncpu_seconds %s\njobs %s\ncpus %s\nload %s\ndate %s\ncmake_args %s\n' "$((SECONDS - started))" \
    "$cpu_seconds" "$jobs" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')" \
    "$(date -u +%Y-%m-%dT%H:%MZ)" "$cmake_args $cpu_args -DCMAKE_PROJECT_INCLUDE=$tools_cmake" > "$wheel_dir.tmp/build.txt"
  rm -rf "$wheel_dir" && mv "$wheel_dir.tmp" "$wheel_dir"
  wheel=$(ls "$wheel_dir"/llama_cpp_python-*.whl | head -n 1)
fi

# --- 2b. the CUDA variant: that wheel plus ggml's CUDA backend module ------------
# Only the CUDA code is compiled (packaging/cuda_build.py): cuBLAS and the runtime come from the pinned
# nvidia-* wheels of pyproject's "cuda" extra, nvcc from the toolkit, and where no NVIDIA driver is
# installed the build links a stub libcuda that is never shipped.
if [ "$variant" = cuda ]; then
  command -v nvcc >/dev/null 2>&1 || { echo "setup.sh: --cuda needs nvcc (the CUDA toolkit's compiler, 13.0; or pip install nvidia-cuda-nvcc==13.0.88 and put its bin/ on PATH)" >&2; exit 1; }
  if [ -z "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then
    # the GPUs present, or with none the default list of packaging/cuda_arch.py (Turing to Blackwell)
    CMAKE_CUDA_ARCHITECTURES=$("$vpy" packaging/cuda_arch.py) || exit 1
  fi
  # a CUDA wheel on the native CPU wheel is keyed apart, so that bundles never take it
  cuda_kind=cuda; [ "$kind" = native ] && cuda_kind=native-cuda
  cuda_key="$LLAMA_CPP_VERSION-$cuda_kind-$(printf '%s|%s|%s' "$key" "$CMAKE_CUDA_ARCHITECTURES" "$(sed -n '/^cuda = /p' pyproject.toml)" | sha256sum | cut -c1-12)"
  cuda_dir="$cache/llama/wheels/$cuda_key"
  cuda_wheel=$(ls "$cuda_dir"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$cuda_wheel" ]; then
    say "compiling ggml's CUDA backend for $CMAKE_CUDA_ARCHITECTURES, once: about 90 CPU-minutes per architecture (45 minutes on 2 cores, 6 on 16)"
    rm -rf "$cuda_dir.tmp"
    "$vpy" packaging/cuda_build.py wheel --cpu-wheel "$wheel" --sdist "$sdist" \
      --architectures "$CMAKE_CUDA_ARCHITECTURES" --jobs "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" --out "$cuda_dir.tmp"
    rm -rf "$cuda_dir" && mv "$cuda_dir.tmp" "$cuda_dir"
    cuda_wheel=$(ls "$cuda_dir"/llama_cpp_python-*.whl | head -n 1)
  fi
  wheel=$cuda_wheel
fi

# --- 3. the project and its Python dependencies -----------------------------
if [ -n "$deps_pid" ]; then
  wait "$deps_pid" || say "installing the dependencies during the build failed (.venv/dependencies.log); once more now"
  deps_pid=""
fi
stamp=.venv/.spectune-setup
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16) $wheel"
have=$(cat "$stamp" 2>/dev/null || true)
# a venv set up with the test tools serves --app as it is; one set up without them gets them when asked
if [ "$have" != "$want [$extras]" ] && { [ "$test_tools" = 1 ] || [ "$have" != "$want [test${extras:+,$extras}]" ]; }; then
  say "installing the project and its dependencies into .venv"
  "$vpy" -m pip install -q --upgrade pip >/dev/null
  "$vpy" -m pip install -q --force-reinstall --no-deps "$wheel"
  "$vpy" -m pip install -q -e ".${extras:+[$extras]}"
  printf '%s' "$want [$extras]" > "$stamp"
fi

# --- 4. the native runtime ---------------------------------------------------
SPECTUNE_SDIST="$sdist" "$vpy" -m engine.runtime.native_build >&2  # its path on stderr: run.sh demo --json keeps stdout JSON
say "ready ($variant): .venv/bin/spectune"
