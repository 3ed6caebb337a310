#!/usr/bin/env bash
# Headless smoke test of the built bundle. Exit status 0 means every check passed.
#
#   bash packaging/smoke_test.sh [BUNDLE_DIR]      (default dist/spectune)
#
# It copies the bundle to a fresh folder first, so that nothing can lean on the
# path it was built at, and runs it with an empty cache and config and without
# PYTHONPATH, LD_LIBRARY_PATH or SPECTUNE_SPECRT:
#   1. the llama.cpp libraries, libspecrt, llama-server and ggml's backend modules resolve inside the
#      bundle (ldd);
#   2. `spectune server-path` names the bundled server, which starts on its own (--version) and loads
#      a CPU backend module from its own folder; `spectune gpus --json` names the same one;
#   3. `spectune -m engine.runtime.worker`, the way engine.runtime.client starts the worker, says hello;
#   4. `spectune run ... --json` on a synthetic pair (written by `python -m testmodels.synthetic`
#      with the project's Python) drafts, accepts and reports; the bundled llama-quantize runs by itself;
#   5. `spectune --selftest` with QT_QPA_PLATFORM=offscreen: the desktop app loads the demo
#      pair through the frozen worker, runs a short generation and exits 0.
# PYTHON names the interpreter for step 4's model writer (default .venv/bin/python).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src_bundle=$(cd "${1:-$root/dist/spectune}" && pwd)
py=${PYTHON:-$root/.venv/bin/python}
[ -x "$src_bundle/spectune" ] || { echo "smoke_test.sh: no bundle at $src_bundle (run packaging/build_linux.sh)" >&2; exit 1; }
[ -x "$py" ] || py=python3

work=$(mktemp -d "${TMPDIR:-/tmp}/spectune-smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -a "$src_bundle" "$work/bundle"
bundle="$work/bundle"
exe="$bundle/spectune"
llama="$bundle/_internal/llama/site-packages"
export SPECTUNE_CACHE_DIR="$work/cache" XDG_CONFIG_HOME="$work/config" XDG_CACHE_HOME="$work/xdg-cache"
unset PYTHONPATH LD_LIBRARY_PATH SPECTUNE_SPECRT SPECTUNE_SDIST
failures=0
step() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; failures=$((failures + 1)); }
t0=$SECONDS

