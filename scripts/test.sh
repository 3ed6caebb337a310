#!/usr/bin/env bash
# Sets up everything (idempotent) and runs the whole test suite, import contracts included.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "$root"
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
.venv/bin/lint-imports
exec .venv/bin/python -m pytest "$@"
