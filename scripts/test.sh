#!/usr/bin/env bash
# Sets up everything (idempotent) and runs the whole test suite: import contracts, lint, format and
# types first (seconds), then pytest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "$root"
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
.venv/bin/lint-imports
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