step "1. bundled libraries resolve inside the bundle (copied to $bundle)"
modules=("$llama"/bin/libggml-*.so)
[ -e "${modules[0]}" ] || fail "no ggml backend module (libggml-*.so) in $llama/bin"
echo "${#modules[@]} backend modules in $llama/bin"
for f in "$llama/bin/llama-server" "$llama/bin/llama-quantize" "$llama/lib/libspecrt.so" "${modules[@]}"; do
  out=$(ldd "$f")
  # libcuda.so.1 is the NVIDIA driver's own library, never bundled: a CUDA module on a machine without the
  # driver lacks it, and llama.cpp then runs on the CPU (step 2 shows it)
  lacking=$(grep "not found" <<<"$out" | grep -v "^[[:space:]]*libcuda\.so\.1 " || true)
  if [ -n "$lacking" ]; then fail "$f: $(tr -s ' \t\n' ' ' <<<"$lacking")"; fi
  # llama.cpp's libraries and the CUDA runtime a CUDA bundle carries must come from the bundle itself
  while read -r lib where; do
    if [[ "$where" != "$bundle"/* ]]; then fail "$(basename "$f") takes $lib from $where, outside the bundle"; fi
  done < <(awk '$1 ~ /^lib(llama|llama-common|ggml|ggml-base|cudart|cublas|cublasLt)\.so\./ && $3 ~ /^\// {print $1, $3}' <<<"$out")
done
echo "llama-server, llama-quantize, libspecrt and the backend modules: every library found (but a missing driver's), llama.cpp's and the CUDA runtime's from the bundle"
# every Qt library a kept plugin or module links must be in the bundle (system libraries such as
# libwayland-* may be missing on a test machine without them, and come from the desktop anyway)
internal="$bundle/_internal"
missing=$(find "$internal" -name '*.so*' -type f -print0 | xargs -0 -n 40 env LD_LIBRARY_PATH="$internal" ldd 2>/dev/null \
  | grep -E '^\s*lib(Qt6|pyside6|shiboken6|llama|ggml)[^ ]* => not found' | sort -u || true)
if [ -z "$missing" ]; then echo "Qt, PySide6 and llama.cpp libraries: none missing"
else fail "libraries missing from the bundle: $missing"; fi

step "2. spectune server-path, and the server runs on its own"
server=$("$exe" server-path)
echo "$server"
[[ "$server" == "$llama/bin/llama-server" ]] || fail "server-path printed $server, not the bundled server"
if version=$("$server" --version 2>&1); then grep -m1 -i "version" <<<"$version" || true
else fail "the bundled llama-server does not start without LD_LIBRARY_PATH: $version"; fi
# run from elsewhere: it must take its CPU module from its own folder (-v logs which one)
loaded=$(cd / && "$server" -v --list-devices 2>&1 | sed -n 's/.*loaded CPU backend from //p' | head -n 1)
echo "llama-server loads ${loaded:-no CPU backend}"
[[ "$loaded" == "$llama/bin/libggml-cpu-"* ]] || fail "llama-server did not load a CPU module from $llama/bin"
gpus=$("$exe" gpus --json 2>"$work/gpus.err") || { fail "spectune gpus --json failed: $(tail -3 "$work/gpus.err")"; gpus='{}'; }
if ! "$py" - "$gpus" "$loaded" "$llama/bin" <<'EOF'; then fail "spectune gpus --json does not report the module llama-server loads"; fi
import json, sys
b = json.loads(sys.argv[1]).get("backends", {})
print(f"spectune gpus: the {b.get('cpu_variant')} variant from {b.get('directory')}")
sys.exit(0 if b.get("directory") == sys.argv[3] and sys.argv[2].endswith(f"libggml-cpu-{b.get('cpu_variant')}.so") else 1)
EOF

step "3. the frozen worker, started as engine.runtime.client starts it"
hello=$(printf '%s\n' '{"cmd": "shutdown", "id": 1}' | "$exe" -m engine.runtime.worker 2>"$work/worker.err" | head -n 1 || true)
if grep -q '"event":"hello"' <<<"$hello"; then echo "${hello:0:160}..."
else fail "no hello from '$exe -m engine.runtime.worker': ${hello:-nothing}; stderr: $(tail -3 "$work/worker.err")"; fi
if "$exe" -m engine.not_a_worker >/dev/null 2>&1; then fail "-m with another module should be refused"; fi

step "4. spectune run --json on a synthetic pair"
(cd "$root" && "$py" -m testmodels.synthetic "$work/pair" >/dev/null)
# the bundled llama-quantize (the CPU probe's) runs by itself too
if (cd / && "$llama/bin/llama-quantize" "$work/pair/draft.gguf" "$work/draft-q8_0.gguf" Q8_0 >"$work/quantize.log" 2>&1) \
  && [ -s "$work/draft-q8_0.gguf" ]; then echo "the bundled llama-quantize wrote draft-q8_0.gguf"
else fail "the bundled llama-quantize failed: $(tail -3 "$work/quantize.log")"; fi
run_json=$("$exe" run --target "$work/pair/target.gguf" --draft "$work/pair/draft.gguf" --spec-type draft-simple \
  --draft-n-max 4 --prompt "def the value of the data is" --max-tokens 48 --baseline --json 2>"$work/run.err") \
  || { fail "spectune run exited non-zero: $(tail -5 "$work/run.err")"; run_json='{}'; }
if ! "$py" - "$run_json" <<'EOF'; then fail "spectune run --json did not report a speculative run"; fi
import json, sys
s = json.loads(sys.argv[1])
print(f"tokens {s.get('tokens_generated')}  {s.get('tokens_per_s', 0):.1f} tok/s  drafted {s.get('drafted')}  "
      f"accepted {s.get('accepted')}  acceptance {s.get('acceptance_rate', 0):.3f}  speedup {s.get('speedup')}  "
      f"baseline text matches {s.get('baseline_text_matches')}")
sys.exit(0 if s.get("tokens_generated", 0) > 0 and s.get("drafted", 0) > 0 and s.get("baseline_text_matches") else 1)
EOF

step "5. spectune --selftest (offscreen)"
if QT_QPA_PLATFORM=offscreen timeout 300 "$exe" --selftest >"$work/selftest.out" 2>"$work/selftest.err"; then
  grep "selftest:" "$work/selftest.err" || true
else
  fail "--selftest exited $?: $(tail -8 "$work/selftest.err")"
fi

printf '\nbundle %s, %s; checks took %ss\n' "$src_bundle" "$(du -sh "$src_bundle" | cut -f1)" $((SECONDS - t0))
if [ "$failures" -gt 0 ]; then echo "SMOKE TEST FAILED ($failures)"; exit 1; fi
echo "SMOKE TEST PASSED"
