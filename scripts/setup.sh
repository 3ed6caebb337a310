#!/usr/bin/env bash
# Sets up everything SpecTune needs in ./.venv, idempotently:
#   1. a virtual environment with the project and its test tools;
#   2. llama-cpp-python==$LLAMA_CPP_VERSION built once with the server tools
#      (llama-server, llama-bench, ...) and kept as a wheel in the user cache,
#      keyed by version and build flags, because pip's own wheel cache ignores
#      CMAKE_ARGS;
#   3. the native runtime (native/, libspecrt) built against that llama.cpp.
# A second run with nothing changed takes a few seconds.
#
#   scripts/setup.sh            CPU build, or CUDA when nvcc and an NVIDIA GPU are both present
#   scripts/setup.sh --cuda     force the CUDA build (CMAKE_CUDA_ARCHITECTURES honoured)
#   scripts/setup.sh --cpu      force the CPU build
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# the one pin: pyproject.toml's "llama-cpp-python==VERSION" (engine.llama.install reads it too)
LLAMA_CPP_VERSION=$(sed -n 's/^ *"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml | head -n 1)
[ -n "$LLAMA_CPP_VERSION" ] || { echo "setup.sh: no llama-cpp-python==VERSION pin in pyproject.toml" >&2; exit 1; }

variant=${SPECTUNE_VARIANT:-auto}
for arg in "$@"; do
  case "$arg" in
    --cuda) variant=cuda ;;
    --cpu) variant=cpu ;;
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
if [ "$variant" = cuda ]; then
  cmake_args="$cmake_args -DGGML_CUDA=on"
  if [ -z "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then
    # the architectures of the GPUs present (or a clear error): part of the wheel's cache key
    CMAKE_CUDA_ARCHITECTURES=$("$vpy" packaging/cuda_arch.py) || exit 1
  fi
  if [ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then
    cmake_args="$cmake_args -DCMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES"
  fi
fi
key="$LLAMA_CPP_VERSION-$variant-$(printf '%s' "$cmake_args" | sha256sum | cut -c1-12)"
wheel_dir="$cache/llama/wheels/$key"
wheel=$(ls "$wheel_dir"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  say "building llama-cpp-python $LLAMA_CPP_VERSION ($variant, with llama-server); about 6 minutes on 2 cores, once"
  mkdir -p "$wheel_dir.tmp"
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$vpy" -m pip wheel -q --no-deps --no-cache-dir -w "$wheel_dir.tmp" "$sdist"
  rm -rf "$wheel_dir" && mv "$wheel_dir.tmp" "$wheel_dir"
  wheel=$(ls "$wheel_dir"/llama_cpp_python-*.whl | head -n 1)
fi

# --- 3. the project and its Python dependencies -----------------------------
stamp=.venv/.spectune-setup
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16) $wheel"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  say "installing the project and its dependencies into .venv"
  "$vpy" -m pip install -q --upgrade pip >/dev/null
  "$vpy" -m pip install -q --force-reinstall --no-deps "$wheel"
  "$vpy" -m pip install -q -e ".[test]"
  printf '%s' "$want" > "$stamp"
fi

# --- 4. the native runtime ---------------------------------------------------
SPECTUNE_SDIST="$sdist" "$vpy" -m engine.runtime.native_build
say "ready ($variant): .venv/bin/spectune"
